//! Seed 001's worked example and environment-variable cheat sheet, loaded as written, plus the
//! `orb config show` renderings of the worked example (snapshots: the outside world reads them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Toleration;
use rstest::rstest;
use serde_json::{Value, json};

use super::tests_precedence::{FILE, resolve};
use super::*;

/// The worked example exactly as the seed prints it (the whole config.json).
const WORKED_EXAMPLE: &str = r#"{
  "providers": {
    "k8s": {
      "provider_type": "k8s",
      "kubeconfig_path": "/etc/orb/kubeconfig",
      "context": "prod",
      "namespaces": ["orb", "orb-batch"],
      "label_prefix": "orb.example.com",
      "emit_legacy_labels": false,
      "default_node_selector": {"workload": "orb"},
      "default_tolerations": [
        {"key": "orb", "operator": "Exists", "effect": "NoSchedule"}
      ],
      "default_image_pull_secret": "orb-registry",
      "pod_timeout_seconds": 240,
      "delete_timed_out_pods": true,
      "watch_enabled": true,
      "min_kubernetes_version": "1.28",
      "orphan_gc_enabled": true,
      "orphan_gc_interval_seconds": 600,
      "auto_cleanup_orphans": false,
      "periodic_resync_interval_seconds": 180,
      "events_watch_enabled": true,
      "reject_high_risk_pod_fields": true,
      "naming": {
        "prefix": "orb",
        "uuid_chars": 20
      }
    }
  }
}"#;

fn worked_example() -> ResolvedConfig {
    let document: Value = serde_json::from_str(WORKED_EXAMPLE).unwrap();
    let file = provider_block(Path::new(FILE), &document, "k8s").unwrap();
    ConfigLayers::new(file, BTreeMap::new())
        .resolve(None)
        .unwrap()
}

#[test]
fn worked_example_loads_with_every_value() {
    let resolved = worked_example();
    let cfg = &resolved.config;
    let expected = K8sProviderConfig {
        kubeconfig_path: Some(PathBuf::from("/etc/orb/kubeconfig")),
        context: Some("prod".into()),
        namespaces: Some(vec!["orb".into(), "orb-batch".into()]),
        label_prefix: "orb.example.com".into(),
        emit_legacy_labels: false,
        default_node_selector: Some(BTreeMap::from([("workload".into(), "orb".into())])),
        default_tolerations: Some(vec![Toleration {
            key: Some("orb".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]),
        default_image_pull_secret: Some("orb-registry".into()),
        pod_timeout_seconds: 240,
        orphan_gc_enabled: true,
        orphan_gc_interval_seconds: 600,
        periodic_resync_interval_seconds: 180,
        events_watch_enabled: true,
        ..K8sProviderConfig::default()
    };
    assert_eq!(cfg, &expected);
    assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
    assert_eq!(resolved.origin_of("context"), &Origin::file(FILE));
    assert_eq!(
        resolved.origin_of("stale_cache_timeout_seconds"),
        &Origin::Default
    );
}

#[test]
fn worked_example_describes_the_deployment_the_seed_says_it_does() {
    let cfg = worked_example().config;
    // Manages two namespaces and stays out of every other one.
    let scope = cfg.namespace_scope("default");
    assert_eq!(
        scope,
        NamespaceScope::Multi(vec!["orb".into(), "orb-batch".into()])
    );
    assert!(!scope.allows("default"));
    // Out-of-cluster auth through the dedicated kubeconfig, even inside a pod.
    let env = AuthEnvironment {
        sentinel: PathBuf::from(auth::IN_CLUSTER_SENTINEL),
        sentinel_present: true,
        home_dir: Some("/root".into()),
        ..AuthEnvironment::default()
    };
    assert_eq!(
        plan_auth(&cfg, &env).unwrap(),
        AuthPlan::Kubeconfig {
            paths: vec![PathBuf::from("/etc/orb/kubeconfig")],
            source: KubeconfigSource::ConfigField,
            context: Some("prod".into()),
        }
    );
    // Orphans are polled every ten minutes but only logged; resync backstop every 180 s.
    assert!(cfg.orphan_gc_enabled && !cfg.auto_cleanup_orphans);
    assert_eq!(cfg.orphan_gc_interval().as_secs(), 600);
    assert_eq!(
        cfg.periodic_resync_interval().map(|d| d.as_secs()),
        Some(180)
    );
    assert!(cfg.reject_high_risk_pod_fields);
}

/// Each cheat-sheet line on its own: the field takes the value and the origin names the
/// variable, so `orb config show --origin` visibly changes even where the value equals the
/// default (e.g. ORB_K8S_DELETE_TIMED_OUT_PODS="true").
#[rstest]
#[case("ORB_K8S_KUBECONFIG_PATH", "/home/op/.kube/dev", "kubeconfig_path", json!("/home/op/.kube/dev"))]
#[case("ORB_K8S_CONTEXT", "dev-cluster", "context", json!("dev-cluster"))]
#[case("ORB_K8S_IN_CLUSTER", "false", "in_cluster", json!(false))]
#[case("ORB_K8S_NAMESPACE", "orb", "namespace", json!("orb"))]
#[case("ORB_K8S_NAMESPACES", r#"["team-a","team-b"]"#, "namespaces", json!(["team-a", "team-b"]))]
#[case("ORB_K8S_LABEL_PREFIX", "orb.example.com", "label_prefix", json!("orb.example.com"))]
#[case("ORB_K8S_EMIT_LEGACY_LABELS", "false", "emit_legacy_labels", json!(false))]
#[case("ORB_K8S_POD_TIMEOUT_SECONDS", "240", "pod_timeout_seconds", json!(240))]
#[case("ORB_K8S_DELETE_TIMED_OUT_PODS", "true", "delete_timed_out_pods", json!(true))]
#[case("ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS", "false", "reject_high_risk_pod_fields", json!(false))]
#[case("ORB_K8S_ORPHAN_GC_ENABLED", "true", "orphan_gc_enabled", json!(true))]
#[case("ORB_K8S_AUTO_CLEANUP_ORPHANS", "false", "auto_cleanup_orphans", json!(false))]
#[case("ORB_K8S_PERIODIC_RESYNC_INTERVAL_SECONDS", "180", "periodic_resync_interval_seconds", json!(180))]
#[case("ORB_K8S_EVENTS_WATCH_ENABLED", "true", "events_watch_enabled", json!(true))]
#[case("ORB_K8S_INBOUND_AUTH_ENABLED", "true", "inbound_auth_enabled", json!(true))]
#[case("ORB_K8S_NAMING__PREFIX", "my-orb", "naming.prefix", json!("my-orb"))]
#[case("ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE", "compute", "default_node_selector.node_type", json!("compute"))]
fn cheat_sheet_variable_changes_the_effective_config(
    #[case] var: &str,
    #[case] value: &str,
    #[case] path: &str,
    #[case] expected: Value,
) {
    let before = resolve(None, &[], None).unwrap();
    let after = resolve(None, &[(var, value)], None).unwrap();
    let effective = serde_json::to_value(&after.config).unwrap();
    let got = path
        .split('.')
        .try_fold(&effective, |node, part| node.get(part))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(got, expected, "{path}");
    assert_eq!(after.origin_of(path), &Origin::env(var));
    let shown_before = render_effective(&before, OutputFormat::Table, true);
    let shown_after = render_effective(&after, OutputFormat::Table, true);
    assert_ne!(shown_before, shown_after);
    let row = shown_after
        .lines()
        .find(|line| line.starts_with(&format!("{path} ")))
        .unwrap_or_else(|| panic!("no row for {path} in\n{shown_after}"));
    assert!(row.ends_with(&format!("env {var}")), "{row}");
}

/// The whole cheat sheet with one namespace mode at a time (both at once: the next test).
#[rstest]
#[case::single_namespace_mode(("ORB_K8S_NAMESPACE", "orb"), None, Some(vec!["orb"]))]
#[case::multi_namespace_mode(("ORB_K8S_NAMESPACES", r#"["team-a","team-b"]"#), Some(vec!["team-a", "team-b"]), None)]
fn whole_cheat_sheet_loads(
    #[case] namespacing: (&str, &str),
    #[case] namespaces: Option<Vec<&str>>,
    #[case] namespace: Option<Vec<&str>>,
) {
    let mut sheet = vec![
        ("ORB_K8S_KUBECONFIG_PATH", "/home/op/.kube/dev"),
        ("ORB_K8S_CONTEXT", "dev-cluster"),
        ("ORB_K8S_IN_CLUSTER", "false"),
        ("ORB_K8S_LABEL_PREFIX", "orb.example.com"),
        ("ORB_K8S_EMIT_LEGACY_LABELS", "false"),
        ("ORB_K8S_POD_TIMEOUT_SECONDS", "240"),
        ("ORB_K8S_DELETE_TIMED_OUT_PODS", "true"),
        ("ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS", "false"),
        ("ORB_K8S_ORPHAN_GC_ENABLED", "true"),
        ("ORB_K8S_AUTO_CLEANUP_ORPHANS", "false"),
        ("ORB_K8S_PERIODIC_RESYNC_INTERVAL_SECONDS", "180"),
        ("ORB_K8S_EVENTS_WATCH_ENABLED", "true"),
        ("ORB_K8S_INBOUND_AUTH_ENABLED", "true"),
        ("ORB_K8S_NAMING__PREFIX", "my-orb"),
    ];
    sheet.push(namespacing);
    let cfg = resolve(None, &sheet, None).unwrap().config;
    let owned =
        |v: Option<Vec<&str>>| v.map(|l| l.into_iter().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(cfg.namespaces, owned(namespaces));
    assert_eq!(cfg.namespace, owned(namespace).map(|mut l| l.remove(0)));
    assert_eq!(cfg.context.as_deref(), Some("dev-cluster"));
    assert_eq!(cfg.in_cluster, Some(false));
    assert_eq!(cfg.label_prefix, "orb.example.com");
    assert!(!cfg.emit_legacy_labels && !cfg.reject_high_risk_pod_fields);
    assert_eq!(cfg.pod_timeout_seconds, 240);
    assert_eq!(cfg.periodic_resync_interval_seconds, 180);
    assert!(cfg.orphan_gc_enabled && cfg.events_watch_enabled && cfg.inbound_auth_enabled);
    assert_eq!(cfg.naming.prefix, "my-orb");
}

/// The cheat sheet exactly as the seed prints it: both namespace variables at once. The
/// list wins, `namespace` is ignored with one warning naming both variables, and reject mode
/// off is reported as the operator's security opt-out.
#[test]
fn the_cheat_sheet_as_printed_loads_with_namespaces_winning() {
    let sheet = [
        ("ORB_K8S_KUBECONFIG_PATH", "/home/op/.kube/dev"),
        ("ORB_K8S_CONTEXT", "dev-cluster"),
        ("ORB_K8S_IN_CLUSTER", "false"),
        ("ORB_K8S_NAMESPACE", "orb"),
        ("ORB_K8S_NAMESPACES", r#"["team-a","team-b"]"#),
        ("ORB_K8S_LABEL_PREFIX", "orb.example.com"),
        ("ORB_K8S_EMIT_LEGACY_LABELS", "false"),
        ("ORB_K8S_POD_TIMEOUT_SECONDS", "240"),
        ("ORB_K8S_DELETE_TIMED_OUT_PODS", "true"),
        ("ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS", "false"),
        ("ORB_K8S_ORPHAN_GC_ENABLED", "true"),
        ("ORB_K8S_AUTO_CLEANUP_ORPHANS", "false"),
        ("ORB_K8S_PERIODIC_RESYNC_INTERVAL_SECONDS", "180"),
        ("ORB_K8S_EVENTS_WATCH_ENABLED", "true"),
        ("ORB_K8S_INBOUND_AUTH_ENABLED", "true"),
        ("ORB_K8S_NAMING__PREFIX", "my-orb"),
    ];
    let resolved = resolve(None, &sheet, None).expect("the cheat sheet loads as printed");
    let cfg = &resolved.config;
    assert_eq!(
        cfg.namespace_scope("default"),
        crate::config::NamespaceScope::Multi(vec!["team-a".into(), "team-b".into()])
    );
    assert_eq!(cfg.default_namespace("default"), "team-a");
    let warnings: Vec<String> = resolved.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "namespace (from env ORB_K8S_NAMESPACE) and namespaces (from env ORB_K8S_NAMESPACES): \
             namespace \"orb\" is ignored because namespaces [\"team-a\", \"team-b\"]"
        ),
        "{warnings:?}"
    );
    let opt_outs: Vec<String> = resolved
        .security_opt_outs
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        opt_outs,
        vec![
            "reject_high_risk_pod_fields (from env ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS): \
             SECURITY opt-out: reject mode is off; high-risk pod fields (privileged, \
             hostNetwork, hostPath, …) are logged as warnings and the pods are created"
        ]
    );
}

#[test]
fn env_overrides_the_worked_example_file() {
    let document: Value = serde_json::from_str(WORKED_EXAMPLE).unwrap();
    let file = provider_block(Path::new(FILE), &document, "k8s").unwrap();
    let env = BTreeMap::from([
        ("ORB_K8S_CONTEXT".to_string(), "staging".to_string()),
        ("ORB_K8S_NAMESPACES".to_string(), r#"["orb"]"#.to_string()),
    ]);
    let resolved = ConfigLayers::new(file, env).resolve(None).unwrap();
    assert_eq!(resolved.config.context.as_deref(), Some("staging"));
    assert_eq!(resolved.config.namespaces, Some(vec!["orb".to_string()]));
    assert_eq!(resolved.config.label_prefix, "orb.example.com");
}

fn worked_example_with_env_and_template() -> ResolvedConfig {
    let document: Value = serde_json::from_str(WORKED_EXAMPLE).unwrap();
    let file = provider_block(Path::new(FILE), &document, "k8s").unwrap();
    let env = BTreeMap::from([
        ("ORB_K8S_POD_TIMEOUT_SECONDS".to_string(), "480".to_string()),
        (
            "ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE".to_string(),
            "compute".to_string(),
        ),
    ]);
    let overrides = TemplateOverrides {
        template_id: "gpu-workers".into(),
        values: json!({"naming": {"prefix": "gpu"}})
            .as_object()
            .unwrap()
            .clone(),
    };
    ConfigLayers::new(file, env)
        .resolve(Some(&overrides))
        .unwrap()
}

#[test]
fn unknown_variables_never_print_their_value() {
    let errors = resolve(None, &[("ORB_K8S_SECRET_TOKEN", "hunter2")], None).unwrap_err();
    assert!(!errors.to_string().contains("hunter2"), "{errors}");
}

#[test]
fn config_show_table_with_origin() {
    insta::assert_snapshot!(render_effective(
        &worked_example_with_env_and_template(),
        OutputFormat::Table,
        true
    ));
}

#[test]
fn config_show_table_without_origin() {
    insta::assert_snapshot!(render_effective(
        &worked_example(),
        OutputFormat::Table,
        false
    ));
}

#[test]
fn config_show_json_with_origin() {
    insta::assert_snapshot!(render_effective(
        &worked_example_with_env_and_template(),
        OutputFormat::Json,
        true
    ));
}

#[test]
fn config_show_json_without_origin_round_trips_into_the_model() {
    let resolved = worked_example();
    let text = render_effective(&resolved, OutputFormat::Json, false);
    let parsed: K8sProviderConfig = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, resolved.config);
}

#[test]
fn config_show_yaml_with_origin() {
    insta::assert_snapshot!(render_effective(
        &worked_example_with_env_and_template(),
        OutputFormat::Yaml,
        true
    ));
}

#[test]
fn config_show_yaml_without_origin_parses_back() {
    let resolved = worked_example();
    let text = render_effective(&resolved, OutputFormat::Yaml, false);
    let parsed: K8sProviderConfig = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(parsed, resolved.config);
}

#[test]
fn config_show_table_ends_with_the_warnings_and_the_opt_outs() {
    let resolved = resolve(
        Some(json!({"auto_cleanup_orphans": true})),
        &[("ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS", "false")],
        None,
    )
    .unwrap();
    let table = render_effective(&resolved, OutputFormat::Table, false);
    let tail: Vec<&str> = table.lines().rev().take(2).collect();
    assert!(
        tail[1].starts_with("WARNING: auto_cleanup_orphans (from file /etc/orb/config.json)"),
        "{table}"
    );
    assert!(
        tail[0].starts_with(
            "NOTE: reject_high_risk_pod_fields (from env ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS): \
             SECURITY opt-out:"
        ),
        "{table}"
    );
    let json = render_effective(&resolved, OutputFormat::Json, false);
    assert!(!json.contains("WARNING") && !json.contains("SECURITY"));
}
