//! The final objects of one acquire: what `K8sProvider::acquire` creates and what
//! `orb templates render` prints, from one function ([`final_workload`]) so the two cannot
//! drift apart.
//!
//! Order: the native-spec gate decides the path. When the hatch fires, each body is rendered
//! (one per pod for a Pod request, one controller otherwise), read into the Kubernetes type
//! the handler sends, and a StatefulSet gets its headless Service named by `serviceName`;
//! otherwise the typed builders run and a template's `native_spec` is ignored with a warning.
//! Then the high-risk pod field audit runs on every workload body exactly as it will be sent:
//! in reject mode a finding fails the whole request before any API call.

use std::path::Path;

use orb_core::ProviderApi;
use orb_core::template::Template;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{BuiltWorkload, SpecError, SpecInputs, build_headless_service, build_workload};
use crate::audit::{AuditPolicy, enforce_audit_policy};
use crate::config::K8sProviderConfig;
use crate::error::K8sError;
use crate::naming::pod_names;
use crate::native_spec::{
    NativeSpecDecision, NativeSpecInput, NativeSpecSwitches, decide_native_spec,
    load_native_sources, object_name, render_native_body_from, request_id_branches,
};

/// Everything that decides the final objects of one request.
#[derive(Debug, Clone, Copy)]
pub struct FinalBodyRequest<'a> {
    pub template: &'a Template,
    /// The effective config (provider config with the template's overrides).
    pub config: &'a K8sProviderConfig,
    pub request_id: &'a str,
    /// Target namespace, already checked against the provider's namespace scope.
    pub namespace: &'a str,
    pub count: u32,
    /// The two native-spec switches (provider and application).
    pub switches: NativeSpecSwitches,
    /// Config directory: default-spec overrides and relative `native_spec_path`.
    pub config_dir: Option<&'a Path>,
}

/// Which path built the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPath {
    NativeSpec,
    Typed,
}

impl BodyPath {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NativeSpec => "native_spec",
            Self::Typed => "typed",
        }
    }
}

/// The objects to send, audited.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalWorkload {
    pub path: BodyPath,
    pub built: BuiltWorkload,
    /// Ignored fields ("native_spec is ignored because …"), native fields Kubernetes does not
    /// know, and audit findings in warn mode.
    pub warnings: Vec<String>,
}

impl FinalWorkload {
    /// The bodies in the order they are sent: the workloads, then a StatefulSet's Service.
    pub fn bodies(&self) -> Vec<Value> {
        let (mut bodies, service) = workload_bodies(&self.built);
        bodies.extend(service);
        bodies
    }
}

/// Why no object of the request can be sent; nothing was created. `warnings` are those
/// gathered before the failure (e.g. why a native spec was ignored).
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct FinalBodyError {
    #[source]
    pub source: Box<K8sError>,
    pub warnings: Vec<String>,
}

fn to_value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// The workload bodies (audited) and a StatefulSet's Service (no pods, not audited).
fn workload_bodies(built: &BuiltWorkload) -> (Vec<Value>, Option<Value>) {
    match built {
        BuiltWorkload::Pods(pods) => (pods.iter().map(to_value).collect(), None),
        BuiltWorkload::Deployment(d) => (vec![to_value(d)], None),
        BuiltWorkload::StatefulSet(set, service) => (vec![to_value(set)], Some(to_value(service))),
        BuiltWorkload::Job(job) => (vec![to_value(job)], None),
    }
}

/// Decides, builds or renders, and audits the objects of one request for `kind`.
pub fn final_workload(
    request: &FinalBodyRequest<'_>,
    kind: ProviderApi,
) -> Result<FinalWorkload, FinalBodyError> {
    let mut warnings = Vec::new();
    let fail = |source: K8sError, warnings: Vec<String>| FinalBodyError {
        source: Box::new(source),
        warnings,
    };
    if let Err(e) = super::check_count(kind, request.count) {
        return Err(fail(e.into(), warnings));
    }
    let inputs = SpecInputs {
        template: request.template,
        config: request.config,
        request_id: request.request_id,
        namespace: request.namespace,
        count: request.count,
    };
    let (path, built) = match decide_native_spec(request.switches, request.template) {
        NativeSpecDecision::Use { warnings: ignored } => {
            warnings.extend(ignored);
            match native_workload(request, &inputs, kind, &mut warnings) {
                Ok(built) => (BodyPath::NativeSpec, built),
                Err(e) => return Err(fail(e.into(), warnings)),
            }
        }
        decision => {
            if let NativeSpecDecision::Ignored { reason } = decision {
                warnings.push(reason);
            }
            match build_workload(&inputs, kind) {
                Ok(built) => (BodyPath::Typed, built),
                Err(e) => return Err(fail(e.into(), warnings)),
            }
        }
    };
    let policy = AuditPolicy::from_config(request.config);
    let mut findings = Vec::new();
    for body in workload_bodies(&built).0 {
        match enforce_audit_policy(policy.clone(), &body) {
            Ok(found) => findings.extend(found.iter().map(|f| format!("high-risk pod field: {f}"))),
            Err(rejection) => return Err(fail(rejection.into(), warnings)),
        }
    }
    // Every pod of a Pod request has the same spec, so one finding per field is enough.
    findings.dedup();
    warnings.extend(findings);
    Ok(FinalWorkload {
        path,
        built,
        warnings,
    })
}

/// The rendered native bodies as the objects the handler sends.
fn native_workload(
    request: &FinalBodyRequest<'_>,
    inputs: &SpecInputs<'_>,
    kind: ProviderApi,
    warnings: &mut Vec<String>,
) -> Result<BuiltWorkload, SpecError> {
    let names = match kind {
        ProviderApi::Pod => pod_names(&request.config.naming, request.request_id, request.count)?,
        _ => vec![object_name(
            kind,
            &request.config.naming,
            request.request_id,
        )?],
    };
    fn input_for<'a>(request: &FinalBodyRequest<'a>, name: &'a str) -> NativeSpecInput<'a> {
        NativeSpecInput {
            template: request.template,
            config: request.config,
            request_id: request.request_id,
            name,
            namespace: request.namespace,
            count: request.count,
            config_dir: request.config_dir,
        }
    }
    let sources = load_native_sources(kind, &input_for(request, &names[0]))?;
    warnings.extend(request_id_branches(&sources));
    let mut bodies = Vec::with_capacity(names.len());
    for name in &names {
        bodies.push(render_native_body_from(
            kind,
            &input_for(request, name),
            &sources,
        )?);
    }
    let template_id = request.template.template_id.as_str();
    Ok(match kind {
        ProviderApi::Pod => BuiltWorkload::Pods(
            bodies
                .into_iter()
                .map(|body| typed_object(template_id, kind, body, warnings))
                .collect::<Result<_, _>>()?,
        ),
        ProviderApi::Deployment => BuiltWorkload::Deployment(Box::new(typed_object(
            template_id,
            kind,
            take_one(bodies),
            warnings,
        )?)),
        ProviderApi::Job => BuiltWorkload::Job(Box::new(typed_object(
            template_id,
            kind,
            take_one(bodies),
            warnings,
        )?)),
        ProviderApi::StatefulSet => {
            let set: k8s_openapi::api::apps::v1::StatefulSet =
                typed_object(template_id, kind, take_one(bodies), warnings)?;
            let service_name = set.spec.service_name.as_deref();
            if service_name.is_none_or(str::is_empty) {
                return Err(SpecError::InvalidField {
                    template_id: template_id.to_string(),
                    field: "native_spec spec.serviceName".into(),
                    error: "it is empty".into(),
                    fix: "remove it from the native spec (orb names the headless Service) or \
                          set it to a Service name"
                        .into(),
                });
            }
            let service = build_headless_service(inputs, &set)?;
            BuiltWorkload::StatefulSet(Box::new(set), Box::new(service))
        }
    })
}

fn take_one(mut bodies: Vec<Value>) -> Value {
    bodies.pop().unwrap_or(Value::Null)
}

/// Reads a rendered body as the Kubernetes type that is sent. Fields the type does not know
/// are not part of the Kubernetes API (the apiserver would drop them too); each one becomes a
/// warning so a typo does not vanish silently.
fn typed_object<T: DeserializeOwned + serde::Serialize>(
    template_id: &str,
    kind: ProviderApi,
    body: Value,
    warnings: &mut Vec<String>,
) -> Result<T, SpecError> {
    let object: T = serde_json::from_value(body.clone()).map_err(|e| SpecError::InvalidField {
        template_id: template_id.to_string(),
        field: "native_spec".into(),
        error: format!("the rendered {kind} is not a valid Kubernetes {kind}: {e}"),
        fix: "fix the field's type in the native spec (see `orb templates render`)".into(),
    })?;
    let mut dropped = Vec::new();
    unknown_fields(&body, &to_value(&object), "", &mut dropped);
    for path in dropped {
        let warning = format!(
            "template {template_id:?}: native spec field {path} is not a field of a Kubernetes \
             {kind} and is not sent; check its spelling"
        );
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    Ok(object)
}

/// Paths of non-null values in `original` that `kept` lacks.
pub(crate) fn unknown_fields(original: &Value, kept: &Value, at: &str, out: &mut Vec<String>) {
    match (original, kept) {
        (Value::Object(fields), Value::Object(kept_fields)) => {
            for (key, value) in fields {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match kept_fields.get(key) {
                    _ if value.is_null() => {}
                    None => out.push(path),
                    Some(kept_value) => unknown_fields(value, kept_value, &path, out),
                }
            }
        }
        (Value::Array(items), Value::Array(kept_items)) => {
            for (i, (item, kept_item)) in items.iter().zip(kept_items).enumerate() {
                unknown_fields(item, kept_item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SpecError;
    use orb_core::template::ProviderApi;
    use rstest::rstest;
    use serde_json::json;

    const REQUEST: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

    fn template(api: ProviderApi, native_spec: Value) -> Template {
        Template {
            template_id: "t".into(),
            provider_api: Some(api),
            container_image: Some("busybox:1.36".into()),
            native_spec: Some(native_spec),
            ..Template::default()
        }
    }

    const fn switches(provider_enabled: bool, application_enabled: bool) -> NativeSpecSwitches {
        NativeSpecSwitches {
            provider_enabled,
            application_enabled,
        }
    }

    fn run(
        t: &Template,
        cfg: &K8sProviderConfig,
        on: NativeSpecSwitches,
        count: u32,
    ) -> Result<FinalWorkload, FinalBodyError> {
        let request = FinalBodyRequest {
            template: t,
            config: cfg,
            request_id: REQUEST,
            namespace: "orb",
            count,
            switches: on,
            config_dir: None,
        };
        final_workload(&request, t.api())
    }

    const HOSTNAME: fn() -> Value = || json!({"spec": {"hostname": "from-native"}});

    #[rstest]
    #[case::provider_off(switches(false, true))]
    #[case::application_off(switches(true, false))]
    fn a_switch_off_builds_the_typed_pods_and_warns_that_native_spec_is_ignored(
        #[case] on: NativeSpecSwitches,
    ) {
        let cfg = K8sProviderConfig::default();
        let t = template(ProviderApi::Pod, HOSTNAME());
        let out = run(&t, &cfg, on, 2).expect("the typed builders run");
        assert_eq!(out.path, BodyPath::Typed);
        let bodies = out.bodies();
        assert_eq!(bodies.len(), 2);
        assert!(bodies.iter().all(|b| b["spec"].get("hostname").is_none()));
        assert!(
            out.warnings[0].starts_with("native_spec is ignored because"),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn both_switches_on_render_one_native_pod_per_machine() {
        let cfg = K8sProviderConfig::default();
        let t = template(ProviderApi::Pod, HOSTNAME());
        let out = run(&t, &cfg, switches(true, true), 3).expect("renders");
        assert_eq!(out.path, BodyPath::NativeSpec);
        let bodies = out.bodies();
        let names: Vec<&str> = bodies
            .iter()
            .map(|b| b["metadata"]["name"].as_str().unwrap())
            .collect();
        let expected = pod_names(&cfg.naming, REQUEST, 3).unwrap();
        assert_eq!(names, expected);
        for body in &bodies {
            assert_eq!(body["spec"]["hostname"], "from-native");
            assert_eq!(
                body["metadata"]["labels"]["orb.io/machine-id"],
                body["metadata"]["name"]
            );
        }
    }

    #[test]
    fn a_native_statefulset_gets_the_headless_service_its_service_name_names() {
        let cfg = K8sProviderConfig::default();
        let t = template(
            ProviderApi::StatefulSet,
            json!({"spec": {"serviceName": "my-peers"}}),
        );
        let out = run(&t, &cfg, switches(true, true), 2).expect("renders");
        let BuiltWorkload::StatefulSet(set, service) = &out.built else {
            panic!("expected a StatefulSet");
        };
        assert_eq!(set.spec.service_name.as_deref(), Some("my-peers"));
        assert_eq!(service.metadata.name.as_deref(), Some("my-peers"));
        assert_eq!(
            service.spec.as_ref().unwrap().cluster_ip.as_deref(),
            Some("None")
        );
    }

    #[rstest]
    #[case::pod(ProviderApi::Pod, json!({"spec": {"hostPID": true}}), "spec.hostPID")]
    #[case::deployment(ProviderApi::Deployment, json!({"spec": {"template": {"spec": {"hostNetwork": true}}}}), "spec.template.spec.hostNetwork")]
    fn a_high_risk_native_field_rejects_the_request(
        #[case] api: ProviderApi,
        #[case] native_spec: Value,
        #[case] path: &str,
    ) {
        let cfg = K8sProviderConfig::default();
        let err = run(&template(api, native_spec), &cfg, switches(true, true), 1).unwrap_err();
        assert!(matches!(*err.source, K8sError::Audit(_)), "{err}");
        assert!(err.to_string().contains(path), "{err}");
    }

    #[test]
    fn warn_mode_lets_the_body_through_with_one_warning_per_field() {
        let cfg = K8sProviderConfig {
            reject_high_risk_pod_fields: false,
            ..K8sProviderConfig::default()
        };
        let t = template(ProviderApi::Pod, json!({"spec": {"hostIPC": true}}));
        let out = run(&t, &cfg, switches(true, true), 3).expect("warn mode proceeds");
        let risky: Vec<_> = out
            .warnings
            .iter()
            .filter(|w| w.starts_with("high-risk pod field: spec.hostIPC"))
            .collect();
        assert_eq!(risky.len(), 1, "{:?}", out.warnings);
    }

    #[test]
    fn native_fields_kubernetes_does_not_know_are_warned_about() {
        let cfg = K8sProviderConfig::default();
        let t = template(ProviderApi::Pod, json!({"spec": {"hostnme": "typo"}}));
        let out = run(&t, &cfg, switches(true, true), 1).expect("renders");
        assert!(
            out.warnings.iter().any(|w| w.contains("spec.hostnme")),
            "{:?}",
            out.warnings
        );
        assert!(out.bodies()[0]["spec"].get("hostnme").is_none());
    }

    #[test]
    fn a_native_field_of_the_wrong_type_is_a_clear_error() {
        let cfg = K8sProviderConfig::default();
        let t = template(ProviderApi::Pod, json!({"spec": {"hostNetwork": "maybe"}}));
        let err = run(&t, &cfg, switches(true, true), 1).unwrap_err();
        assert!(
            err.to_string().contains("not a valid Kubernetes Pod"),
            "{err}"
        );
    }

    /// Any count gets bodies or a clear refusal, on both paths, for every kind: never a panic.
    #[rstest]
    fn no_count_panics(
        #[values(0, 1, 2, 10_000, 100_001, 2_147_483_648, u32::MAX)] count: u32,
        #[values(
            ProviderApi::Pod,
            ProviderApi::Deployment,
            ProviderApi::StatefulSet,
            ProviderApi::Job
        )]
        api: ProviderApi,
        #[values(true, false)] native: bool,
    ) {
        let cfg = K8sProviderConfig::default();
        let t = template(api, json!({}));
        let result = run(&t, &cfg, switches(native, true), count);
        let kind = t.api();
        let allowed = super::super::check_count(kind, count).is_ok();
        match result {
            Ok(out) if allowed => {
                let expected = if kind == ProviderApi::Pod {
                    count as usize
                } else {
                    1
                };
                assert_eq!(out.built.kind(), kind);
                if kind == ProviderApi::Pod {
                    let BuiltWorkload::Pods(pods) = &out.built else {
                        unreachable!()
                    };
                    assert_eq!(pods.len(), expected);
                }
            }
            Err(e) if !allowed => {
                assert!(
                    matches!(*e.source, K8sError::Spec(SpecError::Count { .. })),
                    "{e}"
                );
            }
            other => panic!("count {count} {api} native={native}: {other:?}"),
        }
    }

    #[rstest]
    #[case::same(json!({"a": {"b": 1}}), json!({"a": {"b": 1}}), &[][..])]
    #[case::dropped_key(json!({"a": {"b": 1, "c": 2}}), json!({"a": {"b": 1}}), &["a.c"][..])]
    #[case::null_is_not_a_field(json!({"a": null}), json!({}), &[][..])]
    #[case::inside_lists(json!({"l": [{"x": 1}, {"y": 2}]}), json!({"l": [{"x": 1}, {}]}), &["l[1].y"][..])]
    fn unknown_fields_are_found_by_path(
        #[case] original: Value,
        #[case] kept: Value,
        #[case] expected: &[&str],
    ) {
        let mut out = Vec::new();
        unknown_fields(&original, &kept, "", &mut out);
        assert_eq!(out, expected);
    }
}
