//! The bodies an acquire of a template would send to a Kubernetes provider, for
//! `orb templates render` (prints them) and `orb templates validate` (checks them, and with
//! `--server` has the apiserver dry-run them). The native spec hatch renders them when both
//! switches are on; otherwise the typed builders do. Either way the security audit runs on the
//! final bodies, as it does before a real create.

use std::path::{Path, PathBuf};

use orb_core::config::ProviderEntry;
use orb_core::template::Template;
use orb_k8s::K8sProvider;
use orb_k8s::audit::{AuditMode, enforce_audit_policy};
use orb_k8s::config::{ConfigLayers, K8sProviderConfig, layer_from_config_value};
use orb_k8s::naming::{ResourceKind, pod_names};
use orb_k8s::native_spec::{
    NativeSpecCheck, NativeSpecInput, NativeSpecSwitches, PREVIEW_REQUEST_ID, PreviewRequest,
    app_native_spec_enabled, check_native_spec, render_native_body, resource_kind,
};
use orb_k8s::spec::{BuiltWorkload, SpecInputs, build_workload};
use serde_json::{Value, json};

use crate::context::LoadedConfig;
use crate::failure::{CliResult, Failure};
use crate::provider_factory::KUBERNETES_TYPES;

/// A Kubernetes provider entry, resolved without contacting the cluster.
pub(crate) struct K8sTarget {
    provider: K8sProvider,
    switches: NativeSpecSwitches,
    config_dir: PathBuf,
}

impl K8sTarget {
    /// `None` when `entry` is not a Kubernetes provider.
    pub(crate) fn for_entry(
        loaded: &LoadedConfig,
        entry: &ProviderEntry,
        config_dir: &Path,
    ) -> CliResult<Option<Self>> {
        let kind = entry.provider_type.trim().to_ascii_lowercase();
        if !KUBERNETES_TYPES.contains(&kind.as_str()) {
            return Ok(None);
        }
        let misconfigured =
            |problem: String| Failure::invalid(format!("provider {:?}: {problem}", entry.name));
        let label = loaded.file.display().to_string();
        let file = layer_from_config_value(&loaded.file, &entry.config)
            .map_err(|e| misconfigured(e.to_string()))?;
        let resolved = ConfigLayers::from_process_env(Some(file))
            .resolve(None)
            .map_err(|e| misconfigured(e.to_string()))?;
        let application_enabled = app_native_spec_enabled(&loaded.config.other)
            .map_err(|e| Failure::invalid(format!("{label}: {e}")))?;
        let switches = NativeSpecSwitches {
            provider_enabled: resolved.config.native_spec_enabled,
            application_enabled,
        };
        let provider = K8sProvider::new(resolved).map_err(|e| misconfigured(e.to_string()))?;
        Ok(Some(Self {
            provider,
            switches,
            config_dir: config_dir.to_path_buf(),
        }))
    }
}

/// Which path built the bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyPath {
    NativeSpec,
    Typed,
}

impl BodyPath {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::NativeSpec => "native_spec",
            Self::Typed => "typed",
        }
    }
}

/// The bodies one acquire would send, in order.
pub(crate) struct RenderedBodies {
    pub path: BodyPath,
    pub bodies: Vec<Value>,
    /// Ignored fields, "native_spec is ignored because …", audit findings in warn mode.
    pub warnings: Vec<String>,
    /// The template's effective provider config (its kubeconfig is used for `--server`).
    pub config: K8sProviderConfig,
}

pub(crate) enum Rendering {
    Ok(Box<RenderedBodies>),
    Fails {
        problems: Vec<String>,
        warnings: Vec<String>,
    },
}

fn fails(problem: impl ToString) -> Rendering {
    Rendering::Fails {
        problems: vec![problem.to_string()],
        warnings: Vec::new(),
    }
}

/// Renders what an acquire of `count` machines of `template` would send, with the placeholder
/// request id [`PREVIEW_REQUEST_ID`].
pub(crate) fn render_bodies(target: &K8sTarget, template: &Template, count: u32) -> Rendering {
    let kind = resource_kind(template.api());
    let config = match target.provider.effective_config(Some(template)) {
        Ok(config) => config,
        Err(e) => return fails(e),
    };
    let namespace = match target.provider.target_namespace(&config, template) {
        Ok(namespace) => namespace,
        Err(e) => return fails(e),
    };
    let preview = PreviewRequest {
        template,
        config: &config,
        namespace: &namespace,
        count,
        config_dir: Some(&target.config_dir),
        request_id: None,
    };
    let (first, warnings) = match check_native_spec(target.switches, kind, &preview) {
        NativeSpecCheck::NotRequested => {
            return typed_bodies(template, config, &namespace, count, Vec::new());
        }
        NativeSpecCheck::Ignored { reason } => {
            return typed_bodies(template, config, &namespace, count, vec![reason]);
        }
        NativeSpecCheck::Fails { problems, warnings } => {
            return Rendering::Fails { problems, warnings };
        }
        NativeSpecCheck::Renders { body, warnings } => (body, warnings),
    };
    let mut bodies = vec![first];
    if kind == ResourceKind::Pod && count > 1 {
        // A Pod request renders the spec once per pod, each under its own name.
        let names = match pod_names(&config.naming, PREVIEW_REQUEST_ID, count) {
            Ok(names) => names,
            Err(e) => return fails(e),
        };
        for name in names.iter().skip(1) {
            let input = NativeSpecInput {
                template,
                config: &config,
                request_id: PREVIEW_REQUEST_ID,
                name,
                namespace: &namespace,
                count,
                config_dir: Some(&target.config_dir),
            };
            let body = match render_native_body(kind, &input) {
                Ok(body) => body,
                Err(e) => return fails(e),
            };
            if let Err(rejection) = enforce_audit_policy(AuditMode::from_config(&config), &body) {
                return fails(rejection);
            }
            bodies.push(body);
        }
    }
    Rendering::Ok(Box::new(RenderedBodies {
        path: BodyPath::NativeSpec,
        bodies,
        warnings,
        config,
    }))
}

fn typed_bodies(
    template: &Template,
    config: K8sProviderConfig,
    namespace: &str,
    count: u32,
    mut warnings: Vec<String>,
) -> Rendering {
    let kind = resource_kind(template.api());
    let inputs = SpecInputs {
        template,
        config: &config,
        request_id: PREVIEW_REQUEST_ID,
        namespace,
        count,
    };
    let built = match build_workload(&inputs, kind) {
        Ok(built) => built,
        Err(e) => {
            return Rendering::Fails {
                problems: vec![e.to_string()],
                warnings,
            };
        }
    };
    let to_json = |v: Result<Value, serde_json::Error>| v.unwrap_or(Value::Null);
    // Workloads (audited) and the StatefulSet's headless Service (no pods, not audited).
    let (workloads, service): (Vec<Value>, Option<Value>) = match built {
        BuiltWorkload::Pods(pods) => (
            pods.iter()
                .map(|p| to_json(serde_json::to_value(p)))
                .collect(),
            None,
        ),
        BuiltWorkload::Deployment(d) => (vec![to_json(serde_json::to_value(&d))], None),
        BuiltWorkload::StatefulSet(set, svc) => (
            vec![to_json(serde_json::to_value(&set))],
            Some(to_json(serde_json::to_value(&svc))),
        ),
        BuiltWorkload::Job(job) => (vec![to_json(serde_json::to_value(&job))], None),
    };
    let mode = AuditMode::from_config(&config);
    for body in &workloads {
        match enforce_audit_policy(mode, body) {
            Ok(findings) => {
                warnings.extend(findings.iter().map(|f| format!("high-risk pod field: {f}")))
            }
            Err(rejection) => {
                return Rendering::Fails {
                    problems: vec![rejection.to_string()],
                    warnings,
                };
            }
        }
    }
    warnings.dedup();
    let mut bodies = workloads;
    bodies.extend(service);
    Rendering::Ok(Box::new(RenderedBodies {
        path: BodyPath::Typed,
        bodies,
        warnings,
        config,
    }))
}

/// One body as it is, several as a `v1` `List` (what `kubectl create -f` also reads).
pub(crate) fn as_document(bodies: &[Value]) -> Value {
    match bodies {
        [one] => one.clone(),
        many => json!({"apiVersion": "v1", "kind": "List", "items": many}),
    }
}

/// `metadata.name` of a body, for messages.
pub(crate) fn body_name(body: &Value) -> &str {
    body.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

/// `kind` of a body, for messages.
pub(crate) fn body_kind(body: &Value) -> &str {
    body.get("kind").and_then(Value::as_str).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_body_is_printed_as_it_is_and_several_as_a_list() {
        let pod =
            |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
        assert_eq!(as_document(&[pod("a")]), pod("a"));
        let list = as_document(&[pod("a"), pod("b")]);
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"], json!([pod("a"), pod("b")]));
        assert_eq!(
            (body_kind(&list["items"][1]), body_name(&list["items"][1])),
            ("Pod", "b")
        );
        assert_eq!((body_kind(&json!({})), body_name(&json!({}))), ("?", "?"));
    }
}
