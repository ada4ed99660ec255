//! `orb server start|stop|status`, as the reference broker's SDKs run it: a config in the
//! reference's shape given with the global `--config`, the whole API over a Unix socket, a
//! pid file that `stop` and `status` use, and a background start that waits until it answers.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// An orb root whose config.json is shaped like the SDKs' test configs: `provider.providers`,
/// a `server` section, `storage.type: json`, `auth` and `logging` sections.
fn sdk_root(server: Value) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let config_dir = root.path().join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = config_dir.join("config.json");
    std::fs::write(
        &config,
        json!({
            "version": "2.0.0",
            "scheduler": {"type": "default"},
            "provider": {"providers": [{"name": "kube", "type": "offline", "config": {}}]},
            "storage": {"type": "json"},
            "server": server,
            "auth": {"type": "none"},
            "logging": {"level": "ERROR"},
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        config_dir.join("kube_templates.json"),
        r#"{"templates": [{"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36"}]}"#,
    )
    .unwrap();
    (root, config)
}

fn orb(root: &Path, config: &Path, args: &[&str]) -> Command {
    let mut cmd = support::orb(root);
    cmd.arg("--config").arg(config).args(args);
    cmd
}

fn run(root: &Path, config: &Path, args: &[&str]) -> (Output, Value) {
    let out = orb(root, config, args).output().unwrap();
    let reply = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, reply)
}

/// One HTTP/1.1 GET over a Unix socket; the whole reply.
fn unix_get(socket: &Path, path: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_sdk_managed_mode_serves_the_api_on_the_socket_and_stops_by_pid_file() {
    let port = free_port();
    let (root, config) = sdk_root(json!({"host": "127.0.0.1", "port": port,
                                         "working_dir": "run", "pid_file": "orb.pid"}));
    let socket = root.path().join("orb-api.sock");
    let pid_file = root.path().join("work").join("run").join("orb.pid");
    let socket_arg = socket.to_str().unwrap();
    let mut child = orb(
        root.path(),
        &config,
        &[
            "server",
            "start",
            "--foreground",
            "--api-only",
            "--socket-path",
            socket_arg,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until("the socket", || UnixStream::connect(&socket).is_ok());

    let reply = unix_get(&socket, "/api/v1/templates/");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"template_id\":\"worker\""), "{reply}");
    assert!(unix_get(&socket, "/livez").starts_with("HTTP/1.1 200"));
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        child.id().to_string(),
        "the pid file of config.json's server section names the server"
    );
    // Socket only: the section's port is not listened on.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());

    let (out, status) = run(root.path(), &config, &["server", "status"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(status["running"], true);
    assert_eq!(status["pid"], child.id());

    let (out, stopped) = run(root.path(), &config, &["server", "stop"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stopped["message"], "stopped");
    let exit = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(exit.success(), "exit {exit:?}: {stderr}");
    assert!(stderr.contains("listening on unix:"), "{stderr}");
    assert!(!pid_file.exists(), "the server removes its pid file");
    assert!(!socket.exists(), "the server removes its socket");

    let (out, status) = run(root.path(), &config, &["server", "status"]);
    assert_eq!(out.status.code(), Some(1), "not running is exit 1: {out:?}");
    assert_eq!(status["running"], false);
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

#[test]
fn a_background_start_waits_until_it_answers_refuses_a_second_one_and_stops() {
    let port = free_port();
    let (root, config) = sdk_root(json!({"host": "127.0.0.1", "port": port}));
    let started = Instant::now();
    let (out, reply) = run(root.path(), &config, &["server", "start"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(reply["running"], true, "{reply}");
    assert_eq!(reply["address"], format!("http://127.0.0.1:{port}"));
    let pid = reply["pid"].as_u64().unwrap();
    // It answers as soon as start returns.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply_text = String::new();
    stream.read_to_string(&mut reply_text).unwrap();
    assert!(reply_text.starts_with("HTTP/1.1 200"), "{reply_text}");
    assert!(started.elapsed() < Duration::from_secs(30));

    let (out, _) = run(root.path(), &config, &["server", "start"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("already running (pid {pid}")) && err.contains("orb server stop"),
        "{err}"
    );

    let (out, stopped) = run(root.path(), &config, &["server", "stop"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stopped["pid"], pid);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens once stop returns"
    );
    let log = root.path().join("work").join("orb-server.log");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("orb serve: stopped"), "{log}");
}

#[test]
fn stopping_a_server_that_is_not_running_succeeds_and_clears_a_stale_pid_file() {
    let (root, config) = sdk_root(json!({}));
    let (out, reply) = run(root.path(), &config, &["server", "stop"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("no server is running (no pid file at"),
        "{reply}"
    );
    // A pid that no process has: the largest pid Linux can hand out, plus one.
    let pid_file = root.path().join("work").join("orb-server.pid");
    std::fs::create_dir_all(pid_file.parent().unwrap()).unwrap();
    std::fs::write(&pid_file, "4194305\n").unwrap();
    let (out, reply) = run(root.path(), &config, &["server", "stop"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        reply["message"].as_str().unwrap().contains("has exited"),
        "{reply}"
    );
    assert!(!pid_file.exists());
}

#[test]
fn a_bad_server_section_is_refused_with_what_it_takes() {
    let (root, config) = sdk_root(json!({"port": "eighty"}));
    let (out, _) = run(root.path(), &config, &["server", "start", "--foreground"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"server\" section is not valid") && err.contains("port (a number"),
        "{err}"
    );
}
