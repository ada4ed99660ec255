//! Helpers shared by the integration tests that run the real `orb` binary: a clean command
//! builder, the `orb serve` process fixtures, ServiceAccount tokens, the PostgreSQL switch and
//! a headless browser.
//! Each test binary uses only part of it.
#![allow(dead_code)]

pub mod accounts;
pub mod browser;
pub mod serve_process;

use std::path::Path;
use std::process::Command;

use kube_fixture::{TestCluster, TestNamespace};
use orb_core::config::ProviderEntry;
use serde_json::{Value, json};

/// Environment variables that would point `orb` at the developer's own setup; removed from
/// every command a test runs, so the test's explicit settings are all that count.
pub const ENV_TO_CLEAR: &[&str] = &[
    "ORB_CONFIG_DIR",
    "ORB_WORK_DIR",
    "ORB_LOG_DIR",
    "ORB_CONFIG_FILE",
    "ORB_SCHEDULER",
    "ORB_STORAGE_URL",
    "ORB_COMMAND",
    "ORB_DAEMON",
    "ORB_UI_DIR",
    "ORB_K8S_INBOUND_AUTH_ENABLED",
    "ORB_K8S_MIN_KUBERNETES_VERSION",
    "HF_PROVIDER_NAME",
    "HF_PROVIDER_CONFDIR",
    "HF_PROVIDER_WORKDIR",
    "HF_PROVIDER_LOGDIR",
    "HF_CONFDIR",
    "HF_WORKDIR",
    "HF_LOGDIR",
];

/// Removes [`ENV_TO_CLEAR`] from `cmd`.
pub fn clear_env(cmd: &mut Command) -> &mut Command {
    for var in ENV_TO_CLEAR {
        cmd.env_remove(var);
    }
    cmd
}

/// The `orb` binary with a clean environment, rooted at `root` (`ORB_ROOT_DIR` and `HOME`).
pub fn orb(root: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
    clear_env(&mut cmd);
    cmd.env("ORB_ROOT_DIR", root).env("HOME", root);
    cmd
}

/// A fresh orb root written by `orb init --local-control-plane` for `ns`, with orb running as
/// the shipped identity (its kubeconfig copied into the root, so it lives as long as the root).
pub async fn init_local_control_plane(
    cluster: &TestCluster,
    ns: &TestNamespace,
) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let state_dir = cluster.kubeconfig.parent().unwrap().to_path_buf();
    let init = orb(root.path())
        .env("ORB_CP_STATE_DIR", &state_dir)
        .args(["init", "--local-control-plane", "--namespace", ns.name()])
        .output()
        .unwrap();
    assert!(init.status.success(), "orb init: {init:?}");
    let identity = cluster.broker_identity(ns).await;
    let kubeconfig = root.path().join("orb-broker.kubeconfig");
    std::fs::copy(&identity.kubeconfig, &kubeconfig).unwrap();
    let file = root.path().join("config/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config["providers"][0]["config"]["kubeconfig_path"] = json!(kubeconfig);
    std::fs::write(&file, config.to_string()).unwrap();
    root
}

/// `ORB_TEST_POSTGRES_URL`, or None (test skipped) when it is unset and `ORB_REQUIRE_POSTGRES`
/// is too.
pub fn postgres_url() -> Option<String> {
    match std::env::var("ORB_TEST_POSTGRES_URL") {
        Ok(url) => Some(url),
        Err(_) if std::env::var("ORB_REQUIRE_POSTGRES").is_ok() => {
            panic!("ORB_REQUIRE_POSTGRES is set but ORB_TEST_POSTGRES_URL is not")
        }
        Err(_) => {
            eprintln!(
                "skipped: ORB_TEST_POSTGRES_URL unset (set it to a postgres:// URL to run this test)"
            );
            None
        }
    }
}

/// The default `k8s` provider "kubernetes" on `ns` through the cluster's kubeconfig, with
/// `extra` merged into its config.
pub fn k8s_provider_entry(
    cluster: &TestCluster,
    ns: &TestNamespace,
    extra: Value,
) -> ProviderEntry {
    let mut config = json!({
        "namespace": ns.name(),
        "in_cluster": false,
        "kubeconfig_path": cluster.kubeconfig,
    });
    for (k, v) in extra
        .as_object()
        .expect("extra provider config is a JSON object")
    {
        config[k] = v.clone();
    }
    ProviderEntry {
        name: "kubernetes".into(),
        provider_type: "k8s".into(),
        enabled: true,
        default: true,
        config,
        template_defaults: Default::default(),
    }
}
