//! One bad value per rule; each message must name the field, its source, the problem and a fix.

use rstest::rstest;
use serde_json::{Value, json};

use super::tests_precedence::{resolve, template};
use super::*;

fn only_issue(result: Result<ResolvedConfig, ConfigErrors>) -> String {
    let errors = result.expect_err("the value must be refused");
    assert_eq!(errors.issues.len(), 1, "expected one issue, got:\n{errors}");
    errors.issues[0].to_string()
}

fn assert_message(message: &str, starts_with: &str, problem: &str, fix: &str) {
    assert!(
        message.starts_with(starts_with),
        "{message:?}\nshould start with {starts_with:?}"
    );
    let (got_problem, got_fix) = message
        .split_once("; fix: ")
        .expect("every message carries a fix");
    assert!(
        got_problem.contains(problem),
        "{message:?}\nshould say {problem:?}"
    );
    assert!(got_fix.contains(fix), "{message:?}\nfix should say {fix:?}");
}

#[rstest]
#[case::unknown_key(json!({"namespase": "orb"}),
    "namespase (from file /etc/orb/config.json)", "unknown key 'namespase'", "the closest valid key is 'namespace'")]
#[case::unknown_nested_key(json!({"naming": {"uuid_char": 10}}),
    "naming.uuid_char (from file", "unknown key 'naming.uuid_char'", "'naming.uuid_chars'")]
#[case::naming_not_an_object(json!({"naming": "orb"}),
    "naming (from file", "\"orb\" is not an object", "write 'naming' as an object")]
#[case::bool_not_bool(json!({"watch_enabled": "sometimes"}),
    "watch_enabled (from file", "\"sometimes\" is not a boolean", "write true or false")]
#[case::blank_kubeconfig_path(json!({"kubeconfig_path": "  "}),
    "kubeconfig_path (from file", "the path is blank", "leave it unset to use KUBECONFIG")]
#[case::blank_context(json!({"context": ""}),
    "context (from file", "the context name is blank", "name a context")]
#[case::namespace_not_a_label(json!({"namespace": "Team_A"}),
    "namespace (from file", "\"Team_A\" is not a valid namespace name", "use a DNS-1123 label such as \"team-a\"")]
#[case::namespace_subdomain_is_not_enough(json!({"namespace": "production.jobs"}),
    "namespace (from file", "\"production.jobs\" is not a valid namespace name", "\"production-jobs\"")]
#[case::namespaces_empty(json!({"namespaces": []}),
    "namespaces (from file", "the list is empty", "use [\"*\"] for cluster-wide")]
#[case::namespaces_star_not_alone(json!({"namespaces": ["*", "a"]}),
    "namespaces (from file", "\"*\" is combined with other entries", "use [\"*\"] alone")]
#[case::namespaces_bad_entry(json!({"namespaces": ["ok", "Not-OK"]}),
    "namespaces (from file", "entry \"Not-OK\" is not a valid namespace name", "\"not-ok\"")]
#[case::namespaces_duplicate(json!({"namespaces": ["a", "a"]}),
    "namespaces (from file", "entry \"a\" is listed twice", "list each namespace once")]
#[case::namespaces_not_a_list(json!({"namespaces": "team-a"}),
    "namespaces (from file", "\"team-a\" is not a list of strings", "[\"team-a\",\"team-b\"]")]
#[case::label_prefix_slash(json!({"label_prefix": "orb.io/x"}),
    "label_prefix (from file", "\"orb.io/x\" is not a valid RFC 1123 subdomain", "without '/' or spaces")]
#[case::label_prefix_space(json!({"label_prefix": "orb io"}),
    "label_prefix (from file", "\"orb io\" is not a valid RFC 1123 subdomain", "such as \"orb.io\"")]
#[case::label_prefix_uppercase(json!({"label_prefix": "Orb.IO"}),
    "label_prefix (from file", "must consist of lowercase letters", "lowercase DNS name")]
#[case::node_selector_bad_key(json!({"default_node_selector": {"bad key": "x"}}),
    "default_node_selector.bad key (from file", "\"bad key\" is not a valid label key", "use a node label key")]
#[case::node_selector_bad_value(json!({"default_node_selector": {"workload": "two words"}}),
    "default_node_selector.workload (from file", "\"two words\" is not a valid label value", "at most 63 letters")]
#[case::node_selector_number_value(json!({"default_node_selector": {"gpu": 1}}),
    "default_node_selector.gpu (from file", "1 is a number, not a string", "quote it")]
#[case::toleration_bad_operator(json!({"default_tolerations": [{"key": "k", "operator": "In"}]}),
    "default_tolerations (from file", "entry 0: operator \"In\" must be \"Equal\" or \"Exists\"", "fix the toleration")]
#[case::toleration_exists_with_value(json!({"default_tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
    "default_tolerations (from file", "operator \"Exists\" must not have a value", "fix the toleration")]
#[case::tolerations_not_a_list(json!({"default_tolerations": {"key": "k"}}),
    "default_tolerations (from file", "is not a list of tolerations", "write a JSON list")]
#[case::pull_secret_name(json!({"default_image_pull_secret": "Registry Creds"}),
    "default_image_pull_secret (from file", "\"Registry Creds\" is not a valid Secret name", "\"orb-registry\"")]
#[case::pod_timeout_negative(json!({"pod_timeout_seconds": -1}),
    "pod_timeout_seconds (from file", "-1 is negative", "use a whole number of at least 1")]
#[case::pod_timeout_zero(json!({"pod_timeout_seconds": 0}),
    "pod_timeout_seconds (from file", "0 is out of range", "at least 1")]
#[case::stale_cache_negative(json!({"stale_cache_timeout_seconds": -600}),
    "stale_cache_timeout_seconds (from file", "-600 is negative", "at least 0")]
#[case::orphan_gc_interval_zero(json!({"orphan_gc_interval_seconds": 0}),
    "orphan_gc_interval_seconds (from file", "0 is out of range", "at least 1")]
#[case::orphan_min_age_fraction(json!({"orphan_min_age_seconds": 1.5}),
    "orphan_min_age_seconds (from file", "1.5 is not a whole number", "whole number")]
#[case::resync_negative(json!({"periodic_resync_interval_seconds": -180}),
    "periodic_resync_interval_seconds (from file", "-180 is negative", "at least 0")]
#[case::status_cache_negative(json!({"controller_status_cache_ttl_seconds": -5.0}),
    "controller_status_cache_ttl_seconds (from file", "-5.0 is negative", "at least 0")]
#[case::breaker_threshold_zero(json!({"circuit_breaker_failure_threshold": 0}),
    "circuit_breaker_failure_threshold (from file", "0 is out of range", "at least 1")]
#[case::breaker_reset_negative(json!({"circuit_breaker_reset_timeout": -60}),
    "circuit_breaker_reset_timeout (from file", "-60 is negative", "at least 1")]
#[case::max_retries_negative(json!({"max_retries": -3}),
    "max_retries (from file", "-3 is negative", "at least 0")]
#[case::retry_base_negative(json!({"retry_base_delay": -1}),
    "retry_base_delay (from file", "-1 is negative", "at least 0")]
#[case::retry_max_below_base(json!({"retry_base_delay": 10, "retry_max_delay": 5}),
    "retry_max_delay (from file /etc/orb/config.json) and retry_base_delay (from file", "retry_max_delay 5 is smaller than retry_base_delay 10", "raise retry_max_delay")]
#[case::version_unparseable(json!({"min_kubernetes_version": "latest"}),
    "min_kubernetes_version (from file", "\"latest\" cannot be parsed", "MAJOR.MINOR such as \"1.28\"")]
#[case::version_as_number(json!({"min_kubernetes_version": 1.3}),
    "min_kubernetes_version (from file", "1.3 is a number, not a string", "quote it: \"1.3\"")]
#[case::prefix_too_long(json!({"naming": {"prefix": "a".repeat(21), "uuid_chars": 8}}),
    "naming.prefix (from file", "has 21 characters, more than the 20 allowed", "at most 20 characters")]
#[case::prefix_not_a_label(json!({"naming": {"prefix": "My_Orb"}}),
    "naming.prefix (from file", "\"My_Orb\" is not a valid DNS-1123 label segment", "\"my-orb\"")]
#[case::prefix_trailing_hyphen(json!({"naming": {"prefix": "orb-"}}),
    "naming.prefix (from file", "\"orb-\" is not a valid DNS-1123 label segment", "starting and ending with a letter or digit")]
#[case::uuid_chars_too_few(json!({"naming": {"uuid_chars": 7}}),
    "naming.uuid_chars (from file", "7 is out of range", "from 8 to 32")]
#[case::uuid_chars_too_many(json!({"naming": {"uuid_chars": 33}}),
    "naming.uuid_chars (from file", "33 is out of range", "from 8 to 32")]
#[case::pod_budget_over_63(json!({"naming": {"max_pod_name_len": 64}}),
    "naming.max_pod_name_len (from file", "64 is out of range", "from 1 to 63")]
// 20 + 1 + 27 = 48: over Deployment (47) only; Job 50, StatefulSet 57 and Pod 63 - 5 still fit.
#[case::deployment_budget_overflow(json!({"naming": {"prefix": "a".repeat(20), "uuid_chars": 27}}),
    "naming.prefix (from file /etc/orb/config.json) and naming.uuid_chars (from file /etc/orb/config.json) and naming.max_deployment_name_len (from default)",
    "Deployment names would be 48 characters (prefix 20 + '-' + 27 uuid chars), over the Deployment budget of 47",
    "shorten naming.prefix to at most 19 characters, lower naming.uuid_chars to at most 26, or raise naming.max_deployment_name_len")]
#[case::pod_budget_overflow(json!({"naming": {"max_pod_name_len": 28}}),
    "naming.prefix (from default) and naming.uuid_chars (from default) and naming.max_pod_name_len (from file",
    "Pod names would be 29 characters (prefix 3 + '-' + 20 uuid chars + '-0000'), over the Pod budget of 28",
    "shorten naming.prefix to at most 2 characters, lower naming.uuid_chars to at most 19, or raise naming.max_pod_name_len")]
fn each_rule_names_field_source_and_fix(
    #[case] block: Value,
    #[case] starts_with: &str,
    #[case] problem: &str,
    #[case] fix: &str,
) {
    assert_message(
        &only_issue(resolve(Some(block), &[], None)),
        starts_with,
        problem,
        fix,
    );
}

#[rstest]
#[case::env_bool(
    "ORB_K8S_EMIT_LEGACY_LABELS",
    "nope",
    "emit_legacy_labels (from env ORB_K8S_EMIT_LEGACY_LABELS)",
    "\"nope\" is not a boolean",
    "write true or false"
)]
#[case::env_number(
    "ORB_K8S_MAX_RETRIES",
    "three",
    "max_retries (from env ORB_K8S_MAX_RETRIES)",
    "\"three\" is not a whole number",
    "at least 0"
)]
#[case::env_negative(
    "ORB_K8S_POD_TIMEOUT_SECONDS",
    "-30",
    "pod_timeout_seconds (from env ORB_K8S_POD_TIMEOUT_SECONDS)",
    "\"-30\" is negative",
    "at least 1"
)]
#[case::env_list_not_json(
    "ORB_K8S_NAMESPACES",
    "team-a,team-b",
    "namespaces (from env ORB_K8S_NAMESPACES)",
    "\"team-a,team-b\" is not valid JSON",
    "'[\"team-a\",\"team-b\"]'"
)]
#[case::env_label_prefix(
    "ORB_K8S_LABEL_PREFIX",
    "orb.io/",
    "label_prefix (from env ORB_K8S_LABEL_PREFIX)",
    "\"orb.io/\" is not a valid RFC 1123 subdomain",
    "orb.example.com"
)]
#[case::env_naming_prefix(
    "ORB_K8S_NAMING__PREFIX",
    "ORB",
    "naming.prefix (from env ORB_K8S_NAMING__PREFIX)",
    "\"ORB\" is not a valid DNS-1123 label segment",
    "\"my-orb\""
)]
#[case::env_unknown(
    "ORB_K8S_POD_TIMEOUT_SECS",
    "30",
    "ORB_K8S_POD_TIMEOUT_SECS (from env ORB_K8S_POD_TIMEOUT_SECS)",
    "unknown environment variable ORB_K8S_POD_TIMEOUT_SECS",
    "the closest valid variable is ORB_K8S_POD_TIMEOUT_SECONDS"
)]
#[case::env_unknown_nested(
    "ORB_K8S_NAMING__PREFIXX",
    "x",
    "ORB_K8S_NAMING__PREFIXX (from env",
    "unknown environment variable",
    "ORB_K8S_NAMING__PREFIX"
)]
#[case::env_naming_not_json(
    "ORB_K8S_NAMING",
    "my-orb",
    "naming (from env ORB_K8S_NAMING)",
    "\"my-orb\" is not a JSON object",
    "ORB_K8S_NAMING__<FIELD>"
)]
#[case::env_version(
    "ORB_K8S_MIN_KUBERNETES_VERSION",
    "1",
    "min_kubernetes_version (from env ORB_K8S_MIN_KUBERNETES_VERSION)",
    "\"1\" cannot be parsed",
    "MAJOR.MINOR"
)]
fn env_errors_name_the_variable(
    #[case] var: &str,
    #[case] value: &str,
    #[case] starts_with: &str,
    #[case] problem: &str,
    #[case] fix: &str,
) {
    assert_message(
        &only_issue(resolve(None, &[(var, value)], None)),
        starts_with,
        problem,
        fix,
    );
}

#[rstest]
#[case::template_unknown_key(json!({"pod_timeout_secs": 30}),
    "pod_timeout_secs (from template tpl-gpu)", "unknown key 'pod_timeout_secs'", "'pod_timeout_seconds'")]
#[case::template_bad_naming(json!({"naming": {"prefix": "GPU"}}),
    "naming.prefix (from template tpl-gpu)", "\"GPU\" is not a valid DNS-1123 label segment", "e.g. \"my-orb\"")]
#[case::template_operator_key(json!({"namespace": "gpu"}),
    "namespace (from template tpl-gpu)", "may not override \"namespace\"", "ORB_K8S_NAMESPACE")]
fn template_errors_name_the_template(
    #[case] overrides: Value,
    #[case] starts_with: &str,
    #[case] problem: &str,
    #[case] fix: &str,
) {
    let result = resolve(None, &[], Some(template("tpl-gpu", overrides)));
    assert_message(&only_issue(result), starts_with, problem, fix);
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let errors = resolve(
        Some(json!({"label_prefix": "Bad Prefix", "namespaces": []})),
        &[
            ("ORB_K8S_MAX_RETRIES", "-1"),
            ("ORB_K8S_NAMING__UUID_CHARS", "4"),
        ],
        Some(template("t1", json!({"watch_enabld": true}))),
    )
    .unwrap_err();
    let fields: Vec<&str> = errors
        .issues
        .iter()
        .map(|i| i.fields[0].field.as_str())
        .collect();
    assert_eq!(
        fields,
        vec![
            "max_retries",
            "naming.uuid_chars",
            "watch_enabld",
            "namespaces",
            "label_prefix"
        ],
        "{errors}"
    );
    assert!(
        errors
            .to_string()
            .starts_with("invalid Kubernetes provider configuration (5 problems):")
    );
}

#[test]
fn a_refused_later_value_does_not_hide_the_earlier_valid_one() {
    // The bad env value is reported; the rules still see the file's (valid) value, so nothing
    // else is reported about it.
    let errors = resolve(
        Some(json!({"namespace": "orb"})),
        &[("ORB_K8S_NAMESPACES", "not json")],
        None,
    )
    .unwrap_err();
    assert_eq!(errors.issues.len(), 1, "{errors}");
}

fn warnings_for(block: Value) -> Vec<String> {
    resolve(Some(block), &[], None)
        .expect("warnings do not block loading")
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Seed 002's kill switch stays meaningful only with the audit rejecting: the hatch with
/// reject mode (or the audit) off is a configuration error, as in the reference.
#[rstest]
#[case::reject_off(json!({"native_spec_enabled": true, "reject_high_risk_pod_fields": false}),
    "native_spec_enabled (from file /etc/orb/config.json) and reject_high_risk_pod_fields (from file /etc/orb/config.json)",
    "high-risk pod fields are only logged, not refused", "set reject_high_risk_pod_fields=true")]
#[case::audit_off(json!({"native_spec_enabled": true, "audit_high_risk_pod_fields": false}),
    "native_spec_enabled (from file /etc/orb/config.json) and audit_high_risk_pod_fields (from file /etc/orb/config.json)",
    "the pod-spec audit is off", "set audit_high_risk_pod_fields=true")]
fn native_spec_without_reject_mode_is_a_config_error(
    #[case] block: Value,
    #[case] starts_with: &str,
    #[case] problem: &str,
    #[case] fix: &str,
) {
    assert_message(
        &only_issue(resolve(Some(block), &[], None)),
        starts_with,
        problem,
        fix,
    );
}

#[test]
fn native_spec_with_reject_mode_has_no_warning() {
    assert!(warnings_for(json!({"native_spec_enabled": true})).is_empty());
    assert!(warnings_for(json!({"reject_high_risk_pod_fields": false})).is_empty());
}

#[rstest]
#[case::defaults(json!({}), &[][..])]
#[case::reject_off(json!({"reject_high_risk_pod_fields": false}), &["reject_high_risk_pod_fields (from file /etc/orb/config.json): SECURITY opt-out: reject mode is off"][..])]
#[case::audit_off(json!({"audit_high_risk_pod_fields": false, "reject_high_risk_pod_fields": false}), &["audit_high_risk_pod_fields (from file /etc/orb/config.json): SECURITY opt-out: the high-risk pod field audit is off"][..])]
#[case::native_on(json!({"native_spec_enabled": true}), &["native_spec_enabled (from file /etc/orb/config.json): SECURITY opt-in: the native spec escape hatch is on"][..])]
fn operator_opt_outs_are_listed_with_their_origin(#[case] block: Value, #[case] expected: &[&str]) {
    let resolved = resolve(Some(block), &[], None).expect("opt-outs are legal");
    let opt_outs: Vec<String> = resolved
        .security_opt_outs
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(opt_outs.len(), expected.len(), "{opt_outs:?}");
    for (got, want) in opt_outs.iter().zip(expected) {
        assert!(got.starts_with(want), "{got}");
    }
}

#[test]
fn a_namespace_outside_namespaces_is_ignored_with_one_warning() {
    let warnings = warnings_for(json!({"namespace": "orb", "namespaces": ["a", "b"]}));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "namespace (from file /etc/orb/config.json) and namespaces (from file \
             /etc/orb/config.json): namespace \"orb\" is ignored because namespaces"
        ),
        "{warnings:?}"
    );
}

#[rstest]
#[case::auto_cleanup_without_gc(json!({"auto_cleanup_orphans": true}),
    "auto_cleanup_orphans=true has no effect while orphan_gc_enabled=false")]
#[case::in_cluster_ignores_kubeconfig(json!({"in_cluster": true, "kubeconfig_path": "/k"}),
    "kubeconfig_path is ignored because in_cluster=true")]
#[case::budget_above_suffix_safe(json!({"naming": {"max_deployment_name_len": 60}}),
    "Deployment budget 60 exceeds the suffix-safe default 47")]
fn other_warnings(#[case] block: Value, #[case] expected: &str) {
    let warnings = warnings_for(block);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(expected), "{warnings:?}");
}
