//! Source precedence: defaults < file < env < template, leaf by leaf, with provenance.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rstest::rstest;
use serde_json::{Value, json};

use super::*;

pub(super) const FILE: &str = "/etc/orb/config.json";

pub(super) fn file_layer(block: Value) -> FileLayer {
    FileLayer {
        path: PathBuf::from(FILE),
        block: block.as_object().expect("test block is an object").clone(),
    }
}

pub(super) fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn template(id: &str, values: Value) -> TemplateOverrides {
    TemplateOverrides {
        template_id: id.into(),
        values: values.as_object().expect("overrides are an object").clone(),
    }
}

pub(super) fn resolve(
    file: Option<Value>,
    env_pairs: &[(&str, &str)],
    overrides: Option<TemplateOverrides>,
) -> Result<ResolvedConfig, ConfigErrors> {
    ConfigLayers::new(file.map(file_layer), env(env_pairs)).resolve(overrides.as_ref())
}

#[rstest]
#[case::default_only(None, None, None, None, Origin::Default)]
#[case::file_only(Some("file-ns"), None, None, Some("file-ns"), Origin::file(FILE))]
#[case::env_only(
    None,
    Some("env-ns"),
    None,
    Some("env-ns"),
    Origin::env("ORB_K8S_NAMESPACE")
)]
#[case::env_beats_file(
    Some("file-ns"),
    Some("env-ns"),
    None,
    Some("env-ns"),
    Origin::env("ORB_K8S_NAMESPACE")
)]
#[case::empty_env_unsets_the_file_value(
    Some("file-ns"),
    Some(""),
    None,
    None,
    Origin::env("ORB_K8S_NAMESPACE")
)]
fn namespace_precedence(
    #[case] file_ns: Option<&str>,
    #[case] env_ns: Option<&str>,
    #[case] template_ns: Option<&str>,
    #[case] expected: Option<&str>,
    #[case] expected_origin: Origin,
) {
    let file = file_ns.map(|ns| json!({ "namespace": ns }));
    let env_pairs: Vec<(&str, &str)> = env_ns
        .map(|ns| ("ORB_K8S_NAMESPACE", ns))
        .into_iter()
        .collect();
    let overrides = template_ns.map(|ns| template("tpl-1", json!({ "namespace": ns })));
    let resolved = resolve(file, &env_pairs, overrides).unwrap();
    assert_eq!(resolved.config.namespace.as_deref(), expected);
    assert_eq!(resolved.origin_of("namespace"), &expected_origin);
}

/// The third source, for a key a template may override.
#[rstest]
#[case::template_beats_env(Some(120), Some("240"), Some(900), 900, Origin::template("tpl-1"))]
#[case::template_beats_file(Some(120), None, Some(900), 900, Origin::template("tpl-1"))]
#[case::without_template_env_wins(
    Some(120),
    Some("240"),
    None,
    240,
    Origin::env("ORB_K8S_POD_TIMEOUT_SECONDS")
)]
fn template_overrides_are_the_last_source(
    #[case] file: Option<u64>,
    #[case] env_value: Option<&str>,
    #[case] per_template: Option<u64>,
    #[case] expected: u64,
    #[case] expected_origin: Origin,
) {
    let file = file.map(|v| json!({ "pod_timeout_seconds": v }));
    let env_pairs: Vec<(&str, &str)> = env_value
        .map(|v| ("ORB_K8S_POD_TIMEOUT_SECONDS", v))
        .into_iter()
        .collect();
    let overrides = per_template.map(|v| template("tpl-1", json!({ "pod_timeout_seconds": v })));
    let resolved = resolve(file, &env_pairs, overrides).unwrap();
    assert_eq!(resolved.config.pod_timeout_seconds, expected);
    assert_eq!(resolved.origin_of("pod_timeout_seconds"), &expected_origin);
}

#[test]
fn a_template_cannot_move_the_namespace_even_over_the_file() {
    let errors = resolve(
        Some(json!({"namespaces": ["orb"]})),
        &[],
        Some(template("tpl-1", json!({"namespaces": ["*"]}))),
    )
    .unwrap_err();
    assert_eq!(errors.issues.len(), 1, "{errors}");
    assert!(
        errors.issues[0]
            .to_string()
            .starts_with("namespaces (from template tpl-1): template \"tpl-1\" may not override"),
        "{errors}"
    );
}

#[rstest]
#[case::file_number_env_text(json!({"pod_timeout_seconds": 120}), &[("ORB_K8S_POD_TIMEOUT_SECONDS", "240")], 240)]
#[case::file_only(json!({"pod_timeout_seconds": 120}), &[], 120)]
#[case::env_lowercase_name(json!({}), &[("orb_k8s_pod_timeout_seconds", "90")], 90)]
fn numbers_follow_the_same_order(
    #[case] file: Value,
    #[case] env_pairs: &[(&str, &str)],
    #[case] expected: u64,
) {
    let resolved = resolve(Some(file), env_pairs, None).unwrap();
    assert_eq!(resolved.config.pod_timeout_seconds, expected);
}

#[test]
fn node_selector_merges_key_by_key_across_all_three_sources() {
    let resolved = resolve(
        Some(json!({"default_node_selector": {"workload": "orb", "zone": "a"}})),
        &[("ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE", "compute")],
        Some(template(
            "gpu",
            json!({"default_node_selector": {"workload": "gpu"}}),
        )),
    )
    .unwrap();
    let selector = resolved.config.default_node_selector.clone().unwrap();
    assert_eq!(
        selector,
        BTreeMap::from([
            ("node_type".to_string(), "compute".to_string()),
            ("workload".to_string(), "gpu".to_string()),
            ("zone".to_string(), "a".to_string()),
        ])
    );
    assert_eq!(
        resolved.origin_of("default_node_selector.node_type"),
        &Origin::env("ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE")
    );
    assert_eq!(
        resolved.origin_of("default_node_selector.workload"),
        &Origin::template("gpu")
    );
    assert_eq!(
        resolved.origin_of("default_node_selector.zone"),
        &Origin::file(FILE)
    );
}

#[test]
fn a_null_map_in_a_later_source_clears_the_earlier_entries() {
    let resolved = resolve(
        Some(json!({"default_node_selector": {"workload": "orb"}})),
        &[],
        Some(template("t", json!({"default_node_selector": null}))),
    )
    .unwrap();
    assert_eq!(resolved.config.default_node_selector, None);
    assert!(
        !resolved
            .origins
            .contains_key("default_node_selector.workload")
    );
    assert_eq!(
        resolved.origin_of("default_node_selector"),
        &Origin::template("t")
    );
}

#[test]
fn lists_are_replaced_not_merged() {
    let resolved = resolve(
        Some(json!({"namespaces": ["a", "b"]})),
        &[("ORB_K8S_NAMESPACES", r#"["team-a"]"#)],
        None,
    )
    .unwrap();
    assert_eq!(resolved.config.namespaces, Some(vec!["team-a".to_string()]));
}

#[test]
fn nested_naming_fields_keep_separate_origins() {
    let resolved = resolve(
        Some(json!({"naming": {"uuid_chars": 12}})),
        &[("ORB_K8S_NAMING__PREFIX", "my-orb")],
        None,
    )
    .unwrap();
    assert_eq!(resolved.config.naming.prefix, "my-orb");
    assert_eq!(resolved.config.naming.uuid_chars, 12);
    assert_eq!(
        resolved.origin_of("naming.prefix"),
        &Origin::env("ORB_K8S_NAMING__PREFIX")
    );
    assert_eq!(resolved.origin_of("naming.uuid_chars"), &Origin::file(FILE));
    assert_eq!(
        resolved.origin_of("naming.max_job_name_len"),
        &Origin::Default
    );
}

#[test]
fn for_template_reuses_file_and_env_and_leaves_the_base_untouched() {
    let base = resolve(
        Some(json!({"namespace": "orb"})),
        &[("ORB_K8S_POD_TIMEOUT_SECONDS", "240")],
        None,
    )
    .unwrap();
    let per_template = base
        .for_template(&template("batch", json!({"pod_timeout_seconds": 900})))
        .unwrap();
    assert_eq!(per_template.config.namespace.as_deref(), Some("orb"));
    assert_eq!(per_template.config.pod_timeout_seconds, 900);
    assert_eq!(
        per_template.origin_of("pod_timeout_seconds"),
        &Origin::template("batch")
    );
    assert_eq!(base.config.pod_timeout_seconds, 240);
}

#[test]
fn every_leaf_has_an_origin() {
    let resolved = resolve(None, &[], None).unwrap();
    for spec in schema::FIELDS {
        assert_eq!(
            resolved.origin_of(spec.path),
            &Origin::Default,
            "{}",
            spec.path
        );
        assert!(resolved.origins.contains_key(spec.path), "{}", spec.path);
    }
    assert_eq!(resolved.config, K8sProviderConfig::default());
}

#[test]
fn unrelated_env_vars_are_ignored() {
    let resolved = resolve(
        None,
        &[("HOME", "/root"), ("ORB_CONFIG_DIR", "/etc/orb")],
        None,
    )
    .unwrap();
    assert_eq!(resolved.config, K8sProviderConfig::default());
    assert!(resolved.layers().env.is_empty());
}

#[test]
fn legacy_keys_resolve_to_the_canonical_field_and_warn() {
    let resolved = resolve(
        Some(json!({"kube_config_path": "/etc/orb/kubeconfig", "orphan_min_age": 60})),
        &[],
        None,
    )
    .unwrap();
    assert_eq!(
        resolved.config.kubeconfig_path,
        Some(PathBuf::from("/etc/orb/kubeconfig"))
    );
    assert_eq!(resolved.config.orphan_min_age_seconds, 60);
    assert_eq!(
        resolved.origin_of("orphan_min_age_seconds"),
        &Origin::file(FILE)
    );
    assert_eq!(resolved.warnings.len(), 2, "{:?}", resolved.warnings);
}
