//! `orb serve` settings that come from config.json, on the real local control plane:
//! inbound auth switched on by the provider's `inbound_auth_enabled` (or its environment
//! variable) with roles from `serve.auth`, checked with real ServiceAccount tokens; the Unix
//! socket needing no token; `min_kubernetes_version` at start and in `/readyz`; `/readyz`
//! failing while the Lease cannot be used; and the log line of each machine a return deletes.
//! Needs the control plane (`tools/control-plane/cp up`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};

use crate::support::accounts::token_for;
use crate::support::serve_process::{ServedNamespace, Server, install, spawn_listening};
use crate::support::{init_local_control_plane, orb};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube_fixture::fault_proxy::{FaultPlan, FaultProxy, RequestMatch};
use kube_fixture::identity::Managed;
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

/// An orb root written by `orb init --local-control-plane` for a fresh namespace, with
/// `edit` applied to its config.json.
async fn orb_root(
    prefix: &str,
    edit: impl FnOnce(&mut Value, &str),
) -> (tempfile::TempDir, TestNamespace, TestCluster) {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let root = init_local_control_plane(&cluster, &ns).await;
    edit_config(&root, |config| edit(config, ns.name()));
    (root, ns, cluster)
}

fn edit_config(root: &tempfile::TempDir, edit: impl FnOnce(&mut Value)) {
    let file = root.path().join("config/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&file, config.to_string()).unwrap();
}

/// For the tests that turn inbound auth on: orb's identity gets the TokenReview rule too.
async fn grant_token_review(cluster: &TestCluster, ns: &TestNamespace) {
    let managed = Managed::Namespaces(vec![ns.name().to_string()]);
    cluster
        .broker_identity_for(ns, managed, &["inbound_auth_enabled"])
        .await;
}

struct Serve {
    child: Child,
    addr: String,
    socket: PathBuf,
    startup: String,
}

impl Serve {
    fn start(command: Command) -> Serve {
        let (child, addr, socket, startup) = spawn_listening(command);
        Serve {
            child,
            addr,
            socket,
            startup,
        }
    }

    /// One HTTP/1.1 exchange over TCP; returns the status code and the body.
    fn tcp(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
        let stream = TcpStream::connect(&self.addr).unwrap();
        exchange(stream, method, path, token, body)
    }

    fn unix(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let stream = UnixStream::connect(&self.socket).unwrap();
        exchange(stream, method, path, None, body)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn exchange(
    mut stream: impl Read + Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {reply}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn inbound_auth_enabled_in_config_checks_service_account_tokens_with_config_roles() {
    let (root, ns, cluster) = orb_root("serve-cfg-auth", |config, ns| {
        config["providers"][0]["config"]["inbound_auth_enabled"] = json!(true);
        config["serve"] = json!({"auth": {"roles": {
            format!("{ns}:hf-driver"): "operator",
            format!("{ns}:dashboard"): "viewer"
        }}});
    })
    .await;
    grant_token_review(&cluster, &ns).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    let operator = token_for(&accounts, "hf-driver").await;
    let viewer = token_for(&accounts, "dashboard").await;
    let stranger = token_for(&accounts, "stranger").await;

    let serve = Serve::start(orb(root.path()));
    assert!(
        serve
            .startup
            .contains("Bearer tokens checked by TokenReview (inbound_auth_enabled)"),
        "{}",
        serve.startup
    );
    let templates = "/api/v1/hostfactory/getAvailableTemplates";
    let request = "/api/v1/hostfactory/requestMachines";
    let (code, body) = serve.tcp("GET", "/api/v1/requests", None, "");
    assert_eq!(code, 401, "{body}");
    let (code, body) = serve.tcp("GET", "/api/v1/requests", Some(&viewer), "");
    assert_eq!(code, 200, "{body}");
    let (code, body) = serve.tcp("POST", templates, Some(&viewer), "{}");
    assert_eq!(code, 200, "a HostFactory read needs viewer: {body}");
    let (code, body) = serve.tcp("POST", request, Some(&viewer), "{}");
    assert_eq!(code, 403, "{body}");
    let (code, body) = serve.tcp("POST", request, Some(&operator), r#"{"template": {}}"#);
    assert_eq!(code, 200, "the operator reaches the operation: {body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["exit_code"], 2, "{reply}");
    let (code, body) = serve.tcp("GET", "/api/v1/requests", Some(&stranger), "");
    assert_eq!(code, 403, "no role for an unmapped account: {body}");
    let (code, body) = serve.tcp("GET", "/api/v1/requests", Some("not-a-token"), "");
    assert_eq!(code, 401, "{body}");
    // The owner-only socket needs no token.
    let (code, body) = serve.unix("GET", "/api/v1/requests", "");
    assert_eq!(code, 200, "{body}");
    let (code, body) = serve.unix("POST", templates, "{}");
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_environment_variable_turns_auth_on_and_alone_makes_callers_viewers() {
    let (root, ns, cluster) = orb_root("serve-env-auth", |config, _| {
        config["serve"] = json!({"auth": {"default_role": "viewer"}});
    })
    .await;
    grant_token_review(&cluster, &ns).await;
    let mut command = orb(root.path());
    command.env("ORB_K8S_INBOUND_AUTH_ENABLED", "true");
    let serve = Serve::start(command);
    assert!(
        serve.startup.contains("(inbound_auth_enabled)"),
        "{}",
        serve.startup
    );
    let (code, _) = serve.tcp("GET", "/api/v1/requests", None, "");
    assert_eq!(code, 401);
    drop(serve);

    // Seed 001's cheat sheet sets ORB_K8S_INBOUND_AUTH_ENABLED and nothing else: no role
    // mapping at all. orb serve starts, says so, and every authenticated caller is a viewer.
    edit_config(&root, |config| {
        config.as_object_mut().unwrap().remove("serve");
    });
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    let anyone = token_for(&accounts, "anyone").await;
    let mut command = orb(root.path());
    command.env("ORB_K8S_INBOUND_AUTH_ENABLED", "true");
    let serve = Serve::start(command);
    assert!(
        serve.startup.contains("no role mapping configured")
            && serve.startup.contains("is a viewer (read only)"),
        "{}",
        serve.startup
    );
    let (code, _) = serve.tcp("GET", "/api/v1/requests", None, "");
    assert_eq!(code, 401, "a token is still needed");
    let (code, body) = serve.tcp("GET", "/api/v1/requests", Some(&anyone), "");
    assert_eq!(code, 200, "{body}");
    let (code, body) = serve.tcp(
        "POST",
        "/api/v1/machines/request",
        Some(&anyone),
        r#"{"template_id": "x", "count": 1}"#,
    );
    assert_eq!(
        code, 403,
        "requesting needs an explicit operator role: {body}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn serve_refuses_an_older_apiserver_and_readyz_reports_the_version() {
    let (root, _ns, _cluster) = orb_root("serve-minver", |config, _| {
        config["providers"][0]["config"]["min_kubernetes_version"] = json!("1.99");
    })
    .await;
    let out = orb(root.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1.37 is older than min_kubernetes_version 1.99")
            && err.contains("ORB_K8S_MIN_KUBERNETES_VERSION"),
        "{err}"
    );
    assert!(
        !root.path().join("work/orb.sock").exists(),
        "nothing is served"
    );

    // The same cluster is new enough for the setting lowered through the environment.
    let mut command = orb(root.path());
    command.env("ORB_K8S_MIN_KUBERNETES_VERSION", "1.37");
    let serve = Serve::start(command);
    let (code, body) = serve.tcp("GET", "/readyz", None, "");
    let report: Value = serde_json::from_str(&body).unwrap();
    let check = &report["checks"]["kubernetes_version"];
    assert_eq!(check["status"], "ok", "{report}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("1.37 (minimum 1.37)")),
        "{report}"
    );
    assert!(code == 200 || code == 503, "{body}");
}

/// The operator's opt-out of reject mode is said at every start, with where it was set.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn serve_reports_the_security_opt_outs_at_start() {
    let (root, _ns, _cluster) = orb_root("serve-optout", |_, _| {}).await;
    let plain = Serve::start(orb(root.path()));
    assert!(!plain.startup.contains("SECURITY"), "{}", plain.startup);
    drop(plain);
    let mut command = orb(root.path());
    command.env("ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS", "false");
    let serve = Serve::start(command);
    assert!(
        serve.startup.contains(
            "reject_high_risk_pod_fields (from env \
             ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS): SECURITY opt-out: reject mode is off"
        ),
        "{}",
        serve.startup
    );
}

/// Seed 001: `metrics_enabled=false` disables metric emission entirely.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn metrics_enabled_false_turns_the_metrics_off() {
    let (root, _ns, _cluster) = orb_root("serve-metrics", |_, _| {}).await;
    let on = Serve::start(orb(root.path()));
    let (code, body) = on.tcp("GET", "/metrics", None, "");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("orb_k8s_circuit_breaker_state") && body.contains("orb_requests"),
        "{body}"
    );
    drop(on);

    let mut command = orb(root.path());
    command.env("ORB_K8S_METRICS_ENABLED", "false");
    let off = Serve::start(command);
    let (code, body) = off.tcp("GET", "/metrics", None, "");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("orb_"), "no series at all: {body}");
    assert!(
        body.contains("metrics are disabled") && body.contains("ORB_K8S_METRICS_ENABLED"),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}

/// `/readyz` of `orb serve`, polled until `done` holds for it (or 90 s pass); the last answer.
async fn readyz_until(server: &Server, done: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let (code, ready) = server.call("GET", "/readyz", None);
        if done(code, &ready) || std::time::Instant::now() > deadline {
            return (code, ready);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A fault proxy in front of the apiserver that answers 500 to every request `only` matches.
async fn failing(cluster: &TestCluster, only: RequestMatch) -> FaultProxy {
    let proxy = FaultProxy::start(cluster).await;
    proxy.set_plan(FaultPlan {
        server_error_rate: 1.0,
        only,
        ..FaultPlan::default()
    });
    proxy
}

/// Once `proxy` lets everything through, `server` becomes ready by itself, its watch cache
/// too; the `/readyz` answer.
async fn ready_once_the_faults_stop(server: &Server, proxy: &FaultProxy) -> Value {
    proxy.set_plan(FaultPlan::default());
    let (code, ready) = readyz_until(server, |code, _| code == 200).await;
    assert_eq!(code, 200, "{ready}\n{}", server.log());
    assert_eq!(ready["checks"]["watch_cache"]["status"], "ok", "{ready}");
    ready
}

/// The apiserver answers, but every call on the leader Lease fails (a fault proxy answers
/// 500): `orb serve` answers HTTP yet is never ready, names the Lease on `/readyz` and in the
/// log, and keeps retrying; once the Lease can be used it becomes ready without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn serve_is_not_ready_while_its_lease_fails_and_recovers_by_itself() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve-lease").await;
    let managed = Managed::Namespaces(vec![ns.name().to_string()]);
    let identity = cluster
        .broker_identity_for(&ns, managed, &["leader_election"])
        .await;
    let proxy = failing(&cluster, RequestMatch::path("/leases")).await;
    let through = identity.through(proxy.kubeconfig_path());
    let root = install(&ns, "kube", &through, json!({}));
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
    crate::support::clear_env(&mut cmd);
    cmd.env("ORB_ROOT_DIR", root.path())
        .env("HOME", root.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-socket",
            "--leader-elect=true",
        ]);
    let server = Server::spawn(cmd);

    let lease = format!("Lease {}/orb-serve-kube", ns.name());
    let background = |r: &Value| {
        r["checks"]["background"]["detail"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (code, ready) = readyz_until(&server, |_, r| background(r).contains(&lease)).await;
    assert_eq!(code, 503, "{ready}");
    assert_eq!(
        ready["checks"]["background"]["status"], "failing",
        "{ready}"
    );
    assert!(background(&ready).contains(&lease), "{ready}");

    let ready = ready_once_the_faults_stop(&server, &proxy).await;
    assert_eq!(ready["checks"]["background"]["status"], "ok", "{ready}");
    let log = server.log();
    assert!(
        log.contains("orb serve is not ready") && log.contains("retrying in"),
        "{log}"
    );
    server.stop();
}

/// The first line of `server`'s log holding `needle`, waited for up to 10 s (its stderr is
/// read by another thread).
async fn logged_line(server: &Server, needle: &str) -> String {
    let what = format!("a line with {needle:?} logged");
    wait_for(&what, std::time::Duration::from_secs(10), || async {
        let log = server.log();
        match log.lines().find(|l| l.contains(needle)) {
            Some(line) => Check::Done(line.to_string()),
            None => Check::NotYet(log),
        }
    })
    .await
}

/// A return through `orb serve` deletes a running machine's pod, and its log says so at the
/// default level, naming the machine, its request and the return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_return_through_serve_logs_each_machine_it_deletes() {
    let served = ServedNamespace::start("serve-log", json!({})).await;
    let server = &served.server;
    let done = server.acquire_workers(1).await;
    let id = done["request"]["request_id"].as_str().unwrap();
    let machine = done["machines"][0]["machine_id"].as_str().unwrap();
    let (code, body) = server.call(
        "POST",
        "/api/v1/machines/return",
        Some(&json!({"request_id": id})),
    );
    assert!(code == 200 || code == 202, "{code}: {body}");
    let return_id = body["request"]["request_id"].as_str().unwrap_or_default();
    let finished = server
        .wait_finished(return_id, std::time::Duration::from_secs(90))
        .await;
    assert_eq!(finished["request"]["status"], "complete", "{finished}");
    let line = logged_line(server, "given back by a return").await;
    assert!(
        line.contains(" INFO ")
            && line.contains(machine)
            && line.contains(id)
            && line.contains(return_id),
        "{line}"
    );
    served.server.stop();
}

/// A cancel through `orb serve` deletes the request's objects, and its log says so at the
/// default level, naming the request and the objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_cancel_through_serve_logs_the_objects_it_deletes() {
    // No node carries this label: the pod stays Pending and the request unfinished.
    let pending = json!({"default_node_selector": {"orb-test/no-such-node": "true"}});
    let served = ServedNamespace::start("serve-cancel-log", pending).await;
    let server = &served.server;
    let id = server.request_workers(1);
    let (code, body) = server.call("POST", &format!("/api/v1/requests/{id}/cancel"), None);
    assert!(code == 200 || code == 202, "{code}: {body}");
    let line = logged_line(server, "deleted the objects of a cancelled request").await;
    assert!(
        line.contains(" INFO ") && line.contains(&id) && line.contains("orb-"),
        "{line}"
    );
    served.server.stop();
}

/// The apiserver answers, but every read of pods fails (a fault proxy answers 500), so the
/// watch cache cannot list: `orb serve` is not ready, `watch_cache` says why, and once the
/// pods can be read the cache fills and the server becomes ready by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn serve_is_not_ready_while_its_watch_cache_cannot_list() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve-blind").await;
    let identity = cluster.broker_identity(&ns).await;
    let mut pod_reads = RequestMatch::path("/pods");
    pod_reads.methods = vec![axum::http::Method::GET];
    let proxy = failing(&cluster, pod_reads).await;
    let through = identity.through(proxy.kubeconfig_path());
    let root = install(&ns, "kube", &through, json!({}));
    let server = Server::start(root.path(), None);

    let (code, ready) =
        readyz_until(&server, |_, r| r["checks"]["background"]["status"] == "ok").await;
    assert_eq!(code, 503, "{ready}");
    assert_eq!(
        ready["checks"]["watch_cache"]["status"], "failing",
        "{ready}"
    );
    let detail = ready["checks"]["watch_cache"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.starts_with("not serving"), "{ready}");

    ready_once_the_faults_stop(&server, &proxy).await;
    server.stop();
}
