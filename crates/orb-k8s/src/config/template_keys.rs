//! Which provider settings a template's `provider_config` may override (seed 001's third
//! source), and why every other setting belongs to the operator alone.
//!
//! The list is closed: a key that is not here is refused when the templates are loaded, with
//! the template, the key and who may set it, so a template author can neither switch off the
//! security audit nor widen orb's namespace boundary, and no override is silently ignored.

use serde_json::{Map, Value};

use super::issues::{ConfigIssue, Origin};
use super::schema;

/// A setting a template may override, and why that is safe and meaningful per template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerTemplateKey {
    /// Top-level key (`naming` covers every `naming.*` field).
    pub key: &'static str,
    pub why: &'static str,
}

/// The closed list, in seed order. docs/configuration.md prints the same table.
pub const PER_TEMPLATE_KEYS: &[PerTemplateKey] = &[
    PerTemplateKey {
        key: "emit_legacy_labels",
        why: "only adds or omits one label on this template's objects",
    },
    PerTemplateKey {
        key: "default_node_selector",
        why: "shapes only this template's pods; the template's own node_selector can do as much",
    },
    PerTemplateKey {
        key: "default_tolerations",
        why: "shapes only this template's pods; the template's own tolerations can do as much",
    },
    PerTemplateKey {
        key: "default_image_pull_secret",
        why: "shapes only this template's pods; the template's own imagePullSecret can do as much",
    },
    PerTemplateKey {
        key: "pod_timeout_seconds",
        why: "status reads of this template's requests apply it (a GPU pool may need longer)",
    },
    PerTemplateKey {
        key: "delete_timed_out_pods",
        why: "status reads of this template's requests apply it",
    },
    PerTemplateKey {
        key: "naming",
        why: "names are cosmetic (orb finds its objects by label); the budgets are checked for \
              the template's own names",
    },
];

/// Why a provider setting is the operator's alone, by field (top-level key).
fn operator_reason(key: &str) -> &'static str {
    match key {
        "kubeconfig_path" | "context" | "in_cluster" => {
            "it chooses the cluster and the credentials; every request uses the provider's one \
             connection"
        }
        "namespace" | "namespaces" => {
            "the managed namespaces are orb's boundary (RBAC, the watch cache and orphan GC see \
             only them); pick one of them with the template's own `namespace` field instead"
        }
        "label_prefix" => {
            "the watch cache, reconciliation and orphan GC select objects by the provider's \
             prefix; objects with another prefix would be invisible to them"
        }
        "audit_high_risk_pod_fields" | "reject_high_risk_pod_fields" | "pod_security_profile" => {
            "it is the operator's security posture; a template cannot relax its own audit"
        }
        "native_spec_enabled" => {
            "it is the operator's kill switch for the native spec escape hatch; a template \
             cannot switch it on for itself"
        }
        "stale_cache_timeout_seconds"
        | "watch_enabled"
        | "periodic_resync_interval_seconds"
        | "node_watch_enabled"
        | "events_watch_enabled" => {
            "it configures a watch `orb serve` runs once for the whole provider"
        }
        "min_kubernetes_version" => "it is checked once against the one cluster orb talks to",
        "auto_cleanup_orphans"
        | "orphan_gc_enabled"
        | "orphan_gc_interval_seconds"
        | "orphan_min_age_seconds" => "orphan GC is one provider-wide task of `orb serve`",
        "inbound_auth_enabled" => "it protects the whole REST API of `orb serve`",
        "controller_status_cache_ttl_seconds" => {
            "the provider keeps one status cache for all \
             requests"
        }
        "circuit_breaker_failure_threshold"
        | "circuit_breaker_reset_timeout"
        | "max_retries"
        | "retry_base_delay"
        | "retry_max_delay" => {
            "the provider has one Kubernetes client and one breaker per handler for all requests"
        }
        "metrics_enabled" => "the provider registers its metrics once",
        _ => "it is a provider-wide setting",
    }
}

/// Whether a template may override the top-level key `key` (a canonical name).
pub fn allowed_per_template(key: &str) -> bool {
    PER_TEMPLATE_KEYS.iter().any(|k| k.key == key)
}

/// Where the operator sets `key`: the config.json block and the environment variable(s).
fn operator_sources(key: &str) -> String {
    let vars: Vec<String> = schema::FIELDS
        .iter()
        .filter(|f| f.path == key || f.path.split_once('.').is_some_and(|(c, _)| c == key))
        .map(schema::FieldSpec::env_var)
        .collect();
    format!(
        "config.json (the provider's block) or {}",
        if vars.is_empty() {
            format!("{}{}", schema::ENV_PREFIX, key.to_ascii_uppercase())
        } else {
            vars.join(" / ")
        }
    )
}

/// One issue per key of `values` that a template may not set. Unknown keys are left to the
/// layering (which names the closest valid key). Legacy names count as their canonical key.
pub fn refused_template_keys(template_id: &str, values: &Map<String, Value>) -> Vec<ConfigIssue> {
    let origin = Origin::template(template_id);
    let mut out = Vec::new();
    for key in values.keys() {
        let canonical = schema::canonical_for_legacy(key).unwrap_or(key);
        let known = schema::field_spec(canonical).is_some() || schema::is_container(canonical);
        if !known || allowed_per_template(canonical) {
            continue;
        }
        let written = if canonical == key {
            format!("{key:?}")
        } else {
            format!("{key:?} (the legacy name of {canonical:?})")
        };
        out.push(ConfigIssue::new(
            key.clone(),
            origin.clone(),
            format!(
                "template {template_id:?} may not override {written}: {}",
                operator_reason(canonical)
            ),
            format!(
                "remove it from the template's providerConfig; only the operator sets it, in {} \
                 (the keys a template may override are listed in docs/configuration.md)",
                operator_sources(canonical)
            ),
        ));
    }
    out
}

/// Every problem with a template's `provider_config` that is visible without the provider's
/// file and environment: not an object, or keys a template may not set. Empty = acceptable
/// at load (values are still checked when the template's effective config is resolved).
pub fn template_override_problems(template_id: &str, provider_config: &Value) -> Vec<ConfigIssue> {
    match provider_config {
        Value::Null => Vec::new(),
        Value::Object(values) => refused_template_keys(template_id, values),
        other => vec![ConfigIssue::new(
            "providerConfig",
            Origin::template(template_id),
            format!(
                "must be an object of provider settings, got {}",
                orb_core::template::wire::kind_of(other)
            ),
            "write it as {\"pod_timeout_seconds\": 600}, or remove it",
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn problems(values: Value) -> Vec<ConfigIssue> {
        template_override_problems("gpu", &values)
    }

    /// Every key of seed 001 that is not on the closed list, with the variable the operator
    /// uses instead.
    #[rstest]
    #[case::kubeconfig_path("kubeconfig_path", json!("/tmp/other"), "ORB_K8S_KUBECONFIG_PATH")]
    #[case::context("context", json!("prod"), "ORB_K8S_CONTEXT")]
    #[case::in_cluster("in_cluster", json!(false), "ORB_K8S_IN_CLUSTER")]
    #[case::namespace("namespace", json!("other"), "ORB_K8S_NAMESPACE")]
    #[case::namespaces("namespaces", json!(["*"]), "ORB_K8S_NAMESPACES")]
    #[case::label_prefix("label_prefix", json!("evil.io"), "ORB_K8S_LABEL_PREFIX")]
    #[case::stale_cache("stale_cache_timeout_seconds", json!(1), "ORB_K8S_STALE_CACHE_TIMEOUT_SECONDS")]
    #[case::watch("watch_enabled", json!(false), "ORB_K8S_WATCH_ENABLED")]
    #[case::min_version("min_kubernetes_version", json!("1.20"), "ORB_K8S_MIN_KUBERNETES_VERSION")]
    #[case::auto_cleanup("auto_cleanup_orphans", json!(true), "ORB_K8S_AUTO_CLEANUP_ORPHANS")]
    #[case::gc("orphan_gc_enabled", json!(true), "ORB_K8S_ORPHAN_GC_ENABLED")]
    #[case::gc_interval("orphan_gc_interval_seconds", json!(5), "ORB_K8S_ORPHAN_GC_INTERVAL_SECONDS")]
    #[case::gc_age("orphan_min_age_seconds", json!(0), "ORB_K8S_ORPHAN_MIN_AGE_SECONDS")]
    #[case::resync("periodic_resync_interval_seconds", json!(5), "ORB_K8S_PERIODIC_RESYNC_INTERVAL_SECONDS")]
    #[case::audit("audit_high_risk_pod_fields", json!(false), "ORB_K8S_AUDIT_HIGH_RISK_POD_FIELDS")]
    #[case::reject("reject_high_risk_pod_fields", json!(false), "ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS")]
    #[case::node_watch("node_watch_enabled", json!(true), "ORB_K8S_NODE_WATCH_ENABLED")]
    #[case::events_watch("events_watch_enabled", json!(true), "ORB_K8S_EVENTS_WATCH_ENABLED")]
    #[case::inbound_auth("inbound_auth_enabled", json!(false), "ORB_K8S_INBOUND_AUTH_ENABLED")]
    #[case::status_ttl("controller_status_cache_ttl_seconds", json!(0), "ORB_K8S_CONTROLLER_STATUS_CACHE_TTL_SECONDS")]
    #[case::breaker("circuit_breaker_failure_threshold", json!(1), "ORB_K8S_CIRCUIT_BREAKER_FAILURE_THRESHOLD")]
    #[case::breaker_reset("circuit_breaker_reset_timeout", json!(1), "ORB_K8S_CIRCUIT_BREAKER_RESET_TIMEOUT")]
    #[case::retries("max_retries", json!(0), "ORB_K8S_MAX_RETRIES")]
    #[case::retry_base("retry_base_delay", json!(0.1), "ORB_K8S_RETRY_BASE_DELAY")]
    #[case::retry_max("retry_max_delay", json!(0.1), "ORB_K8S_RETRY_MAX_DELAY")]
    #[case::metrics("metrics_enabled", json!(false), "ORB_K8S_METRICS_ENABLED")]
    #[case::native_spec("native_spec_enabled", json!(true), "ORB_K8S_NATIVE_SPEC_ENABLED")]
    fn each_operator_key_is_refused_naming_template_key_and_owner(
        #[case] key: &str,
        #[case] value: Value,
        #[case] variable: &str,
    ) {
        let found = problems(json!({ key: value }));
        assert_eq!(found.len(), 1, "{found:?}");
        let text = found[0].to_string();
        assert!(
            text.starts_with(&format!(
                "{key} (from template gpu): template \"gpu\" may not override \"{key}\""
            )),
            "{text}"
        );
        assert!(
            text.contains("config.json (the provider's block)") && text.contains(variable),
            "{text}"
        );
    }

    #[test]
    fn the_table_covers_every_field_exactly_once() {
        for spec in schema::FIELDS {
            let top = spec.path.split_once('.').map_or(spec.path, |(c, _)| c);
            let refused = !problems(json!({ top: null })).is_empty();
            assert_ne!(
                refused,
                allowed_per_template(top),
                "{top}: allowed and refused must be exclusive"
            );
        }
    }

    #[rstest]
    #[case::timeout(json!({"pod_timeout_seconds": 900, "delete_timed_out_pods": false}))]
    #[case::pod_defaults(json!({"default_node_selector": {"pool": "gpu"},
        "default_tolerations": [], "default_image_pull_secret": "regcred"}))]
    #[case::naming(json!({"naming": {"prefix": "gpu", "uuid_chars": 12}}))]
    #[case::labels(json!({"emit_legacy_labels": false}))]
    #[case::legacy_name_of_an_allowed_key(json!({"pod_timeout": 60}))]
    #[case::unknown_keys_are_left_to_the_layering(json!({"pod_timeout_secs": 60}))]
    #[case::null(Value::Null)]
    fn per_template_keys_pass(#[case] values: Value) {
        assert_eq!(problems(values), vec![]);
    }

    #[test]
    fn a_legacy_name_of_an_operator_key_is_refused_under_its_written_name() {
        let found = problems(json!({"kube_context": "prod"}));
        assert_eq!(found.len(), 1);
        assert!(
            found[0]
                .to_string()
                .contains("\"kube_context\" (the legacy name of \"context\")"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn the_audit_switch_with_a_privileged_intent_names_both_keys() {
        let found = problems(json!({
            "audit_high_risk_pod_fields": false,
            "reject_high_risk_pod_fields": false,
            "pod_timeout_seconds": 60
        }));
        let keys: Vec<&str> = found.iter().map(|i| i.fields[0].field.as_str()).collect();
        assert_eq!(
            keys,
            vec!["audit_high_risk_pod_fields", "reject_high_risk_pod_fields"]
        );
    }

    #[test]
    fn provider_config_must_be_an_object() {
        let found = problems(json!(["pod_timeout_seconds"]));
        assert_eq!(found.len(), 1);
        assert!(found[0].problem.contains("got a list"), "{}", found[0]);
    }
}
