//! `orb serve` settings that come from config.json, on the real local control plane:
//! inbound auth switched on by the provider's `inbound_auth_enabled` (or its environment
//! variable) with roles from `serve.auth`, checked with real ServiceAccount tokens; the Unix
//! socket needing no token; and `min_kubernetes_version` at start and in `/readyz`.
//! Needs the control plane (`tools/control-plane/cp up`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_fixture::{TestCluster, TestNamespace};
use serde_json::{Value, json};

const ENV_TO_CLEAR: [&str; 9] = [
    "ORB_CONFIG_DIR",
    "ORB_WORK_DIR",
    "ORB_CONFIG_FILE",
    "ORB_SCHEDULER",
    "ORB_STORAGE_URL",
    "ORB_DAEMON",
    "ORB_K8S_INBOUND_AUTH_ENABLED",
    "ORB_K8S_MIN_KUBERNETES_VERSION",
    "HF_PROVIDER_NAME",
];

async fn token_for(api: &Api<ServiceAccount>, name: &str) -> String {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {name}: {e}"));
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    api.create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("requesting a token for {name}: {e}"))
        .status
        .and_then(|status| status.token)
        .expect("a token request answers with a token")
}

/// An orb root written by `orb init --local-control-plane` for a fresh namespace, with
/// `edit` applied to its config.json.
async fn orb_root(
    prefix: &str,
    edit: impl FnOnce(&mut Value, &str),
) -> (tempfile::TempDir, TestNamespace, TestCluster) {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let root = tempfile::tempdir().unwrap();
    let state_dir = cluster.kubeconfig.parent().unwrap().to_path_buf();
    let init = orb(root.path())
        .env("ORB_CP_STATE_DIR", &state_dir)
        .args(["init", "--local-control-plane", "--namespace", ns.name()])
        .output()
        .unwrap();
    assert!(init.status.success(), "orb init: {init:?}");
    let file = root.path().join("config/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    edit(&mut config, ns.name());
    std::fs::write(&file, config.to_string()).unwrap();
    (root, ns, cluster)
}

fn orb(root: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
    for var in ENV_TO_CLEAR {
        cmd.env_remove(var);
    }
    cmd.env("ORB_ROOT_DIR", root).env("HOME", root);
    cmd
}

struct Serve {
    child: Child,
    addr: String,
    socket: PathBuf,
    startup: String,
}

impl Serve {
    fn start(mut command: Command) -> Serve {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let (mut addr, mut socket, mut startup) = (None, None, String::new());
        while addr.is_none() || socket.is_none() {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("orb serve ended before it was listening: {startup}");
            }
            startup.push_str(&line);
            if let Some(rest) = line.split("http://").nth(1) {
                addr = rest.split_whitespace().next().map(str::to_string);
            }
            if let Some(rest) = line.split("unix:").nth(1) {
                socket = rest.split_whitespace().next().map(PathBuf::from);
            }
        }
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = stderr.read_to_string(&mut sink);
        });
        Serve {
            child,
            addr: addr.unwrap(),
            socket: socket.unwrap(),
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
async fn inbound_auth_enabled_in_config_checks_service_account_tokens_with_config_roles() {
    let (root, ns, cluster) = orb_root("serve-cfg-auth", |config, ns| {
        config["providers"][0]["config"]["inbound_auth_enabled"] = json!(true);
        config["serve"] = json!({"auth": {"roles": {
            format!("{ns}:hf-driver"): "operator",
            format!("{ns}:dashboard"): "viewer"
        }}});
    })
    .await;
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
async fn the_environment_variable_turns_auth_on_and_missing_roles_are_refused_with_the_fix() {
    let (root, _ns, _cluster) = orb_root("serve-env-auth", |config, _| {
        config["serve"] = json!({"auth": {"default_role": "viewer"}});
    })
    .await;
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

    // Auth on, but nobody could ever be let in.
    let file = root.path().join("config/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("serve");
    std::fs::write(&file, config.to_string()).unwrap();
    let out = orb(root.path())
        .env("ORB_K8S_INBOUND_AUTH_ENABLED", "true")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("inbound_auth_enabled needs at least one --auth-role")
            && err.contains("serve.auth.roles"),
        "{err}"
    );
}

#[tokio::test]
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
