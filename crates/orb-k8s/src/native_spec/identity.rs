//! Stamping orb's identity onto a merged native body. This runs last, so nothing the operator
//! writes can remove or fake it: apiVersion/kind, name and namespace, orb's labels (reserved
//! keys the operator set are dropped first), the controller selector and the replica count.
//!
//! Before stamping, the typed builders' invariants are checked on the merged body: the pods'
//! `restartPolicy` and ServiceAccount, and for a Job `parallelism = completions = count` and `backoffLimit 0`.
//! A body (operator spec or default override) that sets one of them to anything else is
//! refused with the field's path; one that leaves it out gets the typed value. So is a body
//! that breaks seed 000's handler contracts: a Job's `podFailurePolicy`, `successPolicy`,
//! `suspend: true` or another `managedBy`, a StatefulSet's `ordinals.start` other than 0.
//! A StatefulSet keeps the template's typed `volumeClaimTemplates` unless it sets its own.

use std::collections::BTreeMap;

use orb_core::ProviderApi;
use serde_json::{Map, Value, json};

use super::NativeSpecError;
use super::context::WorkloadIdentity;
use super::source::kind_name;

/// `(apiVersion, kind)` orb creates for each API.
pub fn api_version_and_kind(api: ProviderApi) -> (&'static str, &'static str) {
    match api {
        ProviderApi::Pod => ("v1", "Pod"),
        ProviderApi::Deployment => ("apps/v1", "Deployment"),
        ProviderApi::StatefulSet => ("apps/v1", "StatefulSet"),
        ProviderApi::Job => ("batch/v1", "Job"),
    }
}

fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
    template_id: &str,
) -> Result<&'a mut Map<String, Value>, NativeSpecError> {
    let slot = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    let found = kind_name(slot);
    slot.as_object_mut()
        .ok_or_else(|| NativeSpecError::WrongShape {
            template_id: template_id.to_string(),
            path: path.to_string(),
            found,
        })
}

fn stamp_labels(
    metadata: &mut Map<String, Value>,
    path: &str,
    orb: &BTreeMap<String, String>,
    reserved: &[String],
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let labels = object_at(metadata, "labels", path, template_id)?;
    labels.retain(|key, _| !reserved.contains(key));
    for (key, value) in orb {
        labels.insert(key.clone(), json!(value));
    }
    Ok(())
}

fn check_type_field(
    body: &Map<String, Value>,
    field: &str,
    expected: &str,
    api: ProviderApi,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(found)) if found == expected => Ok(()),
        Some(found) => Err(NativeSpecError::WrongKind {
            template_id: template_id.to_string(),
            api,
            field: field.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        }),
    }
}

/// Why a body must keep a field at orb's value.
const RESTART_WHY: &str = "the handlers rely on it (a bare Pod restarts only as its template \
     says, a Job's pods never restart because orb owns retries, controllers always restart)";
const JOB_SIZE_WHY: &str = "a Job request makes exactly one pod per requested machine";
const BACKOFF_WHY: &str = "orb owns retries at the request level; the Job controller must not \
     restart failed pods";
/// Seed 000's handler contracts: a Job runs one pod per machine until orb deletes it, and a
/// StatefulSet's machines are its ordinals from 0. Each of these fields breaks that silently
/// (a returned host keeps running, or a failed one is never reported).
const JOB_CONTRACT: [(&str, &str); 4] = [
    (
        "podFailurePolicy",
        "a pod failure must fail the Job (backoffLimit 0) so orb reports the machine failed; \
         a policy can ignore it and start a replacement orb never asked for",
    ),
    (
        "successPolicy",
        "the Job must not complete while machines orb handed out still run; a success policy \
         ends it early and terminates them",
    ),
    (
        "suspend",
        "a suspended Job deletes its running pods and starts none, behind orb's back",
    ),
    (
        "managedBy",
        "the Job controller must run the Job; another controller's view of it is not one \
         orb can read",
    ),
];
const SERVICE_ACCOUNT_WHY: &str = "the pods' ServiceAccount is the template's typed \
     service_account (else machine_role), which listings show and no Jinja can change per \
     request; set it there";
const ORDINALS_WHY: &str = "orb names and returns StatefulSet machines by ordinal from 0 (the \
     highest ordinals first)";

fn check_field(
    parent: &Map<String, Value>,
    key: &str,
    path: &str,
    expected: &Value,
    why: &'static str,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(found) if found == expected => Ok(()),
        Some(found) => Err(NativeSpecError::Invariant(Box::new(
            super::InvariantBreach {
                template_id: template_id.to_string(),
                api: identity.api,
                path: path.to_string(),
                found: found.to_string(),
                expected: if expected.is_null() {
                    "the field unset".to_string()
                } else {
                    expected.to_string()
                },
                why,
            },
        ))),
    }
}

/// Refuses a merged body that changes one of the typed builders' invariants (see the module
/// docs). Shapes are not checked here: [`stamp_identity`] reports a wrong shape.
pub fn check_invariants(
    body: &Value,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let (spec_path, pod_spec) = match identity.api {
        ProviderApi::Pod => ("spec", body.get("spec")),
        _ => ("spec.template.spec", body.pointer("/spec/template/spec")),
    };
    if let Some(Value::Object(pod_spec)) = pod_spec {
        check_field(
            pod_spec,
            "restartPolicy",
            &format!("{spec_path}.restartPolicy"),
            &json!(identity.restart_policy),
            RESTART_WHY,
            identity,
            template_id,
        )?;
        // `serviceAccount` is the deprecated alias the apiserver still honours.
        for key in ["serviceAccountName", "serviceAccount"] {
            check_field(
                pod_spec,
                key,
                &format!("{spec_path}.{key}"),
                &json!(identity.service_account),
                SERVICE_ACCOUNT_WHY,
                identity,
                template_id,
            )?;
        }
    }
    if identity.api == ProviderApi::Job
        && let Some(Value::Object(spec)) = body.get("spec")
    {
        for key in ["parallelism", "completions"] {
            check_field(
                spec,
                key,
                &format!("spec.{key}"),
                &json!(identity.replicas),
                JOB_SIZE_WHY,
                identity,
                template_id,
            )?;
        }
        check_field(
            spec,
            "backoffLimit",
            "spec.backoffLimit",
            &json!(0),
            BACKOFF_WHY,
            identity,
            template_id,
        )?;
        for (key, why) in JOB_CONTRACT {
            let allowed = match key {
                "suspend" => json!(false),
                "managedBy" => json!("kubernetes.io/job-controller"),
                _ => Value::Null,
            };
            let path = format!("spec.{key}");
            check_field(spec, key, &path, &allowed, why, identity, template_id)?;
        }
    }
    if identity.api == ProviderApi::StatefulSet
        && let Some(Value::Object(ordinals)) = body.pointer("/spec/ordinals")
    {
        check_field(
            ordinals,
            "start",
            "spec.ordinals.start",
            &json!(0),
            ORDINALS_WHY,
            identity,
            template_id,
        )?;
    }
    Ok(())
}

/// Stamps `identity` onto `body` (the merged default + operator object), after
/// [`check_invariants`].
pub fn stamp_identity(
    body: &mut Value,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let api = identity.api;
    let (api_version, kind) = api_version_and_kind(api);
    let found = kind_name(body);
    let root = body
        .as_object_mut()
        .ok_or_else(|| NativeSpecError::WrongShape {
            template_id: template_id.to_string(),
            path: "(the body)".into(),
            found,
        })?;
    check_type_field(root, "apiVersion", api_version, api, template_id)?;
    check_type_field(root, "kind", kind, api, template_id)?;
    root.insert("apiVersion".into(), json!(api_version));
    root.insert("kind".into(), json!(kind));

    let reserved = &identity.reserved_label_keys;
    let metadata = object_at(root, "metadata", "metadata", template_id)?;
    metadata.insert("name".into(), json!(identity.name));
    metadata.remove("generateName");
    metadata.insert("namespace".into(), json!(identity.namespace));
    stamp_labels(
        metadata,
        "metadata.labels",
        &identity.object_labels,
        reserved,
        template_id,
    )?;
    if api == ProviderApi::Pod {
        let spec = object_at(root, "spec", "spec", template_id)?;
        spec.insert("restartPolicy".into(), json!(identity.restart_policy));
        return Ok(());
    }

    let spec = object_at(root, "spec", "spec", template_id)?;
    match api {
        ProviderApi::Deployment | ProviderApi::StatefulSet => {
            spec.insert("replicas".into(), json!(identity.replicas));
            if let Some(selector) = &identity.selector {
                spec.insert("selector".into(), json!({ "matchLabels": selector }));
            }
            if let Some(claims) = &identity.volume_claim_templates
                && spec.get("volumeClaimTemplates").is_none_or(Value::is_null)
            {
                spec.insert("volumeClaimTemplates".into(), claims.clone());
            }
        }
        ProviderApi::Job => {
            spec.insert("parallelism".into(), json!(identity.replicas));
            spec.insert("completions".into(), json!(identity.replicas));
            spec.insert("backoffLimit".into(), json!(0));
            // The apiserver then generates a selector unique to this Job; an operator's
            // selector could adopt pods that are not this request's.
            spec.remove("selector");
            spec.remove("manualSelector");
        }
        ProviderApi::Pod => {}
    }
    let pod_template = object_at(spec, "template", "spec.template", template_id)?;
    let pod_metadata = object_at(
        pod_template,
        "metadata",
        "spec.template.metadata",
        template_id,
    )?;
    stamp_labels(
        pod_metadata,
        "spec.template.metadata.labels",
        &identity.pod_labels,
        reserved,
        template_id,
    )?;
    let pod_spec = object_at(pod_template, "spec", "spec.template.spec", template_id)?;
    pod_spec.insert("restartPolicy".into(), json!(identity.restart_policy));
    Ok(())
}

#[cfg(test)]
mod tests {
    use orb_core::template::Template;
    use rstest::rstest;

    use super::*;
    use crate::config::K8sProviderConfig;
    use crate::native_spec::{NativeSpecInput, render_native_body};

    fn render(api: ProviderApi, template: &Template) -> Result<Value, NativeSpecError> {
        let config = K8sProviderConfig::default();
        let input = NativeSpecInput {
            template,
            config: &config,
            request_id: "req-1",
            name: "orb-req-1",
            namespace: "orb",
            count: 2,
            config_dir: None,
        };
        render_native_body(api, &input)
    }

    fn native(native_spec: Value) -> Template {
        Template {
            template_id: "t".into(),
            container_image: Some("busybox:1.36".into()),
            native_spec: Some(native_spec),
            ..Template::default()
        }
    }

    #[rstest]
    #[case::pod_failure_policy(ProviderApi::Job,
        json!({"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}),
        "spec.podFailurePolicy")]
    #[case::success_policy(ProviderApi::Job,
        json!({"successPolicy": {"rules": [{"succeededCount": 1}]}}), "spec.successPolicy")]
    #[case::suspend(ProviderApi::Job, json!({"suspend": true}), "spec.suspend")]
    #[case::managed_by(ProviderApi::Job, json!({"managedBy": "example.com/queue"}), "spec.managedBy")]
    #[case::ordinals(ProviderApi::StatefulSet, json!({"ordinals": {"start": 5}}), "spec.ordinals.start")]
    #[case::service_account(ProviderApi::Deployment,
        json!({"template": {"spec": {"serviceAccountName": "ops-admin"}}}), "spec.template.spec.serviceAccountName")]
    #[case::deprecated_service_account(ProviderApi::Job,
        json!({"template": {"spec": {"serviceAccount": "ops-admin"}}}), "spec.template.spec.serviceAccount")]
    fn a_native_body_that_breaks_a_handler_contract_is_refused_with_the_reason(
        #[case] api: ProviderApi,
        #[case] spec: Value,
        #[case] path: &str,
    ) {
        let err = render(api, &native(json!({ "spec": spec }))).unwrap_err();
        assert!(
            matches!(&err, NativeSpecError::Invariant(b) if b.path == path),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("remove {path}")), "{err}");
    }

    #[rstest]
    #[case::job_defaults(ProviderApi::Job, json!({"suspend": false, "managedBy": "kubernetes.io/job-controller"}))]
    #[case::ordinal_zero(ProviderApi::StatefulSet, json!({"ordinals": {"start": 0}}))]
    fn the_contracts_own_values_pass(#[case] api: ProviderApi, #[case] spec: Value) {
        render(api, &native(json!({ "spec": spec }))).unwrap();
    }

    #[test]
    fn a_native_pod_may_restate_the_templates_service_account_only() {
        let mut template = native(json!({"spec": {"serviceAccountName": "runner"}}));
        let err = render(ProviderApi::Pod, &template).unwrap_err();
        assert!(err.to_string().contains("the field unset"), "{err}");
        template.service_account = Some("runner".into());
        let body = render(ProviderApi::Pod, &template).unwrap();
        assert_eq!(body["spec"]["serviceAccountName"], "runner");
    }

    #[test]
    fn a_native_statefulset_keeps_the_templates_volume_claim_templates_unless_it_sets_its_own() {
        let claim = json!([{"metadata": {"name": "scratch"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
        let mut template = native(json!({"spec": {"podManagementPolicy": "Parallel"}}));
        template
            .extra
            .insert("volumeClaimTemplates".into(), claim.clone());
        let body = render(ProviderApi::StatefulSet, &template).unwrap();
        assert_eq!(body["spec"]["volumeClaimTemplates"], claim);

        let own = json!([{"metadata": {"name": "own"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}}}}]);
        template.native_spec = Some(json!({"spec": {"volumeClaimTemplates": own}}));
        let body = render(ProviderApi::StatefulSet, &template).unwrap();
        assert_eq!(body["spec"]["volumeClaimTemplates"], own);
    }
}
