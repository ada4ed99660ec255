//! `orb serve` status reads at 10,000 pods, on the local control plane.
//!
//! Starts the real `orb serve` (SQLite, the watch cache on), acquires 200 requests of 50
//! pods through its REST API with a template whose pods stay Pending (so every request stays
//! in progress and every status read asks the provider), waits until the
//! cache holds all 10,000 pods, then times `GET /api/v1/requests/{id}/status` over random
//! requests on one keep-alive connection and reads the server's resident memory. The same
//! reads against a second server with `watch_enabled=false` (a LIST per read) give the
//! ratio. Prints a table and one `BENCH_JSON {...}` line for bench/run.sh.
//!
//!   cargo bench -p orb --bench daemon_status
//!
//! How the pods stay Pending, BENCH_PENDING:
//! - `elsewhere` (the default): a `schedulerName` no scheduler answers to
//!   (`pod_spec_override`), so kube-scheduler queues none of them, as with pods that were
//!   placed long ago;
//! - `gated`: a scheduling gate (`pod_spec_override.schedulingGates`). kube-scheduler never
//!   tries to place such a pod but holds every one in its queue and walks them on cluster
//!   events (kubernetes/kubernetes#124384 shows it for pod deletions): at 50,000 it used a
//!   whole core through the run (2026-12-07), on the two cores the apiserver and the server
//!   share. The default until 2026-12-07;
//! - `unschedulable`: a nodeSelector no node matches, as in the first runs. kube-scheduler
//!   then retries 10,000 pods on the same two cores while the reads are timed.
//!
//! It prints how much CPU kube-scheduler used through the reads and through the restarts, as
//! a share of one core, since that is taken from the apiserver and the server on this machine.
//!
//! Then it restarts the server `BENCH_RESTARTS` times with every pod in place and times, from
//! spawn, a serving cache (its initial paginated LIST) and the end of the start-up
//! reconciliation, each restart next to a bare paginated kube-rs LIST of the same pods, and
//! next to the same pages as protobuf decoded as the cache decodes them (the cache's own
//! LIST without the cache: the limit). It also counts the store rows the timed reads wrote (request and machine
//! versions): reads of unchanged requests should write none.
//!
//! Last, it deletes `BENCH_CHANGED` pods of the first request outside orb and counts the rows
//! written until a status read reports them: only those machines (and at most the request
//! itself) should be written.
//!
//! Environment: KUBECONFIG (default: the repo's local control plane), BENCH_PODS (10000),
//! BENCH_PODS_PER_REQUEST (50), BENCH_READS (2000), BENCH_LIST_READS (300), BENCH_RESTARTS
//! (3), BENCH_CHANGED (10), BENCH_PENDING, BENCH_STORAGE_URL (the measured server's store,
//! e.g. an empty PostgreSQL database `postgres://…`; default SQLite in its root directory;
//! the LIST-per-read server always keeps its own SQLite).

// The result line is one `json!` with many fields.
#![recursion_limit = "256"]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One HTTP/1.1 keep-alive connection.
struct Conn {
    reader: BufReader<TcpStream>,
    addr: String,
}

impl Conn {
    fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).expect("connecting to orb serve");
        stream.set_nodelay(true).ok();
        stream.set_read_timeout(Some(Duration::from_secs(120))).ok();
        Self {
            reader: BufReader::new(stream),
            addr: addr.to_string(),
        }
    }

    fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .expect("sending");
        let mut status = String::new();
        self.reader.read_line(&mut status).expect("status line");
        let code: u16 = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status:?}"));
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0u8; length];
        self.reader.read_exact(&mut buf).expect("body");
        (code, String::from_utf8_lossy(&buf).into_owned())
    }
}

struct Server {
    child: Child,
    addr: String,
    _root: tempfile::TempDir,
    /// `ORB_STORAGE_URL` of the server (None: SQLite under its root).
    storage: Option<String>,
    /// From the last restart's spawn to the server saying where it listens.
    listening: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `elsewhere`, `gated` or `unschedulable` (see the module docs).
fn pending_mode() -> &'static str {
    match std::env::var("BENCH_PENDING").as_deref() {
        Ok("unschedulable") => "unschedulable",
        Ok("gated") => "gated",
        Ok("elsewhere") | Err(_) => "elsewhere",
        Ok(other) => panic!("BENCH_PENDING={other}: use elsewhere, gated or unschedulable"),
    }
}

/// A root dir with config.json and the template for `namespace`; the store is created in it
/// by the first server.
fn prepare_root(namespace: &str, watch: bool) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({
            "request": {"max_machines_per_request": env_num("BENCH_PODS_PER_REQUEST", 50).max(1000)},
            "providers": [{"name": "kube", "type": "k8s", "config": {
                "namespace": namespace,
                "kubeconfig_path": kube_fixture::default_kubeconfig_path(),
                "in_cluster": false,
                "watch_enabled": watch,
                "pod_timeout_seconds": 86400,
                "controller_status_cache_ttl_seconds": 5,
            }}]
        })
        .to_string(),
    )
    .unwrap();
    let mut template = json!({
        "templateId": "nowhere",
        "maxNumber": -1,
        "imageId": "busybox:1.36",
    });
    match pending_mode() {
        "unschedulable" => {
            template["nodeSelector"] = json!({"orb-rs.io/bench": "no-such-node"});
        }
        "gated" => {
            template["pod_spec_override"] =
                json!({"schedulingGates": [{"name": "orb-rs.io/bench"}]});
        }
        _ => {
            template["pod_spec_override"] = json!({"schedulerName": "orb-rs-bench-nobody"});
        }
    }
    std::fs::write(
        config.join("kube_templates.json"),
        json!({ "templates": [template] }).to_string(),
    )
    .unwrap();
    root
}

fn start_server(namespace: &str, watch: bool, storage: Option<String>) -> Server {
    let root = prepare_root(namespace, watch);
    let (child, addr) = spawn_server(root.path(), storage.as_deref());
    Server {
        child,
        addr,
        _root: root,
        storage,
        listening: Duration::ZERO,
    }
}

/// `BENCH_STORAGE_URL`, when set.
fn storage_url() -> Option<String> {
    std::env::var("BENCH_STORAGE_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// `orb serve` on the config and store under `root`, and the address it listens on.
fn spawn_server(root: &std::path::Path, storage: Option<&str>) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orb"));
    match storage {
        Some(url) => command.env("ORB_STORAGE_URL", url),
        None => command.env_remove("ORB_STORAGE_URL"),
    };
    let mut child = command
        .env("ORB_ROOT_DIR", root)
        .env("HOME", root)
        .env_remove("ORB_CONFIG_DIR")
        .env_remove("ORB_WORK_DIR")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting orb serve");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("orb serve exited before listening");
        }
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    (child, addr)
}

impl Server {
    /// Stops this server and starts another on the same config and store (the time to a
    /// serving cache after a restart or an upgrade, with every pod already there); returns
    /// when the new process was spawned, and sets how long it took to listen.
    fn restart(&mut self) -> Instant {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let spawned = Instant::now();
        let (child, addr) = spawn_server(self._root.path(), self.storage.as_deref());
        self.listening = spawned.elapsed();
        self.child = child;
        self.addr = addr;
        spawned
    }
}

/// What the restarted server reached, and when (from spawn).
struct Restart {
    /// The process up and listening (its cache starts listing then).
    listening: Duration,
    serving: Duration,
    reconciled: Duration,
    /// The start-up reconciliation's own figure, from `/readyz`.
    reconcile_ms: f64,
    /// CPU seconds the restarted server used until its cache served.
    server_cpu: f64,
    /// CPU seconds kube-apiserver used from just before the restart until the cache served.
    apiserver_cpu: f64,
}

/// Polls the restarted server until its cache serves all `pods` and its start-up
/// reconciliation has reported.
fn time_restart(
    server: &Server,
    spawned: Instant,
    apiserver_cpu_before: f64,
    pods: usize,
) -> Restart {
    let mut conn = Conn::open(&server.addr);
    let mut serving = None;
    let mut cpu = (f64::NAN, f64::NAN);
    loop {
        assert!(
            spawned.elapsed() < Duration::from_secs(600),
            "the restarted server did not serve and reconcile within 10 minutes"
        );
        if serving.is_none() {
            let (_, text) = conn.call("GET", "/metrics", None);
            let value = |name: &str| {
                text.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().last())
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            if value("orb_k8s_cache_serving ") >= 1.0 && value("orb_k8s_cache_pods ") >= pods as f64
            {
                serving = Some(spawned.elapsed());
                cpu = (
                    cpu_seconds(&format!("/proc/{}/stat", server.child.id())),
                    apiserver_cpu() - apiserver_cpu_before,
                );
            }
        }
        if let Some(serving) = serving {
            let (_, body) = conn.call("GET", "/readyz", None);
            if let Some(ms) = body
                .split("reconciled ")
                .nth(1)
                .and_then(|rest| rest.split(" in ").nth(1))
                .and_then(|rest| rest.split(" ms").next())
                .and_then(|ms| ms.parse::<f64>().ok())
            {
                return Restart {
                    listening: server.listening,
                    serving,
                    reconciled: spawned.elapsed(),
                    reconcile_ms: ms,
                    server_cpu: cpu.0,
                    apiserver_cpu: cpu.1,
                };
            }
            assert!(
                !body.contains("reconciliation failed"),
                "the start-up reconciliation failed: {body}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `work` with a client of the local control plane, on a small runtime of its own (the
/// bench talks to the cluster through orb, except to set up and to measure the limit).
fn with_client<T>(work: impl AsyncFnOnce(kube::Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = kube_fixture::client_from(&kube_fixture::default_kubeconfig_path())
            .await
            .expect("connecting to the local control plane (is it up? tools/control-plane/cp up)");
        work(client).await
    })
}

/// The limit for a serving cache: a bare paginated LIST (500 a page, as the cache's) of the
/// namespace's managed pods with kube-rs, every page decoded.
fn bare_list(namespace: &str, pods: usize) -> Duration {
    with_client(async |client| {
        use k8s_openapi::api::core::v1::Pod;
        let api: kube::Api<Pod> = kube::Api::namespaced(client, namespace);
        timed_pages(pods, async |params| {
            let page = api.list(params).await.expect("listing pods");
            let token = page.metadata.continue_.filter(|c| !c.is_empty());
            (page.items.len(), token)
        })
        .await
    })
}

/// One bare protobuf LIST: how long it took, the CPU seconds the listing thread used and
/// the CPU seconds kube-apiserver used meanwhile.
struct BareRound {
    took: Duration,
    cpu: f64,
    apiserver_cpu: f64,
}

/// The same pages as protobuf, the way the cache now LISTs them (orb-k8s's `list_kept`),
/// decoded into what the cache keeps, and not kept: the limit for the cache's own LIST.
fn bare_list_protobuf(namespace: &str, pods: usize) -> BareRound {
    let apiserver_before = apiserver_cpu();
    let cpu_before = cpu_seconds("/proc/thread-self/stat");
    let took = with_client(async |client| {
        use orb_k8s::kept::Kept;
        let api: kube::Api<Kept> = kube::Api::namespaced(client, namespace);
        timed_pages(pods, async |params| {
            let page = orb_k8s::protobuf_list::list_kept(&api, params)
                .await
                .expect("listing pods");
            assert_eq!(page.encoding, orb_k8s::protobuf_list::Encoding::Protobuf);
            (page.items.len(), page.continue_token)
        })
        .await
    });
    BareRound {
        took,
        cpu: cpu_seconds("/proc/thread-self/stat") - cpu_before,
        apiserver_cpu: apiserver_cpu() - apiserver_before,
    }
}

/// The same protobuf pages read the way the cache reads them, each next page asked for
/// while the current one arrives (`list_kept_pages`), decoded and not kept.
fn bare_list_protobuf_overlapped(namespace: &str, pods: usize) -> Duration {
    with_client(async |client| {
        use orb_k8s::kept::Kept;
        let api: kube::Api<Kept> = kube::Api::namespaced(client, namespace);
        let t0 = Instant::now();
        let mut seen = 0;
        orb_k8s::protobuf_list::list_kept_pages(&api, &managed_pages(), |page| {
            assert_eq!(page.encoding, orb_k8s::protobuf_list::Encoding::Protobuf);
            seen += page.items.len();
        })
        .await
        .expect("listing pods");
        let took = t0.elapsed();
        assert!(
            seen >= pods,
            "the overlapped LIST saw {seen} of {pods} pods"
        );
        took
    })
}

/// User and system CPU seconds from a `/proc/.../stat` file (NaN when it cannot be read).
/// The kernel counts in clock ticks, 100 a second on Linux.
fn cpu_seconds(stat_path: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its ')' start at 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// CPU seconds kube-apiserver has used (NaN when no process of that name is found here).
fn apiserver_cpu() -> f64 {
    process_cpu("kube-apiserver")
}

/// CPU seconds the process named `comm` has used (NaN when none is found here).
fn process_cpu(comm: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return f64::NAN;
    };
    entries
        .flatten()
        .find(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm))
        .map_or(f64::NAN, |e| {
            cpu_seconds(&e.path().join("stat").to_string_lossy())
        })
}

/// Measures the share of one core kube-scheduler uses from `start` until `share` is called.
struct SchedulerLoad {
    cpu: f64,
    at: Instant,
}

impl SchedulerLoad {
    fn start() -> Self {
        Self {
            cpu: process_cpu("kube-scheduler"),
            at: Instant::now(),
        }
    }
    fn share(&self) -> f64 {
        (process_cpu("kube-scheduler") - self.cpu) / self.at.elapsed().as_secs_f64()
    }
}

/// The managed pods, 500 a page (the cache's page).
fn managed_pages() -> kube::api::ListParams {
    kube::api::ListParams::default()
        .labels("orb.io/managed=true")
        .limit(500)
}

/// Times a paginated LIST of the managed pods, 500 a page: `page` reads one and gives how
/// many pods it held and the next page's token. Checks that at least `pods` were seen.
async fn timed_pages(
    pods: usize,
    mut page: impl AsyncFnMut(&kube::api::ListParams) -> (usize, Option<String>),
) -> Duration {
    let t0 = Instant::now();
    let mut params = managed_pages();
    let mut seen = 0;
    loop {
        let (count, token) = page(&params).await;
        seen += count;
        match token {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let took = t0.elapsed();
    assert!(seen >= pods, "the bare LIST saw {seen} of {pods} pods");
    took
}

/// Rows the store has written so far: every insert counts version 1 and every update adds
/// one, for requests and machines alike.
fn rows_written(server: &Server) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = match &server.storage {
            Some(url) => orb_store::Store::open(url).await,
            None => {
                orb_store::Store::open_sqlite_file(&server._root.path().join("work/orb.db")).await
            }
        }
        .expect("opening the server's store");
        let machines = store
            .list_machines(&orb_store::MachineFilter::default())
            .await
            .expect("reading machines");
        let requests = store
            .list_requests(&Default::default())
            .await
            .expect("reading requests");
        store.close().await;
        machines.iter().map(|m| m.version).sum::<i64>()
            + requests.iter().map(|r| r.version).sum::<i64>()
    })
}

/// Deletes `count` pods of request `id` outside orb (grace 0), reads the request's status
/// until it reports that many machines no longer pending, reads it once more after the
/// follow loop's debounce, and returns the store rows written meanwhile: the changed
/// machines, and the request if its own status moved.
fn change_machines(server: &Server, namespace: &str, id: &str, count: usize) -> i64 {
    if count == 0 {
        return 0;
    }
    let mut conn = Conn::open(&server.addr);
    let path = format!("/api/v1/requests/{id}/status");
    let (code, body) = conn.call("GET", &path, None);
    assert_eq!(code, 200, "{body}");
    let before = rows_written(server);
    with_client(async |client| {
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, DeleteParams, ListParams};
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let selector = format!("orb.io/request-id={id}");
        let listed = api
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .expect("listing the request's pods");
        let mut names: Vec<String> = listed
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        for name in names.iter().take(count) {
            api.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .expect("deleting a pod");
        }
    });
    let t0 = Instant::now();
    loop {
        let (code, body) = conn.call("GET", &path, None);
        assert_eq!(code, 200, "{body}");
        let reply: Value = serde_json::from_str(&body).unwrap();
        let moved = reply["machines"].as_array().map_or(0, |machines| {
            machines.iter().filter(|m| m["status"] != "pending").count()
        });
        if moved >= count {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{moved} of {count} deleted pods reported after 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (code, body) = conn.call("GET", &path, None);
    assert_eq!(code, 200, "{body}");
    rows_written(server) - before
}

fn metric(conn: &mut Conn, name: &str) -> Option<f64> {
    let (_, text) = conn.call("GET", "/metrics", None);
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
}

fn rss_mib(pid: u32) -> f64 {
    proc_status_mib(pid, "VmRSS:")
}

/// The most the process has held resident since it started (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    proc_status_mib(pid, "VmHWM:")
}

fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn request_id_of(reply: &Value) -> String {
    reply["request"]["request_id"]
        .as_str()
        .or_else(|| reply["request_id"].as_str())
        .unwrap_or_else(|| panic!("no request id in {reply}"))
        .to_string()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Simple xorshift so the read order is random but repeatable.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn time_reads(conn: &mut Conn, ids: &[String], reads: usize) -> Vec<Duration> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut times = Vec::with_capacity(reads);
    for _ in 0..reads {
        let id = &ids[(next(&mut seed) % ids.len() as u64) as usize];
        let path = format!("/api/v1/requests/{id}/status");
        let t0 = Instant::now();
        let (code, body) = conn.call("GET", &path, None);
        times.push(t0.elapsed());
        assert_eq!(code, 200, "status of {id}: {body}");
    }
    times.sort();
    times
}

fn kubectl_namespace(action: &str, namespace: &str) {
    with_client(async |client| {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::{Api, DeleteParams, PostParams};
        let api: Api<Namespace> = Api::all(client);
        match action {
            "create" => {
                let ns: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
                api.create(&PostParams::default(), &ns)
                    .await
                    .expect("creating the bench namespace");
            }
            _ => {
                let _ = api.delete(namespace, &DeleteParams::background()).await;
            }
        }
    });
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let pods = env_num("BENCH_PODS", 10_000);
    let per_request = env_num("BENCH_PODS_PER_REQUEST", 50);
    let reads = env_num("BENCH_READS", 2_000);
    let list_reads = env_num("BENCH_LIST_READS", 300);
    let restart_rounds = env_num("BENCH_RESTARTS", 3).max(1);
    let requests = pods.div_ceil(per_request);
    let namespace = format!("bench-daemon-{}", std::process::id());
    kubectl_namespace("create", &namespace);
    let result = std::panic::catch_unwind(|| {
        run(
            &namespace,
            Sizes {
                requests,
                per_request,
                reads,
                list_reads,
                restart_rounds,
            },
        )
    });
    kubectl_namespace("delete", &namespace);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

struct Sizes {
    requests: usize,
    per_request: usize,
    reads: usize,
    list_reads: usize,
    restart_rounds: usize,
}

/// Issue #10's ceiling at 10,000 pods, issue #22's at 50,000.
fn rss_target_mib(pods: usize) -> f64 {
    if pods <= 10_000 { 100.0 } else { 300.0 }
}

fn run(namespace: &str, sizes: Sizes) {
    let Sizes {
        requests,
        per_request,
        reads,
        list_reads,
        restart_rounds,
    } = sizes;
    let pods = requests * per_request;
    let server = start_server(namespace, true, storage_url());
    let mut conn = Conn::open(&server.addr);
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(requests);
    for _ in 0..requests {
        let (code, body) = conn.call(
            "POST",
            "/api/v1/machines/request",
            Some(&json!({"template_id": "nowhere", "count": per_request})),
        );
        assert_eq!(code, 202, "acquire: {body}");
        let reply: Value = serde_json::from_str(&body).unwrap();
        ids.push(request_id_of(&reply));
    }
    let acquired = t0.elapsed();
    let t1 = Instant::now();
    loop {
        let cached = metric(&mut conn, "orb_k8s_cache_pods").unwrap_or(0.0) as usize;
        if cached >= pods {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(1800),
            "the watch cache holds {cached} of {pods} pods after 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let cached_after = acquired + t1.elapsed();
    // Warm-up: every request once (the first read stores its machines).
    for id in &ids {
        let (code, body) = conn.call("GET", &format!("/api/v1/requests/{id}/status"), None);
        assert_eq!(code, 200, "{body}");
    }
    let written_before = rows_written(&server);
    let scheduler = SchedulerLoad::start();
    let cache_times = time_reads(&mut conn, &ids, reads);
    let scheduler_reads = scheduler.share();
    let written = rows_written(&server) - written_before;
    let served_from_cache = metric(&mut conn, "orb_k8s_status_reads_total{reason=\"cache\"}");
    let rss = rss_mib(server.child.id());
    let peak = peak_rss_mib(server.child.id());
    drop(conn);

    // Restarts with every pod in place, each next to a bare paginated LIST of the same pods
    // (alternating which goes first): the time to a serving cache and to the end of the
    // start-up reconciliation (which LISTs every managed object and reads the stored requests).
    let mut server = server;
    let mut restarts = Vec::new();
    let mut bare = Vec::new();
    let mut bare_protobuf = Vec::new();
    let mut overlapped = Vec::new();
    let scheduler = SchedulerLoad::start();
    for round in 0..restart_rounds {
        if round % 2 == 1 {
            bare.push(bare_list(namespace, pods));
            bare_protobuf.push(bare_list_protobuf(namespace, pods));
            overlapped.push(bare_list_protobuf_overlapped(namespace, pods));
        }
        let apiserver_before = apiserver_cpu();
        let spawned = server.restart();
        restarts.push(time_restart(&server, spawned, apiserver_before, pods));
        if round % 2 == 0 {
            bare.push(bare_list(namespace, pods));
            bare_protobuf.push(bare_list_protobuf(namespace, pods));
            overlapped.push(bare_list_protobuf_overlapped(namespace, pods));
        }
    }
    let scheduler_restarts = scheduler.share();
    let restart_rss = rss_mib(server.child.id());
    let restart_peak = peak_rss_mib(server.child.id());
    let changed = env_num("BENCH_CHANGED", 10).min(per_request);
    let changed_rows = change_machines(&server, namespace, &ids[0], changed);
    drop(server);

    // The LIST side: a second server with the watch off and its own SQLite store acquires a
    // few requests in the same crowded namespace and reads those, each read a labelled LIST
    // that the apiserver answers from the namespace's 10,000 pods.
    let list_server = start_server(namespace, false, None);
    let mut conn = Conn::open(&list_server.addr);
    let mut list_ids = Vec::new();
    for _ in 0..4 {
        let (code, body) = conn.call(
            "POST",
            "/api/v1/machines/request",
            Some(&json!({"template_id": "nowhere", "count": per_request})),
        );
        assert_eq!(code, 202, "acquire: {body}");
        let reply: Value = serde_json::from_str(&body).unwrap();
        list_ids.push(request_id_of(&reply));
    }
    for id in &list_ids {
        conn.call("GET", &format!("/api/v1/requests/{id}/status"), None);
    }
    let list_times = time_reads(&mut conn, &list_ids, list_reads);
    let list_rss = rss_mib(list_server.child.id());
    drop(conn);
    drop(list_server);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (c50, c99) = (
        percentile(&cache_times, 0.5),
        percentile(&cache_times, 0.99),
    );
    let (l50, l99) = (percentile(&list_times, 0.5), percentile(&list_times, 0.99));
    println!(
        "daemon status reads, {pods} pods in {requests} requests of {per_request}, Pending by {}",
        pending_mode()
    );
    println!("| source | reads | p50 | p99 |");
    println!("|---|---:|---:|---:|");
    println!(
        "| watch cache | {reads} | {:.2} ms | {:.2} ms |",
        ms(c50),
        ms(c99)
    );
    println!(
        "| LIST per read (watch_enabled=false) | {list_reads} | {:.2} ms | {:.2} ms |",
        ms(l50),
        ms(l99)
    );
    let secs = |d: Duration| d.as_secs_f64();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let listening = median(restarts.iter().map(|r| secs(r.listening)).collect());
    let serving = median(restarts.iter().map(|r| secs(r.serving)).collect());
    let reconciled = median(restarts.iter().map(|r| secs(r.reconciled)).collect());
    let reconcile_s = median(restarts.iter().map(|r| r.reconcile_ms / 1000.0).collect());
    let bare_s = median(bare.iter().map(|d| secs(*d)).collect());
    let serving_ratio = serving / bare_s;
    let bare_protobuf_s = median(bare_protobuf.iter().map(|r| secs(r.took)).collect());
    let overlapped_s = median(overlapped.iter().map(|d| secs(*d)).collect());
    let server_cpu = median(restarts.iter().map(|r| r.server_cpu).collect());
    let serving_apiserver_cpu = median(restarts.iter().map(|r| r.apiserver_cpu).collect());
    let bare_cpu = median(bare_protobuf.iter().map(|r| r.cpu).collect());
    let bare_apiserver_cpu = median(bare_protobuf.iter().map(|r| r.apiserver_cpu).collect());
    let serving_protobuf_ratio = serving / bare_protobuf_s;
    let rows_per_read = written as f64 / reads as f64;
    println!(
        "| restart -> serving cache (median of {restart_rounds}) | {serving:.2} s | bare paginated LIST of the {pods} pods {bare_s:.2} s | ratio {serving_ratio:.2} |"
    );
    println!(
        "| restart -> serving cache, against the same pages as protobuf (the cache's own LIST, decoded as kept) | {serving:.2} s | {bare_protobuf_s:.2} s | ratio {serving_protobuf_ratio:.2} |"
    );
    println!(
        "| the same protobuf pages, each next one asked for while the current one arrives (as the cache reads them) | {serving:.2} s | {overlapped_s:.2} s | ratio {:.2} |",
        serving / overlapped_s
    );
    println!(
        "CPU to a serving cache (medians): the restarted server {server_cpu:.2} s, kube-apiserver {serving_apiserver_cpu:.2} s; the bare protobuf LIST {bare_cpu:.2} s, kube-apiserver meanwhile {bare_apiserver_cpu:.2} s"
    );
    println!(
        "p50 ratio LIST/cache {:.1}x; resident memory with {pods} cached pods: {rss:.1} MiB (after a restart: {restart_rss:.1} MiB; a server without the cache: {list_rss:.1} MiB; peaks: {peak:.1} MiB over the acquire, {restart_peak:.1} MiB over the last restart); acquire of {pods} pods took {:.1} s, cache complete after {:.1} s",
        ms(l50) / ms(c50),
        acquired.as_secs_f64(),
        cached_after.as_secs_f64()
    );
    println!(
        "start-up reconciliation after a restart: listening {listening:.2} s after spawn, done {reconciled:.2} s after spawn, its own pass {reconcile_s:.2} s; store rows written by {reads} status reads of unchanged requests: {written} ({rows_per_read:.3} a read); by the reads that reported {changed} pods of one request deleted: {changed_rows} ({}; store: {})",
        if changed_rows <= changed as i64 + 1 {
            "only the changed machines and the request"
        } else {
            "MORE than the changed machines"
        },
        if storage_url().is_some() {
            "BENCH_STORAGE_URL"
        } else {
            "SQLite"
        },
    );
    let rss_target = rss_target_mib(pods);
    println!(
        "kube-scheduler (BENCH_PENDING={}): {scheduler_reads:.2} of a core through the timed reads, {scheduler_restarts:.2} through the restarts",
        pending_mode()
    );
    let cpu = json!({
        "kube_scheduler_share_reads": scheduler_reads,
        "kube_scheduler_share_restarts": scheduler_restarts,
        "restart_server_to_serving": server_cpu,
        "restart_apiserver_to_serving": serving_apiserver_cpu,
        "bare_list_protobuf": bare_cpu,
        "bare_list_protobuf_apiserver": bare_apiserver_cpu,
    });
    println!(
        "BENCH_JSON {}",
        json!({
            "pods": pods,
            "requests": requests,
            "reads": reads,
            "cache_p50_ms": ms(c50),
            "cache_p99_ms": ms(c99),
            "list_p50_ms": ms(l50),
            "list_p99_ms": ms(l99),
            "rss_mib": rss,
            "rss_after_restart_mib": restart_rss,
            "rss_without_cache_mib": list_rss,
            "peak_rss_mib": peak,
            "peak_rss_after_restart_mib": restart_peak,
            "pending": pending_mode(),
            "status_reads_from_cache": served_from_cache,
            "acquire_seconds": acquired.as_secs_f64(),
            "cache_complete_seconds": cached_after.as_secs_f64(),
            "restart_serving_seconds": serving,
            "restart_serving_rounds_s": restarts.iter().map(|r| secs(r.serving)).collect::<Vec<_>>(),
            "restart_listening_seconds": listening,
            "bare_list_seconds": bare_s,
            "bare_list_rounds_s": bare.iter().map(|d| secs(*d)).collect::<Vec<_>>(),
            "serving_over_bare_list": serving_ratio,
            "bare_list_protobuf_seconds": bare_protobuf_s,
            "bare_list_protobuf_rounds_s": bare_protobuf.iter().map(|r| secs(r.took)).collect::<Vec<_>>(),
            "overlapped_list_protobuf_seconds": overlapped_s,
            "overlapped_list_protobuf_rounds_s": overlapped.iter().map(|d| secs(*d)).collect::<Vec<_>>(),
            "cpu_seconds": cpu,
            "serving_over_bare_list_protobuf": serving_protobuf_ratio,
            "restart_reconciled_seconds": reconciled,
            "reconcile_pass_seconds": reconcile_s,
            "rows_written_by_reads": written,
            "rows_written_per_read": rows_per_read,
            "changed_machines": changed,
            "rows_written_for_changed": changed_rows,
            "storage": if storage_url().is_some() { "BENCH_STORAGE_URL" } else { "sqlite" },
            "targets": {
                "cache_p99_ms_max": 5.0,
                "rss_mib_max": rss_target,
                "serving_over_bare_list_max": 1.5,
                "p99_met": ms(c99) <= 5.0,
                "rss_met": rss.max(restart_rss) <= rss_target,
                "serving_met": serving_ratio <= 1.5,
                "changed_rows_met": changed_rows <= changed as i64 + 1,
            }
        })
    );
}
