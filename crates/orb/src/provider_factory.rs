//! The one place that turns a config `providers[]` entry into a [`Provider`].
//!
//! To plug a provider in, add a match arm for its `type` that parses `entry.config` and
//! returns `Arc::new(TheProvider::new(..)?)`. Everything else in the CLI talks to
//! `Arc<dyn Provider>` only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use orb_core::config::ProviderEntry;
use orb_core::provider::{Provider, ProviderError};
use serde_json::Value;

/// What a provider may need besides its own config block.
#[derive(Debug, Clone)]
pub struct ProviderContext {
    pub config_dir: PathBuf,
    pub work_dir: PathBuf,
}

/// Provider types the config may name, for messages and `orb init`.
pub const KUBERNETES_TYPES: &[&str] = &["k8s", "kubernetes"];

/// Whether `entry` configures the Kubernetes provider.
pub fn is_kubernetes(entry: &ProviderEntry) -> bool {
    KUBERNETES_TYPES.contains(&entry.provider_type.trim().to_ascii_lowercase().as_str())
}

/// [`build_provider_for_app`] with no application-level sections: every application
/// setting at its default (config.json `native_spec.enabled` counts as true).
pub fn build_provider(
    entry: &ProviderEntry,
    context: &ProviderContext,
) -> Result<Arc<dyn Provider>, ProviderError> {
    build_provider_for_app(entry, context, &BTreeMap::new())
}

/// Builds the provider `entry` names. `app_sections` are config.json's top-level sections
/// orb-core keeps raw (`AppConfig::other`); the Kubernetes provider reads `native_spec`
/// from them (the application half of the native spec switch).
pub fn build_provider_for_app(
    entry: &ProviderEntry,
    context: &ProviderContext,
    app_sections: &BTreeMap<String, Value>,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let kind = entry.provider_type.trim().to_ascii_lowercase();
    if KUBERNETES_TYPES.contains(&kind.as_str()) {
        return build_kubernetes(entry, context, app_sections);
    }
    Err(ProviderError::Misconfigured(format!(
        "provider {:?} has type {:?}, which orb does not know; use \"k8s\" (or \"kubernetes\")",
        entry.name, entry.provider_type
    )))
}

/// The Kubernetes provider: the entry's settings as the file layer, `ORB_K8S_*` from the
/// process environment over them, every problem reported at once. The cluster is contacted
/// on first use only. Native specs are read relative to the config directory.
fn build_kubernetes(
    entry: &ProviderEntry,
    context: &ProviderContext,
    app_sections: &BTreeMap<String, Value>,
) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(Arc::new(build_kubernetes_provider(
        entry,
        context,
        app_sections,
    )?))
}

/// The Kubernetes provider as its concrete type and not shared yet, for `orb serve`, which
/// gives it the views its background tasks feed before sharing it. Errors as [`build_provider_for_app`].
pub fn build_kubernetes_provider(
    entry: &ProviderEntry,
    context: &ProviderContext,
    app_sections: &BTreeMap<String, Value>,
) -> Result<orb_k8s::K8sProvider, ProviderError> {
    let kind = entry.provider_type.trim().to_ascii_lowercase();
    if !KUBERNETES_TYPES.contains(&kind.as_str()) {
        return Err(ProviderError::Misconfigured(format!(
            "provider {:?} has type {:?}; orb serve runs the Kubernetes provider only (\"k8s\" or \"kubernetes\")",
            entry.name, entry.provider_type
        )));
    }
    let label = context.config_dir.join("config.json");
    let misconfigured = |problem: String| {
        ProviderError::Misconfigured(format!("provider {:?}: {problem}", entry.name))
    };
    let file = orb_k8s::config::layer_from_config_value(&label, &entry.config)
        .map_err(|e| misconfigured(e.to_string()))?;
    let resolved = orb_k8s::config::ConfigLayers::from_process_env(Some(file))
        .resolve(None)
        .map_err(|e| misconfigured(e.to_string()))?;
    for warning in &resolved.warnings {
        tracing::warn!(provider = %entry.name, "{warning}");
    }
    let application_native_spec = orb_k8s::native_spec::app_native_spec_enabled(app_sections)
        .map_err(|e| ProviderError::Misconfigured(format!("{}: {e}", label.display())))?;
    Ok(orb_k8s::K8sProvider::new(resolved)?
        .with_native_spec_context(application_native_spec, Some(context.config_dir.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn entry(kind: &str) -> ProviderEntry {
        ProviderEntry {
            name: "p".into(),
            provider_type: kind.into(),
            enabled: true,
            default: false,
            config: serde_json::Value::Null,
            template_defaults: Default::default(),
        }
    }

    fn context() -> ProviderContext {
        ProviderContext {
            config_dir: "/c".into(),
            work_dir: "/w".into(),
        }
    }

    #[test]
    fn an_unknown_type_is_answered_clearly() {
        let err = build_provider(&entry("aws"), &context()).err().unwrap();
        assert!(err.to_string().contains("which orb does not know"), "{err}");
    }

    #[rstest]
    #[case("k8s")]
    #[case("kubernetes")]
    #[case(" Kubernetes ")]
    fn both_kubernetes_type_names_build_the_kubernetes_provider(#[case] kind: &str) {
        let mut e = entry(kind);
        e.config = serde_json::json!({"namespace": "orb", "in_cluster": false, "kubeconfig_path": "/nonexistent/kubeconfig"});
        let provider = build_provider(&e, &context()).expect("builds without contacting a cluster");
        assert_eq!(provider.provider_type(), "k8s");
    }

    #[test]
    fn a_malformed_application_native_spec_section_is_a_configuration_error() {
        let mut e = entry("k8s");
        e.config = serde_json::json!({"namespace": "orb", "in_cluster": false, "kubeconfig_path": "/nonexistent/kubeconfig"});
        let sections = BTreeMap::from([(
            "native_spec".to_string(),
            serde_json::json!({"enabled": "yes"}),
        )]);
        let err = build_provider_for_app(&e, &context(), &sections)
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(matches!(err, ProviderError::Misconfigured(_)), "{text}");
        assert!(
            text.contains("/c/config.json")
                && text.contains("native_spec.enabled must be true or false"),
            "{text}"
        );
    }

    #[test]
    fn a_bad_kubernetes_setting_is_reported_with_the_provider_name() {
        let mut e = entry("k8s");
        e.config = serde_json::json!({"namespace": "Not_A_Namespace", "naming": {"uuid_chars": 4}});
        let err = build_provider(&e, &context()).err().unwrap();
        let text = err.to_string();
        assert!(matches!(err, ProviderError::Misconfigured(_)), "{text}");
        assert!(
            text.contains("provider \"p\"") && text.contains("uuid_chars"),
            "{text}"
        );
    }
}
