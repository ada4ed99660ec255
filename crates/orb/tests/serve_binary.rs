//! The `orb serve` command itself: loads the configuration like every command, binds,
//! answers HTTP, and stops cleanly on SIGTERM; an address in use is a clear error.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

fn config_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({"providers": [{"name": "kube", "type": "offline", "config": {}}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("kube_templates.json"),
        r#"{"templates": [{"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36"}]}"#,
    )
    .unwrap();
    root
}

fn orb(root: &tempfile::TempDir, args: &[&str]) -> Command {
    let mut cmd = support::orb(root.path());
    cmd.args(args);
    cmd
}

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn serve_answers_http_and_stops_on_sigterm() {
    let root = config_root();
    let mut child = orb(&root, &["serve", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in the start-up line: {first:?}"))
        .to_string();
    assert!(first.contains("no authentication"), "{first}");

    let reply = http_get(&addr, "/api/v1/templates");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"template_id\":\"worker\""), "{reply}");
    let reply = http_get(&addr, "/livez");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(exit.success(), "exit {exit:?}: {rest}");
    assert!(rest.contains("orb serve: stopped"), "{rest}");
}

#[test]
fn an_address_in_use_is_refused_with_the_fix() {
    let root = config_root();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = orb(&root, &["serve", "--listen", &addr]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("--listen"),
        "{err}"
    );
}

#[test]
fn auth_flags_are_checked_before_anything_starts() {
    let root = config_root();
    let out = orb(&root, &["serve", "--auth-role", "a:b=operator"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need inbound auth on"), "{err}");
    let out = orb(
        &root,
        &["serve", "--auth-token-review", "--auth-role", "a:b=root"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"root\" is not known"), "{err}");
}

/// A Kubernetes provider whose `config` is `provider_config` (never contacted: every test
/// here fails or finishes before a cluster is needed).
fn kubernetes_root(provider_config: serde_json::Value) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let mut block = json!({"namespace": "orb", "in_cluster": false,
                           "kubeconfig_path": "/nonexistent/kubeconfig"});
    for (k, v) in provider_config.as_object().unwrap() {
        block[k] = v.clone();
    }
    std::fs::write(
        config.join("config.json"),
        json!({"providers": [{"name": "k8s", "type": "k8s", "config": block}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("k8s_templates.json"),
        r#"{"templates": [{"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36"}]}"#,
    )
    .unwrap();
    root
}

const PREFIX_21: &str = "abcdefghijklmnopqrstu";

/// Seed 001: the config raises at start-up. `orb serve` with a 21-character naming.prefix
/// exits non-zero with the problem on stderr, and never listens.
#[test]
fn serve_with_an_invalid_provider_config_exits_non_zero_with_every_problem() {
    let root = kubernetes_root(json!({"naming": {"prefix": PREFIX_21}, "label_prefix": "Bad"}));
    let out = orb(&root, &["serve", "--listen", "127.0.0.1:0", "--no-socket"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("orb serve cannot start")
            && err.contains("invalid Kubernetes provider configuration (2 problems)")
            && err.contains(&format!(
                "naming.prefix (from file {}",
                root.path().join("config/config.json").display()
            ))
            && err.contains("has 21 characters, more than the 20 allowed")
            && err.contains("label_prefix"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// The same for the environment, and for the CLI commands that need the provider.
#[test]
fn cli_commands_needing_the_provider_refuse_an_invalid_config_too() {
    let root = kubernetes_root(json!({}));
    for args in [
        &["machines", "request", "worker", "1"][..],
        &["templates", "list"][..],
        &["templates", "validate"][..],
        &[
            "requests",
            "status",
            "req-00000000-0000-4000-8000-000000000000",
        ][..],
        &["--scheduler", "hostfactory", "templates", "list"][..],
    ] {
        let out = orb(&root, args)
            .env("ORB_K8S_NAMING__PREFIX", PREFIX_21)
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("naming.prefix (from env ORB_K8S_NAMING__PREFIX)")
                && err.contains("has 21 characters"),
            "{args:?}: {err}"
        );
    }
    // The configuration is refused before the store is even opened: nothing half-created.
    assert!(!root.path().join("work/orb.db").exists());
}

/// A kubeconfig that is not there (yet: a Secret may be mounted later) does not stop `orb
/// serve`, but it is never ready without its cluster connection: `/readyz` answers 503 naming
/// the file, and the log says what is retried.
#[test]
fn without_its_kubeconfig_serve_is_not_ready_and_says_why() {
    let root = kubernetes_root(json!({}));
    let (mut child, addr, mut stderr) = started(&root);
    let readyz = "GET /readyz HTTP/1.1\r\nHost: orb\r\nConnection: close\r\n\r\n";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let (code, ready, _) = send(&addr, readyz);
        assert_eq!(code, 503, "{ready}");
        if ready["checks"]["background"]["status"] == "failing"
            || std::time::Instant::now() > deadline
        {
            break ready;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let background = &ready["checks"]["background"];
    assert_eq!(background["status"], "failing", "{ready}");
    assert!(
        background["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("/nonexistent/kubeconfig"),
        "{ready}"
    );
    // The first try is logged before the listening line; a retry follows a second later.
    std::thread::sleep(Duration::from_millis(1500));
    sigterm(&mut child);
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    child.wait().unwrap();
    assert!(
        log.contains("not ready")
            && log.contains("/nonexistent/kubeconfig")
            && log.contains("retrying"),
        "{log}"
    );
}

/// A started `orb serve` on the offline config: the child, its address, its stderr.
fn started(
    root: &tempfile::TempDir,
) -> (
    std::process::Child,
    String,
    BufReader<std::process::ChildStderr>,
) {
    let mut child = orb(root, &["serve", "--listen", "127.0.0.1:0", "--no-socket"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    while addr.is_none() {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "orb serve ended early"
        );
        addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(String::from);
    }
    (child, addr.unwrap(), stderr)
}

fn send(addr: &str, raw: &str) -> (u16, serde_json::Value, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        head.to_string(),
    )
}

fn sigterm(child: &mut std::process::Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
}

/// Clients that open connections and never finish their request head do not hold the server:
/// it keeps answering others, and closes them after its header read timeout (15 s).
#[test]
fn connections_that_never_finish_their_headers_are_cut_off() {
    let root = config_root();
    let (mut child, addr, _stderr) = started(&root);
    let stalled: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    let reply = http_get(&addr, "/livez");
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "still answering: {reply}"
    );
    let started_at = std::time::Instant::now();
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 512];
        // Closed by the server: end of stream (or a reset), never a hang.
        let _ = s.read(&mut buf);
    }
    let waited = started_at.elapsed();
    assert!(
        waited < Duration::from_secs(25),
        "stalled connections closed after the header timeout, not kept: {waited:?}"
    );
    sigterm(&mut child);
    assert!(child.wait().unwrap().success());
}

/// SIGTERM stops the server within its shutdown grace even with a client that keeps a
/// connection open and silent.
#[test]
fn sigterm_stops_the_server_despite_a_silent_connection() {
    let root = config_root();
    let (mut child, addr, _stderr) = started(&root);
    let mut silent = TcpStream::connect(&addr).unwrap();
    silent
        .write_all(
            b"POST /api/v1/machines/request HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let at = std::time::Instant::now();
    sigterm(&mut child);
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(
        at.elapsed() < Duration::from_secs(15),
        "stopped within the grace: {:?}",
        at.elapsed()
    );
}

/// Every refusal is a problem document: a method a route does not take (405, with Allow),
/// an unknown query parameter, a path that is not UTF-8; and a return naming 32,767 machines
/// is answered for what it names (none of them is orb's), not with a store error.
#[test]
fn refusals_are_problem_documents_and_huge_id_lists_are_answered() {
    let root = config_root();
    let (mut child, addr, _stderr) = started(&root);
    let (code, body, head) = send(
        &addr,
        "PUT /api/v1/templates HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(code, 405, "{head}");
    assert_eq!(body["status"], 405, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("GET"), "{body}");
    assert!(head.to_ascii_lowercase().contains("allow:"), "{head}");
    let (code, body, _) = send(
        &addr,
        "GET /api/v1/machines?bogus=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["type"], "urn:orb:problem:invalid-query", "{body}");
    assert!(body["detail"].as_str().unwrap().contains("bogus"), "{body}");
    let (code, body, _) = send(
        &addr,
        "GET /api/v1/requests/%FF%FE HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["status"], 400, "{body}");

    let ids: Vec<String> = (0..32_767).map(|i| format!("orb-nobody-{i:05}")).collect();
    let payload = json!({"machine_ids": ids}).to_string();
    let (code, body, _) = send(
        &addr,
        &format!(
            "POST /api/v1/machines/return HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        ),
    );
    assert!(
        (400..500).contains(&code),
        "a client error for machines orb does not manage, not a store failure: {code} {body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("does not manage"),
        "{body}"
    );
    sigterm(&mut child);
    assert!(child.wait().unwrap().success());
}

/// `auth.type: "bearer"` in config.json: the started server refuses a call without a token
/// and accepts one signed with `auth.bearer_token.secret_key`; a too-short secret stops it
/// before it listens.
#[test]
fn a_bearer_auth_config_is_applied_by_the_running_server() {
    let root = config_root();
    let secret = "0123456789abcdef0123456789abcdef";
    let with_auth = |secret: &str| {
        json!({
            "providers": [{"name": "kube", "type": "offline", "config": {}}],
            "auth": {"type": "bearer", "bearer_token": {"secret_key": secret}},
        })
        .to_string()
    };
    let config = root.path().join("config/config.json");
    std::fs::write(&config, with_auth("too-short")).unwrap();
    let refused = orb(&root, &["serve", "--listen", "127.0.0.1:0", "--no-socket"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("use at least 32"), "{stderr}");

    std::fs::write(&config, with_auth(secret)).unwrap();
    let (mut child, addr, _stderr) = started(&root);
    let (code, body) = support::serve_process::http(&addr, "GET", "/api/v1/templates/", None);
    assert_eq!(code, 401, "{body}");
    let exp = jiff::Timestamp::now().as_second() + 600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": "sdk", "exp": exp, "roles": ["user"]}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap();
    let (code, body) =
        support::serve_process::http_with(&addr, "GET", "/api/v1/templates/", None, Some(&token));
    assert_eq!(code, 200, "{body}");
    sigterm(&mut child);
    child.wait().unwrap();
}

/// Names of the threads of process `pid`, and its environment.
fn threads_and_environment(pid: u32) -> (Vec<String>, String) {
    let names = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    (names, String::from_utf8_lossy(&environ).replace('\0', "\n"))
}

/// The daemon runs with jemalloc's background purge thread and a 1 s decay (it re-runs itself
/// with those settings), so memory freed after its start-up LISTs goes back to the system
/// while it is quiet; the same pid keeps serving.
#[test]
fn serve_runs_with_the_allocators_background_purge() {
    let root = config_root();
    let server =
        support::serve_process::Server::spawn(orb(&root, &["serve", "--listen", "127.0.0.1:0"]));
    let (threads, environ) = threads_and_environment(server.child.id());
    let reply = http_get(&server.addr, "/livez");
    server.stop();
    assert!(
        threads.iter().any(|n| n == "jemalloc_bg_thd"),
        "no jemalloc background thread among {threads:?}"
    );
    assert!(
        environ.contains("_RJEM_MALLOC_CONF=background_thread:true,dirty_decay_ms:1000"),
        "{environ}"
    );
    assert!(environ.contains("\nMALLOC_ARENA_MAX=1\n"), "{environ}");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// Allocator settings the user gives win over the daemon's own.
#[test]
fn the_users_allocator_settings_are_kept() {
    let root = config_root();
    let mut cmd = orb(&root, &["serve", "--listen", "127.0.0.1:0"]);
    cmd.env("_RJEM_MALLOC_CONF", "background_thread:false");
    let server = support::serve_process::Server::spawn(cmd);
    let (threads, environ) = threads_and_environment(server.child.id());
    server.stop();
    assert!(
        !threads.iter().any(|n| n == "jemalloc_bg_thd"),
        "a background thread despite background_thread:false: {threads:?}"
    );
    assert!(
        environ.contains("_RJEM_MALLOC_CONF=background_thread:false\n"),
        "{environ}"
    );
}
