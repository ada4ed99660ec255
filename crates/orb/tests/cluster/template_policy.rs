//! What a template may do, end to end through the `orb` binary on the real local control
//! plane: a template whose providerConfig switches the audit off (with a privileged,
//! host-PID pod) or widens the namespace boundary is refused when the templates are loaded,
//! by the CLI and by HostFactory, with the template, the key and who may set it; nothing is
//! created and nothing is stored. Templates every request would refuse are not advertised.
//! Needs the control plane (`tools/control-plane/cp up`).

use std::process::Output;

use crate::support::{init_local_control_plane, orb};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::{TestCluster, TestNamespace};
use serde_json::{Value, json};

fn templates(ns: &str) -> Value {
    json!({"scheduler_type": "hostfactory", "templates": [
        {"templateId": "worker", "maxNumber": 5, "imageId": "busybox:1.36",
         "command": ["sh", "-c", "sleep 3600"]},
        {"templateId": "sneaky", "maxNumber": 5, "imageId": "busybox:1.36",
         "providerConfig": {"audit_high_risk_pod_fields": false,
                            "reject_high_risk_pod_fields": false},
         "podSpecOverride": {"hostPID": true,
                             "containers": [{"name": "orb", "securityContext": {"privileged": true}}]}},
        {"templateId": "wide", "maxNumber": 5, "imageId": "busybox:1.36",
         "providerConfig": {"namespaces": ["*"]}, "namespace": "kube-system"},
        {"templateId": "elsewhere", "maxNumber": 5, "imageId": "busybox:1.36",
         "namespace": format!("{ns}-other")},
        {"templateId": "long-names", "maxNumber": 5, "imageId": "busybox:1.36",
         "providerApi": "Deployment",
         "providerConfig": {"naming": {"max_deployment_name_len": 20}}},
    ]})
}

struct Setup {
    root: tempfile::TempDir,
    ns: TestNamespace,
    cluster: TestCluster,
}

impl Setup {
    /// `orb init --local-control-plane` for a fresh namespace, managing exactly that
    /// namespace (`namespaces: [ns]`), with the templates above.
    async fn new() -> Setup {
        let cluster = TestCluster::connect().await;
        let ns = cluster.namespace("tpl-policy").await;
        let root = init_local_control_plane(&cluster, &ns).await;
        let file = root.path().join("config/config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        config["providers"][0]["config"]["namespaces"] = json!([ns.name()]);
        std::fs::write(&file, config.to_string()).unwrap();
        std::fs::write(
            root.path().join("config/templates.json"),
            templates(ns.name()).to_string(),
        )
        .unwrap();
        Setup { root, ns, cluster }
    }

    fn run(&self, args: &[&str]) -> Output {
        orb(self.root.path()).args(args).output().unwrap()
    }

    fn hostfactory(&self, args: &[&str], input: &Value) -> Output {
        let file = self.root.path().join("hf_input.json");
        std::fs::write(&file, input.to_string()).unwrap();
        let mut all = vec!["--scheduler", "hostfactory"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-f", file.to_str().unwrap()]);
        self.run(&all)
    }

    async fn pods(&self) -> usize {
        Api::<Pod>::namespaced(self.cluster.client.clone(), self.ns.name())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
    }

    fn stored_requests(&self) -> usize {
        let out = self.run(&["requests", "list"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Vec<Value>>(&out.stdout)
            .unwrap()
            .len()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const AUDIT_REFUSAL: &str = "template \"sneaky\" may not override \"audit_high_risk_pod_fields\"";

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_template_switching_the_audit_off_is_refused_at_load_by_cli_and_hostfactory() {
    let s = Setup::new().await;

    let out = s.run(&["machines", "request", "sneaky", "2"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains(AUDIT_REFUSAL)
            && err.contains("ORB_K8S_AUDIT_HIGH_RISK_POD_FIELDS")
            && err.contains("may not override \"reject_high_risk_pod_fields\""),
        "{err}"
    );

    let out = s.hostfactory(
        &["machines", "request"],
        &json!({"template": {"templateId": "sneaky", "machineCount": 2}}),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        reply["message"]
            .as_str()
            .unwrap_or_default()
            .contains(AUDIT_REFUSAL),
        "{reply}"
    );
    assert!(reply.get("requestId").is_none(), "{reply}");

    let out = s.run(&["machines", "request", "wide", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("template \"wide\" may not override \"namespaces\""),
        "{}",
        text(&out.stderr)
    );

    assert_eq!(s.pods().await, 0, "nothing may be created");
    assert_eq!(s.stored_requests(), 0, "nothing may be stored");

    // The allowed template still works on the same installation.
    let out = s.run(&["machines", "request", "worker", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn validate_reports_the_refusals_and_listings_advertise_only_servable_templates() {
    let s = Setup::new().await;

    let out = s.run(&["templates", "validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["valid"], json!(["worker"]), "{reply}");
    let problems = |id: &str| {
        reply["invalid"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["template"] == id)
            .map(|e| e["problems"].to_string())
            .unwrap_or_else(|| panic!("{id} not reported: {reply}"))
    };
    assert!(problems("sneaky").contains("audit_high_risk_pod_fields"));
    assert!(problems("wide").contains("may not override \\\"namespaces\\\""));
    assert!(problems("elsewhere").contains("is not managed by this provider"));
    assert!(problems("long-names").contains("naming.max_deployment_name_len"));

    let out = s.run(&["templates", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .iter()
        .map(|t| t["template_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["worker"]);
    let err = text(&out.stderr);
    for needle in [
        AUDIT_REFUSAL,
        "template \"elsewhere\" is not listed",
        "template \"long-names\" is not listed",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }

    let out = s.hostfactory(&["templates", "list"], &json!({}));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = reply["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["templateId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["worker"], "{reply}");
    assert!(
        text(&out.stderr).contains("template \"elsewhere\" is not advertised"),
        "{}",
        text(&out.stderr)
    );
}
