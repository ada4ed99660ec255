//! Checking a config.json document without starting anything: the same checks `orb serve`
//! makes at start (the file's shape, a provider to serve, each Kubernetes provider's settings
//! with the environment over them, the `storage`, `auth`, `daemon`, `server`, `serve` and
//! `native_spec` sections). Every problem is collected, none stops the others; nothing is
//! read from or written to disk.

use std::collections::BTreeMap;
use std::path::Path;

use orb_core::config::{AppConfig, ProviderEntry};
use orb_k8s::config::{ConfigIssue, ConfigLayers, layer_from_config_value};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::hostfactory::daemon_target::DaemonSection;
use crate::provider_factory::KUBERNETES_TYPES;
use crate::serve::auth_config::check_serve_section;
use crate::serve::server::{ServerSection, config_warnings};

/// One thing wrong with the document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ConfigProblem {
    /// The setting at fault, as a key of `GET /api/v1/config/sources` where there is one
    /// (`provider.namespace`, `storage.url`), else the config.json section (`daemon`).
    #[schema(example = "provider.namespace")]
    pub field: String,
    /// The provider entry the problem belongs to, for provider settings.
    pub provider: Option<String>,
    /// Where the bad value came from (`file request body`, `env ORB_K8S_NAMESPACE`).
    pub origin: Option<String>,
    /// What is wrong and how to fix it, in one line.
    pub message: String,
    /// The fix alone, when the check gives it separately.
    pub fix: Option<String>,
}

impl ConfigProblem {
    /// A problem of a whole section (or the document), given as one message.
    pub fn section(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            provider: None,
            origin: None,
            message: message.into(),
            fix: None,
        }
    }

    fn of_provider(entry: &ProviderEntry, issue: &ConfigIssue) -> Self {
        let fields = issue
            .fields
            .iter()
            .map(|f| format!("provider.{}", f.field))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            field: fields,
            provider: Some(entry.name.clone()),
            origin: issue.fields.first().map(|f| f.origin.to_string()),
            message: format!("provider {:?}: {issue}", entry.name),
            fix: Some(issue.fix.clone()),
        }
    }
}

/// The verdict on a document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct ConfigCheck {
    pub problems: Vec<ConfigProblem>,
    /// Legal but risky or ignored settings, as `orb serve` would log them.
    pub warnings: Vec<String>,
}

/// Checks `document` as config.json (`label` names it in messages), with the `ORB_K8S_*`
/// variables of `env` over each Kubernetes provider's settings as at start.
pub fn check_document(
    document: &Value,
    label: &Path,
    env: &BTreeMap<String, String>,
) -> ConfigCheck {
    let mut check = ConfigCheck::default();
    let shown = label.display().to_string();
    let config = match AppConfig::parse(&shown, &document.to_string()) {
        Ok(config) => config,
        Err(e) => {
            check
                .problems
                .push(ConfigProblem::section("(document)", e.to_string()));
            return check;
        }
    };
    if let Err(e) = config.select_provider(None, &shown) {
        check
            .problems
            .push(ConfigProblem::section("providers", e.to_string()));
    }
    for entry in config.provider_entries() {
        check_provider(entry, label, env, &mut check);
    }
    match config_warnings(&config) {
        Ok(warnings) => check.warnings.extend(warnings),
        Err(e) => check.problems.push(ConfigProblem::section("auth", e)),
    }
    if let Some(url) = &config.storage.url {
        let known = url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://");
        if !known {
            check.problems.push(ConfigProblem::section(
                "storage.url",
                format!(
                    "storage.url {:?} is neither sqlite:… nor postgres://…; write \
                     sqlite://PATH or postgres://USER@HOST/DB",
                    orb_store::redact(url)
                ),
            ));
        }
    }
    let sections = &config.other;
    let mistakes = [
        (
            "daemon",
            DaemonSection::from_config(sections).err().map(|e| e.0),
        ),
        ("server", ServerSection::from_config(sections).err()),
        ("serve", check_serve_section(sections).err().map(|e| e.0)),
        (
            "native_spec",
            orb_k8s::native_spec::app_native_spec_enabled(sections).err(),
        ),
    ];
    for (section, mistake) in mistakes {
        if let Some(message) = mistake {
            check
                .problems
                .push(ConfigProblem::section(section, message));
        }
    }
    check
}

fn check_provider(
    entry: &ProviderEntry,
    label: &Path,
    env: &BTreeMap<String, String>,
    check: &mut ConfigCheck,
) {
    let kind = entry.provider_type.trim().to_ascii_lowercase();
    if !KUBERNETES_TYPES.contains(&kind.as_str()) {
        check.problems.push(ConfigProblem {
            field: "provider.type".into(),
            provider: Some(entry.name.clone()),
            origin: None,
            message: format!(
                "provider {:?} has type {:?}, which orb does not know; use \"k8s\" (or \"kubernetes\")",
                entry.name, entry.provider_type
            ),
            fix: Some("set \"type\": \"k8s\"".into()),
        });
        return;
    }
    let file = match layer_from_config_value(label, &entry.config) {
        Ok(file) => file,
        Err(e) => {
            check.problems.push(ConfigProblem {
                field: "provider.config".into(),
                provider: Some(entry.name.clone()),
                origin: None,
                message: format!("provider {:?}: {e}", entry.name),
                fix: None,
            });
            return;
        }
    };
    match ConfigLayers::new(Some(file), env.clone()).resolve(None) {
        Ok(resolved) => check.warnings.extend(
            resolved
                .warnings
                .iter()
                .map(|w| format!("provider {:?}: {w}", entry.name)),
        ),
        Err(errors) => check.problems.extend(
            errors
                .issues
                .iter()
                .map(|issue| ConfigProblem::of_provider(entry, issue)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(document: Value) -> ConfigCheck {
        check_document(&document, Path::new("body"), &BTreeMap::new())
    }

    #[test]
    fn a_working_config_has_no_problems() {
        let got = check(json!({"providers": [{"name": "kube", "type": "k8s",
                                              "config": {"namespace": "batch"}}]}));
        assert_eq!(got.problems, vec![]);
    }

    #[test]
    fn every_problem_is_listed_with_its_field() {
        let got = check(json!({
            "providers": [{"name": "kube", "type": "k8s",
                           "config": {"namespace": "Bad_NS", "pod_timeout_seconds": 0}}],
            "daemon": {"socket": "/a", "url": "http://b:1"},
            "storage": {"url": "mysql://x"},
        }));
        let fields: Vec<&str> = got.problems.iter().map(|p| p.field.as_str()).collect();
        for wanted in [
            "provider.namespace",
            "provider.pod_timeout_seconds",
            "daemon",
            "storage.url",
        ] {
            assert!(fields.contains(&wanted), "{wanted} not in {fields:?}");
        }
        assert!(got.problems.iter().all(|p| !p.message.is_empty()));
    }

    #[test]
    fn the_environment_is_layered_over_the_document_as_at_start() {
        let env = BTreeMap::from([("ORB_K8S_MAX_RETRIES".to_string(), "many".to_string())]);
        let got = check_document(
            &json!({"providers": [{"name": "kube", "type": "k8s"}]}),
            Path::new("body"),
            &env,
        );
        assert_eq!(got.problems.len(), 1, "{got:?}");
        assert_eq!(got.problems[0].field, "provider.max_retries");
        assert_eq!(
            got.problems[0].origin.as_deref(),
            Some("env ORB_K8S_MAX_RETRIES")
        );
    }

    #[test]
    fn a_document_that_is_not_a_config_is_one_problem() {
        let got = check(json!(["not", "an", "object"]));
        assert_eq!(got.problems.len(), 1);
        assert_eq!(got.problems[0].field, "(document)");
    }
}
