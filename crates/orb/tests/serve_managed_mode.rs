//! The reference broker's SDK managed mode, run exactly as the SDKs run it: `orb --config
//! <tmp>/config.json server start --foreground --api-only --socket-path <sock>` with the SDKs'
//! own minimal config (an `aws` provider, `storage.type: json`, `auth: none`, `logging`, no
//! template file) and nothing else in the environment. Everything lands beside the config
//! file; templates are listed, created, read, updated and deleted through the reference's
//! routes and request shapes; refused writes change no file. No cluster needed.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The orb binary with nothing of the developer's setup: only `HOME`, an empty directory, so
/// a file written under it shows.
fn bare_orb(home: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
    support::clear_env(&mut cmd);
    cmd.env_remove("ORB_ROOT_DIR").env("HOME", home);
    cmd
}

/// A running `orb server start --foreground --api-only` and where it keeps its files.
struct Managed {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    child: Child,
}

impl Managed {
    /// Starts it on the config `config`; `listen` gives the address flags for its directory.
    fn start(config: Value, listen: impl Fn(&Path) -> Vec<String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let child = bare_orb(home.path())
            .arg("--config")
            .arg(&file)
            .args(["server", "start", "--foreground", "--api-only"])
            .args(listen(dir.path()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self { dir, home, child }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Stops the server (its files stay until it is dropped) and returns what it logged.
    fn stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        stderr
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// One HTTP/1.1 exchange on `stream`: the status and the JSON body.
fn exchange(
    mut stream: impl Read + Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let status = reply[9..12].parse().unwrap();
    let (head, text) = reply.split_once("\r\n\r\n").unwrap();
    // Bodies may come chunked; the JSON is the one line of the chunk.
    let text = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        text.lines().nth(1).unwrap_or_default().to_string()
    } else {
        text.to_string()
    };
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn on_socket(socket: &Path, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    exchange(stream, method, path, None, body.as_ref())
}

/// The SDKs' own minimal config: a provider orb cannot serve, and no template file.
fn sdk_config() -> Value {
    json!({
        "version": "2.0.0",
        "scheduler": {"type": "default"},
        "provider": {"providers": [{"name": "aws-default", "type": "aws", "enabled": true,
                                    "config": {"region": "us-east-1"}}]},
        "storage": {"type": "json"},
        "auth": {"type": "none"},
        "logging": {"level": "ERROR"},
    })
}

#[test]
fn the_sdk_managed_mode_keeps_templates_beside_its_config_and_writes_them_through_the_api() {
    let server = Managed::start(sdk_config(), |dir| {
        vec![
            "--socket-path".into(),
            dir.join("orb.sock").display().to_string(),
        ]
    });
    let socket = server.path("orb.sock");
    wait_until("the socket", || UnixStream::connect(&socket).is_ok());
    let call =
        |method: &str, path: &str, body: Option<Value>| on_socket(&socket, method, path, body);

    // What the SDKs poll before their first call: 200 and healthy or degraded.
    let (status, health) = call("GET", "/health", None);
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("degraded")),
        "{health}"
    );
    // No template file: an empty list, as the reference answers.
    let (status, list) = call("GET", "/api/v1/templates/", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["templates"], json!([]));
    assert_eq!(list["total_count"], 0);
    // The provider orb cannot serve is named where an operator looks.
    let (status, ready) = call("GET", "/readyz", None);
    assert_eq!(status, 503);
    assert!(ready.to_string().contains("\\\"aws\\\""), "{ready}");
    let (status, providers) = call("GET", "/api/v1/providers/health", None);
    assert_eq!(status, 200);
    assert_eq!(
        providers["providers"][0]["status"], "failing",
        "{providers}"
    );

    // Create: the reference's TemplateCreateRequest, in its snake_case.
    let templates = server.path("aws-default_templates.json");
    let (status, created) = call(
        "POST",
        "/api/v1/templates/",
        Some(
            json!({"template_id": "worker", "name": "worker", "description": "a worker",
                    "imageId": "busybox:1.36", "maxNumber": 3, "tags": {"team": "hpc"}}),
        ),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "created");
    assert_eq!(created["file"], templates.display().to_string());
    assert!(
        templates.is_file(),
        "the first write creates the file beside the config"
    );

    let (status, shown) = call("GET", "/api/v1/templates/worker", None);
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["templates"][0]["image_id"], "busybox:1.36");
    assert_eq!(shown["templates"][0]["max_instances"], 3);

    // Update: the fields sent replace the template's own, whatever their spelling.
    let (status, updated) = call(
        "PUT",
        "/api/v1/templates/worker",
        Some(json!({"image_id": "busybox:1.37"})),
    );
    assert_eq!(
        (status, updated["status"].as_str()),
        (200, Some("updated")),
        "{updated}"
    );
    let (_, list) = call("GET", "/api/v1/templates/", None);
    assert_eq!(list["templates"][0]["image_id"], "busybox:1.37", "{list}");
    assert_eq!(list["templates"][0]["max_instances"], 3, "{list}");

    // Refused writes change nothing: a template with problems, an id that exists.
    let before = std::fs::read(&templates).unwrap();
    let (status, refused) = call(
        "POST",
        "/api/v1/templates/",
        Some(json!({"templateId": "bad", "imageId": "busybox:1.36", "maxNumber": -4})),
    );
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "INVALID_TEMPLATE");
    assert!(
        refused["error"]["details"]["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("maxNumber"),
        "{refused}"
    );
    let (status, _) = call(
        "POST",
        "/api/v1/templates/",
        Some(json!({"templateId": "worker", "imageId": "busybox:1.36"})),
    );
    assert_eq!(status, 409);
    assert_eq!(std::fs::read(&templates).unwrap(), before);

    // A route that needs the provider answers a problem, not a bare 500.
    let (status, problem) = call(
        "POST",
        "/api/v1/machines/request",
        Some(json!({"templateId": "worker", "count": 1})),
    );
    assert_eq!(status, 503, "{problem}");
    assert_eq!(
        problem["error"]["code"], "PROVIDER_MISCONFIGURED",
        "{problem}"
    );

    // Delete.
    let (status, deleted) = call("DELETE", "/api/v1/templates/worker", None);
    assert_eq!(
        (status, deleted["status"].as_str()),
        (200, Some("deleted")),
        "{deleted}"
    );
    let (_, list) = call("GET", "/api/v1/templates/", None);
    assert_eq!(list["templates"], json!([]));
    let (status, _) = call("DELETE", "/api/v1/templates/worker", None);
    assert_eq!(status, 404);

    // Persisted config: a value orb would not start with is refused and nothing is written;
    // a good one is written, and the reply says it takes a restart.
    let config = server.path("config.json");
    let before = std::fs::read(&config).unwrap();
    let (status, refused) = call(
        "PUT",
        "/api/v1/config/request.default_timeout",
        Some(json!({"value": -5})),
    );
    assert_eq!(status, 422, "{refused}");
    assert_eq!(std::fs::read(&config).unwrap(), before);
    let (status, set) = call(
        "PUT",
        "/api/v1/config/request.default_timeout",
        Some(json!({"value": 600})),
    );
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["persisted"], true);
    assert_eq!(set["restart_required"], true);
    let on_disk: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(on_disk["request"]["default_timeout"], 600);
    assert_eq!(
        on_disk["provider"],
        sdk_config()["provider"],
        "the rest is kept"
    );
    let (status, saved) = call("POST", "/api/v1/config/save", None);
    assert_eq!(
        (status, saved["persisted"].as_bool()),
        (200, Some(true)),
        "{saved}"
    );

    let mut server = server;
    let stderr = server.stop();
    let (home, work) = (server.home.path(), server.path("work"));
    // Everything beside the config file, nothing in the home directory.
    assert!(
        work.join("orb.db").is_file(),
        "the store is in <config dir>/work"
    );
    let in_home: Vec<_> = walk(home);
    assert!(in_home.is_empty(), "nothing under HOME: {in_home:?}");
    let aws_warnings = stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("\"aws\""))
        .count();
    assert_eq!(
        aws_warnings, 1,
        "one start-up warning names the provider: {stderr}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .flat_map(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        walk(&path)
                    } else {
                        vec![path]
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

const SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

fn token(role: &str) -> String {
    let exp = jiff::Timestamp::now().as_second() + 3600;
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": format!("{role}-user"), "roles": [role], "exp": exp}),
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Kubernetes provider (never connected: its kubeconfig does not exist) so the writes
/// get its checks, behind the reference's Bearer tokens on TCP.
#[test]
fn template_and_config_writes_need_their_role_and_pass_the_load_checks_or_change_nothing() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "provider": {"providers": [{"name": "kube", "type": "k8s", "config": {
            "namespace": "batch", "in_cluster": false, "native_spec_enabled": true,
            "kubeconfig_path": dir.path().join("no-such-kubeconfig")}}]},
        "auth": {"type": "bearer", "bearer_token": {"secret_key": SECRET, "algorithm": "HS256"}},
    });
    let server = Managed::start(config, |_| {
        vec![
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
        ]
    });
    wait_until("the port", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let call = |role: &str, method: &str, path: &str, body: Value| {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        exchange(stream, method, path, Some(&token(role)), Some(&body))
    };
    let templates = server.path("kube_templates.json");
    let config_file = server.path("config.json");
    let config_before = std::fs::read(&config_file).unwrap();
    let good = json!({"templateId": "worker", "imageId": "busybox:1.36", "maxNumber": 3});

    // A viewer may not write a template; an operator may not rewrite the config.
    let (status, refused) = call("viewer", "POST", "/api/v1/templates/", good.clone());
    assert_eq!(status, 403, "{refused}");
    assert!(!templates.exists(), "nothing was written");
    let (status, _) = call(
        "operator",
        "PUT",
        "/api/v1/config/request.default_timeout",
        json!({"value": 600}),
    );
    assert_eq!(status, 403);

    // The checks a template file gets at load: the audit, native-spec rules and the closed
    // list of providerConfig keys a template may set.
    for (bad, needle) in [
        (
            json!({"templateId": "root", "imageId": "busybox:1.36",
                   "podSpecOverride": {"containers": [{"name": "orb",
                                       "securityContext": {"privileged": true}}]}}),
            "privileged",
        ),
        (
            json!({"templateId": "native", "imageId": "busybox:1.36",
                   "nativeSpec": {"spec": {"hostNetwork": true}}}),
            "hostNetwork",
        ),
        (
            json!({"templateId": "elsewhere", "imageId": "busybox:1.36",
                   "providerConfig": {"kubeconfig_path": "/etc/other"}}),
            "kubeconfig_path",
        ),
    ] {
        let (status, refused) = call("operator", "POST", "/api/v1/templates/", bad);
        assert_eq!(status, 422, "{refused}");
        assert!(refused.to_string().contains(needle), "{needle}: {refused}");
        assert!(!templates.exists(), "a refused template writes nothing");
    }

    let (status, created) = call("operator", "POST", "/api/v1/templates/", good);
    assert_eq!(status, 201, "{created}");
    let (status, refused) = call(
        "operator",
        "PUT",
        "/api/v1/templates/worker",
        json!({"podSpecOverride": {"hostPID": true}}),
    );
    assert_eq!(status, 422, "{refused}");
    let written: Value = serde_json::from_slice(&std::fs::read(&templates).unwrap()).unwrap();
    assert!(
        !written.to_string().contains("hostPID"),
        "a refused update leaves the file: {written}"
    );

    // An admin may set config values, but not one orb would not start with.
    let (status, refused) = call(
        "admin",
        "PUT",
        "/api/v1/config/provider.providers.0.config.namespace",
        json!({"value": "Not_A_Namespace"}),
    );
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["error"]["details"]["problems"][0]["field"], "provider.namespace",
        "{refused}"
    );
    assert_eq!(std::fs::read(&config_file).unwrap(), config_before);
    let mut server = server;
    server.stop();
}

#[test]
fn orb_config_set_writes_a_value_orb_starts_with_and_refuses_one_it_would_not() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, sdk_config().to_string()).unwrap();
    let set = |key: &str, value: &str| {
        bare_orb(home.path())
            .arg("--config")
            .arg(&file)
            .args(["config", "set", key, value])
            .output()
            .unwrap()
    };
    let out = set("request.default_timeout", "600");
    assert!(out.status.success(), "{out:?}");
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["value"], 600);
    assert_eq!(reply["restart_required"], true);
    let before = std::fs::read(&file).unwrap();
    let out = set("request.default_timeout", "-5");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("would not start"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing written");

    let help = bare_orb(home.path())
        .args(["config", "set", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("orb config set request.default_timeout 600"),
        "{help}"
    );
}

/// The Python of the client venv (`scripts/lib/pyclients.sh`), which `./scripts/test.sh`
/// exports.
fn test_python() -> PathBuf {
    std::env::var_os("ORB_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "ORB_TEST_PYTHON is unset: it names the Python of the client venv; run \
                 export ORB_TEST_PYTHON=\"$(source scripts/lib/pyclients.sh && py_clients_venv)\""
            )
        })
}

fn run_python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(test_python()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
#[ignore = "needs the client venv in ORB_TEST_PYTHON (scripts/lib/pyclients.sh; ./scripts/test.sh exports it)"]
fn a_client_generated_from_the_served_document_lists_creates_reads_updates_and_deletes_templates() {
    test_python();
    let server = Managed::start(sdk_config(), |dir| {
        vec![
            "--socket-path".into(),
            dir.join("orb.sock").display().to_string(),
        ]
    });
    let socket = server.path("orb.sock");
    wait_until("the socket", || UnixStream::connect(&socket).is_ok());
    // The document the managed server serves, as the SDKs' generators read it.
    let (status, document) = on_socket(&socket, "GET", "/openapi.json", None);
    assert_eq!(status, 200);
    let generated = tempfile::tempdir().unwrap();
    let spec = generated.path().join("openapi.json");
    std::fs::write(&spec, document.to_string()).unwrap();
    let package = generated.path().join("orb_client");
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients");
    run_python(&[
        "-m".as_ref(),
        "openapi_python_client".as_ref(),
        "generate".as_ref(),
        "--path".as_ref(),
        spec.as_os_str(),
        "--meta".as_ref(),
        "none".as_ref(),
        "--config".as_ref(),
        clients.join("openapi-python-client.yaml").as_os_str(),
        "--output-path".as_ref(),
        package.as_os_str(),
        "--fail-on-warning".as_ref(),
    ]);
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients_managed/templates_cycle.py");
    let stdout = run_python(&[
        script.as_os_str(),
        "--socket".as_ref(),
        socket.as_os_str(),
        "--client-dir".as_ref(),
        generated.path().as_os_str(),
    ]);
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|r| serde_json::from_str(r).unwrap())
        .unwrap_or_else(|| panic!("templates_cycle.py printed no RESULT line:\n{stdout}"));
    // What the client was told is what is on disk, beside the config file.
    let templates = server.path("aws-default_templates.json");
    assert_eq!(result["file"], templates.display().to_string());
    let written: Value = serde_json::from_slice(&std::fs::read(&templates).unwrap()).unwrap();
    assert_eq!(written["templates"], json!([]), "created, then deleted");
    let config: Value =
        serde_json::from_slice(&std::fs::read(server.path("config.json")).unwrap()).unwrap();
    assert_eq!(config["request"]["default_timeout"], 600);
    let mut server = server;
    server.stop();
}
