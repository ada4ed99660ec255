//! The real `orb serve` binary killed with SIGKILL in the middle of a 200-pod acquire, then
//! started again: the request ends complete, every pod it has is a stored machine and no
//! machine has two pods. And two replicas on one PostgreSQL acquiring and returning at the
//! same time: every request is processed once. Needs the control plane
//! (`tools/control-plane/cp up`); the replica test needs `ORB_TEST_POSTGRES_URL`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

const ENV_TO_CLEAR: &[&str] = &[
    "ORB_CONFIG_DIR",
    "ORB_WORK_DIR",
    "ORB_LOG_DIR",
    "ORB_CONFIG_FILE",
    "ORB_SCHEDULER",
    "ORB_STORAGE_URL",
    "ORB_DAEMON",
    "HF_PROVIDER_NAME",
    "HF_PROVIDER_CONFDIR",
    "HF_PROVIDER_WORKDIR",
    "HF_PROVIDER_LOGDIR",
];

/// One orb installation: config for `provider` on `ns`.
fn install(
    cluster: &TestCluster,
    ns: &TestNamespace,
    provider: &str,
    extra: Value,
) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let mut provider_config = json!({
        "namespace": ns.name(),
        "in_cluster": false,
        "kubeconfig_path": cluster.kubeconfig,
        "node_watch_enabled": false,
        "events_watch_enabled": false,
    });
    for (k, v) in extra.as_object().unwrap() {
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

/// A running `orb serve`, its address and everything it wrote to stderr so far.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(root: &Path, storage_url: Option<&str>) -> Server {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
        for var in ENV_TO_CLEAR {
            cmd.env_remove(var);
        }
        if let Some(url) = storage_url {
            cmd.env("ORB_STORAGE_URL", url);
        }
        let mut child = cmd
            .env("ORB_ROOT_DIR", root)
            .env("HOME", root)
            .args(["serve", "--listen", "127.0.0.1:0"])
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
            });
        Server { child, addr, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn kill9(mut self) {
        let status = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(!exit.success(), "SIGKILL must end the server: {exit:?}");
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        http(&self.addr, method, path, body)
    }
}

/// One HTTP/1.1 call with `Connection: close`; the JSON body (or the text as a string).
fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
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

/// Live pods of the namespace by request id label.
async fn pods_by_request(cluster: &TestCluster, ns: &str) -> BTreeMap<String, Vec<Pod>> {
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

const TERMINAL: &[&str] = &["complete", "partial", "failed", "cancelled", "timeout"];

/// Polls a request's status (asking the provider) until it is finished.
async fn wait_finished(server: &Server, id: &str, timeout: Duration) -> Value {
    wait_for(&format!("request {id} to finish"), timeout, || async {
        let (code, view) = server.call("GET", &format!("/api/v1/requests/{id}/status"), None);
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

fn machine_ids(view: &Value) -> Vec<String> {
    view["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap().to_string())
        .collect()
}

fn pod_names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_acquire_finishes_the_request_after_restart_without_orphans_or_duplicates()
 {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("sigkill").await;
    let provider = format!("kill-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    // Interrupted acquires older than 2 s are resumed at start-up.
    let root = install(
        &cluster,
        &ns,
        &provider,
        json!({"orphan_min_age_seconds": 2}),
    );
    let first = Server::start(root.path(), None);

    let addr = first.addr.clone();
    // The call never answers: the server dies under it.
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            http(
                &addr,
                "POST",
                "/api/v1/machines/request",
                Some(&json!({"template_id": "worker", "count": 200})),
            )
        });
    });
    // Polled tightly (not every 250 ms like wait_for): 200 creates take well under a second.
    let pods_api = Api::<Pod>::namespaced(cluster.client.clone(), ns.name());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let before_kill = loop {
        let seen = pods_api
            .list(&ListParams::default().labels("orb.io/managed=true"))
            .await
            .unwrap()
            .items
            .len();
        if seen > 0 {
            break seen;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod of the acquire within 60 s: {}",
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    first.kill9();
    let by_request = pods_by_request(&cluster, ns.name()).await;
    assert_eq!(
        by_request.len(),
        1,
        "one request's pods: {:?}",
        by_request.keys()
    );
    let (id, pods) = by_request.into_iter().next().unwrap();
    assert!(
        before_kill < 200 && pods.len() < 200,
        "the kill must land mid-acquire: {} pods seen before, {} after",
        before_kill,
        pods.len()
    );

    // Let the interrupted request age past orphan_min_age_seconds (2 s), so the start-up
    // reconciliation (not the 30 s periodic pass) resumes it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = Server::start(root.path(), None);
    let view = wait_finished(&second, &id, Duration::from_secs(240)).await;
    assert_eq!(
        view["request"]["status"],
        "complete",
        "{}\nserver log:\n{}",
        view["request"],
        second.log()
    );
    let machines = machine_ids(&view);
    let distinct: BTreeSet<String> = machines.iter().cloned().collect();
    assert_eq!(machines.len(), 200, "{}", view["request"]);
    assert_eq!(distinct.len(), 200, "a machine id is stored twice");

    let by_request = pods_by_request(&cluster, ns.name()).await;
    let pods = by_request.get(&id).cloned().unwrap_or_default();
    assert_eq!(
        by_request.keys().collect::<Vec<_>>(),
        vec![&id],
        "pods of another or no request exist"
    );
    assert_eq!(
        pod_names(&pods),
        distinct,
        "the request's pods must be exactly its stored machines (no orphan, none missing)"
    );
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        let machine = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("orb.io/machine-id"))
            .cloned()
            .unwrap_or_else(|| pod.metadata.name.clone().unwrap());
        *per_machine.entry(machine).or_default() += 1;
    }
    assert!(
        per_machine.values().all(|n| *n == 1),
        "two pods for one machine: {per_machine:?}"
    );
    let (code, ready) = second.call("GET", "/readyz", None);
    let detail = ready["checks"]["reconciliation"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        detail.contains("interrupted acquires settled") && detail.contains(&id),
        "{code} {ready}"
    );
    second.stop();
}

fn postgres_url() -> Option<String> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_acquire_and_return_concurrently_without_processing_twice() {
    let Some(url) = postgres_url() else { return };
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("replicas").await;
    let provider = format!(
        "replica-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let roots = [
        install(&cluster, &ns, &provider, json!({})),
        install(&cluster, &ns, &provider, json!({})),
    ];
    let servers = [
        Server::start(roots[0].path(), Some(&url)),
        Server::start(roots[1].path(), Some(&url)),
    ];
    let leaders = wait_for(
        "one leader among the replicas",
        Duration::from_secs(60),
        || async {
            let leading: Vec<bool> = servers
                .iter()
                .map(|s| {
                    let (_, ready) = s.call("GET", "/readyz", None);
                    ready["checks"]["leader"]["detail"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("this replica leads")
                })
                .collect();
            match leading.iter().filter(|l| **l).count() {
                1 => Check::Done(leading),
                n => Check::NotYet(format!("{n} leaders")),
            }
        },
    )
    .await;
    assert_eq!(leaders.len(), 2);

    // Six acquires of 3 pods, alternating replicas, all at once.
    let acquires: Vec<(usize, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let server = &servers[i % 2];
                scope.spawn(move || {
                    let (code, view) = server.call(
                        "POST",
                        "/api/v1/machines/request",
                        Some(&json!({"template_id": "worker", "count": 3})),
                    );
                    assert!(code == 200 || code == 202, "{code} {view}");
                    (
                        i % 2,
                        view["request"]["request_id"].as_str().unwrap().to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: BTreeSet<&String> = acquires.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), 6, "six distinct requests");

    // Both replicas poll every request until it finishes.
    let mut finished = BTreeMap::new();
    for (i, (_, id)) in acquires.iter().enumerate() {
        let _ = servers[(i + 1) % 2].call("GET", &format!("/api/v1/requests/{id}/status"), None);
        let view = wait_finished(&servers[i % 2], id, Duration::from_secs(120)).await;
        assert_eq!(view["request"]["status"], "complete", "{}", view["request"]);
        finished.insert(id.clone(), view);
    }
    let by_request = pods_by_request(&cluster, ns.name()).await;
    for (id, view) in &finished {
        let machines = machine_ids(view);
        assert_eq!(machines.len(), 3, "{id}: {machines:?}");
        let pods = by_request.get(id).cloned().unwrap_or_default();
        assert_eq!(
            pod_names(&pods),
            machines.iter().cloned().collect::<BTreeSet<_>>(),
            "{id}: pods must be exactly the stored machines"
        );
    }
    assert_eq!(
        by_request.values().map(Vec::len).sum::<usize>(),
        18,
        "no request created its pods twice"
    );

    // Each request is returned through the replica that did not acquire it, all at once.
    let returns: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = acquires
            .iter()
            .map(|(owner, id)| {
                let server = &servers[(owner + 1) % 2];
                scope.spawn(move || {
                    let (code, view) = server.call(
                        "POST",
                        "/api/v1/machines/return",
                        Some(&json!({"request_id": id})),
                    );
                    assert!(code == 200 || code == 202, "{code} {view}");
                    (
                        id.clone(),
                        view["request"]["request_id"].as_str().unwrap().to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let return_ids: BTreeSet<&String> = returns.iter().map(|(_, r)| r).collect();
    assert_eq!(return_ids.len(), 6, "one return request per acquire");
    for (i, (_, ret)) in returns.iter().enumerate() {
        let view = wait_finished(&servers[i % 2], ret, Duration::from_secs(120)).await;
        assert_eq!(view["request"]["status"], "complete", "{}", view["request"]);
        assert_eq!(machine_ids(&view).len(), 3, "{}", view["request"]);
    }
    wait_for(
        "every returned pod to be gone",
        Duration::from_secs(60),
        || async {
            let left: usize = pods_by_request(&cluster, ns.name())
                .await
                .values()
                .map(Vec::len)
                .sum();
            if left == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{left} pods left"))
            }
        },
    )
    .await;
    // A second return of the same machines is refused: each was returned once.
    let (code, body) = servers[0].call(
        "POST",
        "/api/v1/machines/return",
        Some(&json!({"request_id": acquires[0].1})),
    );
    assert!(
        code >= 400,
        "a second return must be refused: {code} {body}"
    );
    for server in servers {
        server.stop();
    }
}
