//! `orb config show [--origin] [--template ID]`: the Kubernetes provider's effective settings
//! from the three sources (config.json < ORB_K8S_* < template), and where each came from.
//! No cluster is contacted: the provider is configured, never connected.

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use serde_json::{Value, json};

fn setup(root: &Path) {
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({"providers": [{"name": "kube", "type": "k8s",
                              "config": {"namespace": "from-file", "pod_timeout_seconds": 120}}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("kube_templates.json"),
        json!({"templates": [
            {"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36"},
            {"templateId": "slow", "maxNumber": 3, "imageId": "busybox:1.36",
             "providerConfig": {"pod_timeout_seconds": 900}}
        ]})
        .to_string(),
    )
    .unwrap();
}

fn orb(root: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::cargo_bin("orb").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("ORB_") || k.starts_with("HF_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ORB_ROOT_DIR", root).env("HOME", root);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(args).output().unwrap()
}

fn settings(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "orb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["provider"]["settings"].clone()
}

#[test]
fn each_source_overrides_the_one_before_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());

    let file_only = settings(&orb(root.path(), &[], &["config", "show", "--origin"]));
    assert_eq!(file_only["namespace"]["value"], "from-file");
    assert_eq!(file_only["namespace"]["origin"]["source"], "file");
    assert_eq!(file_only["label_prefix"]["origin"]["source"], "default");

    let env = [
        ("ORB_K8S_NAMESPACE", "from-env"),
        ("ORB_K8S_POD_TIMEOUT_SECONDS", "60"),
    ];
    let with_env = settings(&orb(root.path(), &env, &["config", "show", "--origin"]));
    assert_eq!(with_env["namespace"]["value"], "from-env");
    assert_eq!(with_env["namespace"]["origin"]["source"], "env");
    assert_eq!(with_env["pod_timeout_seconds"]["value"], 60);

    let with_template = settings(&orb(
        root.path(),
        &env,
        &["config", "show", "--origin", "--template", "slow"],
    ));
    assert_eq!(with_template["pod_timeout_seconds"]["value"], 900);
    assert_eq!(
        with_template["pod_timeout_seconds"]["origin"]["source"],
        "template"
    );
    assert_eq!(with_template["namespace"]["value"], "from-env");
}

#[test]
fn without_origin_values_are_plain() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let plain = settings(&orb(root.path(), &[], &["config", "show"]));
    assert_eq!(plain["namespace"], "from-file");
    assert_eq!(plain["pod_timeout_seconds"], 120);
}

#[test]
fn table_output_names_the_env_var_that_set_a_value() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let out = orb(
        root.path(),
        &[("ORB_K8S_LABEL_PREFIX", "hpc.example.com")],
        &["config", "show", "--origin", "-o", "table"],
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("label_prefix"))
        .unwrap_or_else(|| panic!("no label_prefix row in:\n{text}"));
    assert!(
        line.contains("hpc.example.com") && line.contains("ORB_K8S_LABEL_PREFIX"),
        "{line}"
    );
}

#[test]
fn a_bad_env_value_is_refused_naming_the_variable_and_the_fix() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let out = orb(
        root.path(),
        &[("ORB_K8S_NAMING__UUID_CHARS", "3")],
        &["config", "show"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ORB_K8S_NAMING__UUID_CHARS"), "{err}");
    assert!(err.contains("from 8 to 32"), "{err}");
}

/// A store password may sit in the URL's user part or in its query (`?password=`); neither
/// may reach the output, whichever way the URL is given.
#[test]
fn a_password_anywhere_in_the_storage_url_is_masked() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let url = "postgres://orb:user-s3cret@db:5432/orb?sslmode=require&password=query-s3cret";
    let file = root.path().join("config/config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    config["storage"] = json!({"url": url});
    std::fs::write(&file, config.to_string()).unwrap();
    for args in [&["config", "show"][..], &["config", "show", "-o", "table"]] {
        let out = orb(root.path(), &[], args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("s3cret"),
            "{args:?} shows a password:\n{text}"
        );
    }
    let shown: Value =
        serde_json::from_slice(&orb(root.path(), &[], &["config", "show"]).stdout).unwrap();
    assert_eq!(
        shown["storage_url"],
        "postgres://orb:***@db:5432/orb?sslmode=require&password=***"
    );
}

/// In a namespace with a Service named `orb-k8s-api`, Kubernetes gives every pod these; orb
/// must start, while a typo of a setting still stops it.
#[test]
fn service_link_variables_are_skipped_and_typos_still_refused() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let links = [
        ("ORB_K8S_API_SERVICE_HOST", "10.96.0.12"),
        ("ORB_K8S_API_SERVICE_PORT", "8080"),
        ("ORB_K8S_API_PORT", "tcp://10.96.0.12:8080"),
        ("ORB_K8S_API_PORT_8080_TCP_ADDR", "10.96.0.12"),
    ];
    let out = orb(root.path(), &links, &["config", "show"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let typo = orb(
        root.path(),
        &[("ORB_K8S_NAMESAPCE", "x")],
        &["config", "show"],
    );
    assert_eq!(typo.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("ORB_K8S_NAMESPACE"));
}

#[test]
fn an_unknown_template_is_refused_with_the_known_ones() {
    let root = tempfile::tempdir().unwrap();
    setup(root.path());
    let out = orb(root.path(), &[], &["config", "show", "--template", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"nope\" is not defined") && err.contains("worker, slow"),
        "{err}"
    );
}
