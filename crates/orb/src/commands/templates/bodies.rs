//! The bodies an acquire of a template would send to a Kubernetes provider, for
//! `orb templates render` (prints them) and `orb templates validate` (checks them, and with
//! `--server` has the apiserver dry-run them). The native spec hatch renders them when both
//! switches are on; otherwise the typed builders do. Either way the security audit runs on the
//! final bodies, as it does before a real create. Rendering itself is
//! [`crate::template_checks::render_bodies`], shared with `GET /api/v1/templates/{id}/render`;
//! this module resolves the provider for the CLI and names bodies in messages.

use std::path::Path;

use orb_core::config::ProviderEntry;
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, layer_from_config_value};
use orb_k8s::native_spec::app_native_spec_enabled;
use serde_json::{Value, json};

use crate::context::LoadedConfig;
use crate::failure::{CliResult, Failure};
use crate::provider_factory::KUBERNETES_TYPES;

/// A Kubernetes provider entry, resolved without contacting the cluster, with the same
/// native spec context an acquire gets.
pub(crate) struct K8sTarget {
    provider: K8sProvider,
    /// The provider configuration's own warnings, printed with the command's output.
    warnings: Vec<String>,
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
        let warnings = resolved
            .warnings
            .iter()
            .map(|w| format!("provider {:?}: {w}", entry.name))
            .collect();
        let provider = K8sProvider::new(resolved)
            .map_err(|e| misconfigured(e.to_string()))?
            .with_native_spec_context(application_enabled, Some(config_dir.to_path_buf()));
        Ok(Some(Self { provider, warnings }))
    }

    /// The provider configuration's warnings (e.g. an ignored `namespace`), never dropped.
    pub(crate) fn config_warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The provider, built exactly as for an acquire (its client is built on first use).
    pub(crate) fn provider(&self) -> &K8sProvider {
        &self.provider
    }
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
