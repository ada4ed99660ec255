//! `orb serve` run as a real process: started on a free port, its stderr kept, called over
//! plain HTTP/1.1.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::identity::BrokerIdentity;
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

use super::clear_env;

/// Request states after which nothing changes any more.
pub const TERMINAL: &[&str] = &["complete", "partial", "failed", "cancelled", "timeout"];

/// One orb installation for `orb serve`: the default `k8s` provider `provider` on `ns`,
/// talking to the apiserver through `kubeconfig` (no node or event watch), with `extra`
/// merged into its config, and a 500-pod `worker` template.
pub fn install(
    ns: &TestNamespace,
    provider: &str,
    kubeconfig: &Path,
    extra: Value,
) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let mut provider_config = json!({
        "namespace": ns.name(),
        "in_cluster": false,
        "kubeconfig_path": kubeconfig,
        "node_watch_enabled": false,
        "events_watch_enabled": false,
    });
    for (k, v) in extra
        .as_object()
        .expect("extra provider config is a JSON object")
    {
        provider_config[k] = v.clone();
    }
    std::fs::write(
        config.join("config.json"),
        json!({
            "providers": [{"name": provider, "type": "k8s", "enabled": true, "default": true,
                           "config": provider_config}],
            "request": {"default_timeout": 300, "default_grace_period": 300,
                        "max_machines_per_request": 500},
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("templates.json"),
        r#"{"templates": [{"templateId": "worker", "maxNumber": 500, "imageId": "busybox:1.36",
             "command": ["sh", "-c", "sleep 3600"]}]}"#,
    )
    .unwrap();
    root
}

/// `orb serve` for a fresh namespace `prefix`-*, run as orb's shipped identity on an
/// [`install`] with `extra`; the namespace and the identity live as long as this.
pub struct ServedNamespace {
    pub server: Server,
    _root: tempfile::TempDir,
    _identity: BrokerIdentity,
    pub ns: TestNamespace,
    pub cluster: TestCluster,
}

impl ServedNamespace {
    pub async fn start(prefix: &str, extra: Value) -> ServedNamespace {
        let cluster = TestCluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        let identity = cluster.broker_identity(&ns).await;
        let root = install(&ns, "kube", &identity.kubeconfig, extra);
        ServedNamespace {
            server: Server::start(root.path(), None),
            _root: root,
            _identity: identity,
            ns,
            cluster,
        }
    }
}

/// A running `orb serve`, its address and everything it wrote to stderr so far; stopped
/// (SIGTERM) when dropped unless it already ended.
pub struct Server {
    pub child: Child,
    pub addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// `orb serve` on a free port of 127.0.0.1 for the installation at `root`, storing in
    /// `storage_url` when given.
    /// `ORB_SERVE_WRAPPER` (e.g. `env MALLOC_ARENA_MAX=2`) runs it under that command; a
    /// wrapper that execs keeps the pid (and so the soak's RSS) orb's.
    pub fn start(root: &Path, storage_url: Option<&str>) -> Server {
        let orb = assert_cmd::cargo::cargo_bin!("orb");
        let wrapper = std::env::var("ORB_SERVE_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut cmd = Command::new(program);
                cmd.args(words).arg(orb);
                cmd
            }
            None => Command::new(orb),
        };
        clear_env(&mut cmd);
        if let Some(url) = storage_url {
            cmd.env("ORB_STORAGE_URL", url);
        }
        cmd.env("ORB_ROOT_DIR", root)
            .env("HOME", root)
            .args(["serve", "--listen", "127.0.0.1:0"]);
        Server::spawn(cmd)
    }

    /// Starts `cmd`, an `orb serve` with all its arguments, and waits until it listens.
    /// An address on every interface is called on 127.0.0.1.
    pub fn spawn(mut cmd: Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        // Drains stderr for the whole run, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(addr) = line
                    .split("listening on http://")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                {
                    let _ = tx.send(addr.to_string());
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!("orb serve did not start listening: {}", log.lock().unwrap())
            })
            .replace("0.0.0.0:", "127.0.0.1:");
        Server { child, addr, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGKILL; asserts the server ended by it.
    pub fn kill9(mut self) {
        let status = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(!exit.success(), "SIGKILL must end the server: {exit:?}");
    }

    /// SIGTERM and wait for the exit.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        http(&self.addr, method, path, body)
    }

    /// [`Self::call`] with `Authorization: Bearer <token>`.
    pub fn call_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        http_with(&self.addr, method, path, body, Some(token))
    }

    /// Asks for `count` machines of the `worker` template [`install`] writes; the request id
    /// of the accepted request.
    pub fn request_workers(&self, count: u32) -> String {
        let (code, view) = self.call(
            "POST",
            "/api/v1/machines/request",
            Some(&json!({"template_id": "worker", "count": count})),
        );
        assert_eq!(code, 202, "{view}");
        view["request"]["request_id"].as_str().unwrap().to_string()
    }

    /// [`Self::request_workers`], waited for (90 s at most) to complete; its view.
    pub async fn acquire_workers(&self, count: u32) -> Value {
        let id = self.request_workers(count);
        let done = self.wait_finished(&id, Duration::from_secs(90)).await;
        assert_eq!(done["request"]["status"], "complete", "{done}");
        done
    }

    /// Polls a request's status (asking the provider) until it is finished; its view.
    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> Value {
        self.wait_finished_with(None, id, timeout).await
    }

    /// [`Self::wait_finished`] as the caller of `token`.
    pub async fn wait_finished_as(&self, token: &str, id: &str, timeout: Duration) -> Value {
        self.wait_finished_with(Some(token), id, timeout).await
    }

    async fn wait_finished_with(&self, token: Option<&str>, id: &str, timeout: Duration) -> Value {
        wait_for(&format!("request {id} to finish"), timeout, || async {
            let path = format!("/api/v1/requests/{id}/status");
            let (code, view) = http_with(&self.addr, "GET", &path, None, token);
            let status = view["request"]["status"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            if code == 200 && TERMINAL.contains(&status.as_str()) {
                Check::Done(view)
            } else {
                Check::NotYet(format!(
                    "{code} {status}: {}",
                    view["request"]["status_message"]
                ))
            }
        })
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// One HTTP/1.1 call with `Connection: close`; the JSON body (or the text as a string).
pub fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    http_with(addr, method, path, body, None)
}

/// [`http`], with a Bearer token when given.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, text) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()));
    (code, value)
}

/// `orb serve` started from `command` (with `serve --listen 127.0.0.1:0` appended) once it
/// has printed both its TCP address and its Unix socket: the child, the address, the socket
/// and the stderr lines up to then. The rest of stderr is drained in the background.
pub fn spawn_listening(mut command: Command) -> (Child, String, PathBuf, String) {
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
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stderr.read_to_string(&mut sink);
    });
    (child, addr.unwrap(), socket.unwrap(), startup)
}

/// Live orb pods of the namespace by request id label.
pub async fn pods_by_request(cluster: &TestCluster, ns: &str) -> BTreeMap<String, Vec<Pod>> {
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), ns)
        .list(&ListParams::default().labels("orb.io/managed=true"))
        .await
        .unwrap()
        .items;
    let mut by_request: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let id = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("orb.io/request-id"))
            .cloned()
            .unwrap_or_default();
        by_request.entry(id).or_default().push(pod);
    }
    by_request
}
