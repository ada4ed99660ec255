//! The disruption soak (issue #51): `orb serve` with default settings on SQLite, running as the
//! shipped Role behind a fault proxy, driven by HostFactory-style clients on all four kinds
//! while a seeded loop makes the cluster misbehave (readiness flaps, restarts, crash loops,
//! outside deletes, evictions, a drain of one of its two nodes, a 10 s apiserver blackout, one
//! SIGKILL and restart of orb).
//! [`invariants`] samples every second what must hold whatever happens. `ORB_SOAK_SECONDS`
//! (default 90) and `ORB_SOAK_SEED` (a number, or `random`) choose the run; bench/soak.sh runs
//! it long. A violation fails the test with the seed and the event log to replay it.

mod clients;
mod invariants;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use kube_fixture::fault_proxy::{FaultPlan, FaultProxy};
use kube_fixture::misbehave::{Exit, Kubelet};
pub(crate) use kube_fixture::soak::{Rng, env_number};

use kube_fixture::{TEST_NODE_KEY, TestCluster, TestNamespace};
use serde_json::{Value, json};

use crate::support::serve_process::Server;

/// Each template's `maxNumber`: small, so that the clients together ask for more than it.
const MAX_NUMBER: usize = 6;
const KINDS: [&str; 4] = ["Pod", "Deployment", "StatefulSet", "Job"];
/// The label of the soak's own two nodes, which every template selects.
const POOL_LABEL: &str = "orb-rs.io/soak-pool";
/// HostFactory-style clients per template.
const CLIENTS_PER_KIND: usize = 2;
/// After a blackout or a restart, how long orb has to catch up before the invariants on
/// which objects exist apply again (the resume window).
const RESUME: Duration = Duration::from_secs(15);

/// A return the clients started: what it named, and when it finished (if it has).
#[derive(Clone, Debug)]
pub(crate) struct ReturnRecord {
    pub names: BTreeSet<String>,
    pub started: Instant,
    pub finished: Option<(Instant, String)>,
}

/// What the clients, the disruption loop and the sampler share.
pub(crate) struct Soak {
    pub seed: u64,
    pub start: Instant,
    pub ns: String,
    pub admin: Client,
    /// `orb serve`'s address; `None` while it is down.
    addr: RwLock<Option<String>>,
    pub pid: AtomicU32,
    pub stop: AtomicBool,
    /// Until when orb cannot see the cluster (blackout, restart); [`RESUME`] later, until
    /// when the existence invariants wait for it to catch up.
    blind_until: Mutex<Instant>,
    log: Mutex<Vec<String>>,
    pub applied: Mutex<BTreeMap<&'static str, u32>>,
    pub violations: Mutex<Vec<String>>,
    pub checks: AtomicU64,
    /// Pods the loop deleted, evicted or crash-looped: orb may lose them without a return.
    pub disrupted: Mutex<BTreeSet<String>>,
    /// When the loop last flapped each pod's readiness.
    pub flapped: Mutex<BTreeMap<String, Instant>>,
    pub acquires: Mutex<BTreeSet<String>>,
    /// Every host a client's own polls of its acquire named: what HostFactory knows of.
    pub known: Mutex<BTreeSet<String>>,
    pub returns: Mutex<BTreeMap<String, ReturnRecord>>,
    /// getRequestStatus round trips in milliseconds, and whether orb was blind.
    pub status_ms: Mutex<Vec<(f64, bool)>>,
    /// (seconds into the run, orb serve's RSS in KiB, seconds since it started).
    pub rss: Mutex<Vec<(u64, u64, u64)>>,
    pub served_since: Mutex<Instant>,
}

impl Soak {
    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn event(&self, kind: &'static str, what: String) {
        let line = format!("{:7.1}s {kind}: {what}", self.secs());
        *self.applied.lock().unwrap().entry(kind).or_default() += 1;
        self.log.lock().unwrap().push(line);
    }

    pub fn note(&self, what: String) {
        let line = format!("{:7.1}s   {what}", self.secs());
        self.log.lock().unwrap().push(line);
    }

    /// Records a violation once per `key` (the invariant and its subject).
    pub fn violate(&self, key: &str, what: String) {
        let mut v = self.violations.lock().unwrap();
        if !v.iter().any(|line| line.contains(&format!("[{key}]"))) {
            let line = format!("{:7.1}s [{key}] {what}", self.secs());
            eprintln!("soak: VIOLATION {line}");
            self.log.lock().unwrap().push(format!("VIOLATION {line}"));
            v.push(line);
        }
    }

    /// Whether orb cannot see the cluster now (blackout, restart).
    pub fn blind(&self) -> bool {
        Instant::now() < *self.blind_until.lock().unwrap()
    }

    /// Whether orb is blind or still in the resume window after.
    pub fn resuming(&self) -> bool {
        Instant::now() < *self.blind_until.lock().unwrap() + RESUME
    }

    fn blind_for(&self, d: Duration) {
        *self.blind_until.lock().unwrap() = Instant::now() + d;
    }

    pub fn addr(&self) -> Option<String> {
        self.addr.read().unwrap().clone()
    }

    /// One REST call to `orb serve`; `None` while it is down or when the call fails.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Option<Value> {
        let addr = self.addr()?;
        let (method, path) = (method.to_string(), path.to_string());
        let reply = tokio::task::spawn_blocking(move || try_http(&addr, &method, &path, body));
        match reply.await.ok()? {
            Some((200..=202, value)) => Some(value),
            _ => None,
        }
    }

    /// One HostFactory operation through the daemon, as the installed scripts forward it:
    /// the JSON the script would print.
    pub async fn hf(&self, op: &str, input: Value) -> Option<Value> {
        let (started, was_blind) = (Instant::now(), self.blind());
        let reply = self
            .call("POST", &format!("/api/v1/hostfactory/{op}"), Some(input))
            .await?;
        if op == "getRequestStatus" {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            self.status_ms
                .lock()
                .unwrap()
                .push((ms, was_blind || self.blind()));
        }
        serde_json::from_str(reply["stdout"].as_str()?).ok()
    }
}

/// One HTTP/1.1 call that fails instead of panicking: the server dies on purpose here.
fn try_http(addr: &str, method: &str, path: &str, body: Option<Value>) -> Option<(u16, Value)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let (head, text) = reply.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, serde_json::from_str(text).unwrap_or(Value::Null)))
}

fn template_id(kind: &str) -> String {
    format!("soak-{}", kind.to_ascii_lowercase())
}

/// The installation: the defaults, but for where the cluster is and the four templates.
/// The templates place their pods on the soak's own two nodes, so that one can be drained.
fn install(ns: &TestNamespace, kubeconfig: &std::path::Path) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let provider = json!({"name": "kubernetes", "type": "k8s", "enabled": true, "default": true,
        "config": {"namespace": ns.name(), "in_cluster": false, "kubeconfig_path": kubeconfig}});
    let config_json = json!({ "providers": [provider] });
    std::fs::write(config.join("config.json"), config_json.to_string()).unwrap();
    let templates: Vec<Value> = KINDS
        .iter()
        .map(|kind| {
            // Job pods run until returned, as a host's do.
            let annotations = if *kind == "Job" {
                json!({"pod-complete.stage.kwok.x-k8s.io/delay": "30m"})
            } else {
                json!({})
            };
            json!({"templateId": template_id(kind), "providerApi": kind, "maxNumber": MAX_NUMBER,
                   "imageId": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"],
                   "annotations": annotations, "nodeSelector": {POOL_LABEL: ns.name()},
                   "tolerations": [{"key": TEST_NODE_KEY, "operator": "Exists"}]})
        })
        .collect();
    let templates = json!({ "templates": templates }).to_string();
    std::fs::write(config.join("templates.json"), templates).unwrap();
    root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn disruption_soak() {
    let seconds = env_number("ORB_SOAK_SECONDS", 90);
    let seed = env_number("ORB_SOAK_SEED", 51);
    eprintln!(
        "soak: seed {seed}, {seconds} s (replay: ORB_SOAK_SEED={seed} ORB_SOAK_SECONDS={seconds})"
    );
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("soak").await;
    let identity = cluster.broker_identity(&ns).await;
    let proxy = FaultProxy::start(&identity.as_cluster()).await;
    let pool = [
        cluster.node_with_room("soak", 40).await,
        cluster.node_with_room("soak", 40).await,
    ];
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    for node in &pool {
        let label = json!({"metadata": {"labels": {POOL_LABEL: ns.name()}}});
        let patch = Patch::Merge(&label);
        nodes
            .patch(&node.name, &PatchParams::default(), &patch)
            .await
            .unwrap();
    }
    let root = install(&ns, proxy.kubeconfig_path());
    let server = Server::start(root.path(), None);
    let soak = Arc::new(Soak {
        seed,
        start: Instant::now(),
        ns: ns.name().to_string(),
        admin: cluster.client.clone(),
        addr: RwLock::new(Some(server.addr.clone())),
        pid: AtomicU32::new(server.child.id()),
        stop: AtomicBool::new(false),
        blind_until: Mutex::new(Instant::now()),
        log: Mutex::default(),
        applied: Mutex::default(),
        flapped: Mutex::default(),
        violations: Mutex::default(),
        checks: AtomicU64::new(0),
        disrupted: Mutex::default(),
        acquires: Mutex::default(),
        known: Mutex::default(),
        returns: Mutex::default(),
        status_ms: Mutex::default(),
        rss: Mutex::default(),
        served_since: Mutex::new(Instant::now()),
    });
    let mut rng = Rng(seed);
    let mut tasks = Vec::new();
    for kind in KINDS {
        for _ in 0..CLIENTS_PER_KIND {
            tasks.push(tokio::spawn(clients::client(
                soak.clone(),
                kind,
                rng.child(),
            )));
        }
    }
    tasks.push(tokio::spawn(clients::reclaimer(soak.clone())));
    let sampler = tokio::spawn(invariants::sample_every_second(soak.clone()));
    let drained = &pool[rng.range(0, 1) as usize].name;
    let server = disrupt(
        &soak,
        &proxy,
        server,
        root.path(),
        drained,
        rng.child(),
        seconds,
    )
    .await;
    soak.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = task.await;
    }
    soak.note("clients stopped; returning everything".into());
    let drained = invariants::return_everything(&soak).await;
    sampler.abort();
    invariants::final_checks(&soak, drained);
    report(&soak, seconds);
    drop(server);
    let violations = soak.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "soak seed {seed}: {} violation(s):\n{}\n\nevent log (replay: ORB_SOAK_SEED={seed} ORB_SOAK_SECONDS={seconds}):\n{}",
        violations.len(),
        violations.join("\n"),
        soak.log.lock().unwrap().join("\n")
    );
}

/// The misbehaviour loop: a seeded event every 1 to 3 s, the blackout and the restart at
/// seeded times; returns the `orb serve` running at the end.
async fn disrupt(
    soak: &Arc<Soak>,
    proxy: &FaultProxy,
    mut server: Server,
    root: &std::path::Path,
    drained: &str,
    mut rng: Rng,
    seconds: u64,
) -> Server {
    let kill_at = seconds * rng.range(10, 20) / 100;
    let blackout_at = seconds * rng.range(40, 60) / 100;
    let drain_at = seconds * rng.range(65, 85) / 100;
    let (mut killed, mut blacked_out, mut drain) = (false, false, None);
    while soak.start.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(rng.range(1000, 3000))).await;
        let now = soak.start.elapsed().as_secs();
        if !killed && now >= kill_at {
            killed = true;
            soak.event("sigkill", "orb serve killed, started again".into());
            *soak.addr.write().unwrap() = None;
            soak.blind_for(Duration::from_secs(600));
            server.kill9();
            server = Server::start(root, None);
            soak.pid.store(server.child.id(), Ordering::SeqCst);
            *soak.served_since.lock().unwrap() = Instant::now();
            *soak.addr.write().unwrap() = Some(server.addr.clone());
            soak.blind_for(Duration::ZERO);
            continue;
        }
        if drain.is_none() && now >= drain_at {
            drain = Some(tokio::spawn(drain_node(soak.clone(), drained.to_string())));
            soak.event("drain", drained.to_string());
            continue;
        }
        if !blacked_out && now >= blackout_at {
            blacked_out = true;
            soak.event("blackout", "apiserver unreachable for 10 s".into());
            soak.blind_for(Duration::from_secs(10));
            proxy.set_plan(FaultPlan {
                reset_rate: 1.0,
                ..FaultPlan::default()
            });
            proxy.cut_connections();
            tokio::time::sleep(Duration::from_secs(10)).await;
            proxy.set_plan(FaultPlan::default());
            soak.note("blackout over".into());
            continue;
        }
        misbehave_once(soak, &mut rng).await;
    }
    if let Some(drain) = drain {
        let _ = drain.await;
    }
    server
}

/// `kubectl drain` of one pool node (cordon, evictions honouring PDBs), and `kubectl
/// uncordon` 15 s later. Every pod on it counts as disrupted before the first eviction.
async fn drain_node(soak: Arc<Soak>, node: String) -> Result<Vec<String>, String> {
    let nodes: Api<Node> = Api::all(soak.admin.clone());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    let params = PatchParams::default();
    let patched = nodes
        .patch(&node, &params, &Patch::Merge(&cordon(true)))
        .await;
    patched.map_err(|e| format!("cordoning {node}: {e}"))?;
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = Api::<Pod>::namespaced(soak.admin.clone(), &soak.ns);
    let listed = pods.list(&on_node).await.map_err(|e| e.to_string())?;
    for pod in &listed.items {
        mark_disrupted(&soak, pod, true);
    }
    let evicted = kube_fixture::drain::drain(&soak.admin, &node, Duration::from_secs(30)).await;
    soak.note(format!("drain of {node}: {evicted:?}"));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let _ = nodes
        .patch(&node, &params, &Patch::Merge(&cordon(false)))
        .await;
    soak.note(format!("{node} uncordoned"));
    evicted
}

/// Records that the loop is taking `pod` away (or crash-looping it): orb may lose it without
/// a return. Losing one pod fails a Job (orb sets backoffLimit 0, docs/handlers.md), and the
/// Job controller then stops the others: with `removed`, the request's pods go with it.
fn mark_disrupted(soak: &Soak, pod: &Pod, removed: bool) {
    let mut disrupted = soak.disrupted.lock().unwrap();
    disrupted.insert(pod.metadata.name.clone().unwrap_or_default());
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if removed && labels.get("orb.io/provider-api").map(String::as_str) == Some("Job") {
        let request = labels.get("orb.io/request-id").cloned().unwrap_or_default();
        disrupted.insert(format!("request {request}"));
    }
}

/// One seeded misbehaviour on one Running orb pod.
async fn misbehave_once(soak: &Soak, rng: &mut Rng) {
    let pods = Api::<Pod>::namespaced(soak.admin.clone(), &soak.ns);
    let Ok(list) = pods
        .list(&ListParams::default().labels("orb.io/managed=true"))
        .await
    else {
        return;
    };
    let running: Vec<Pod> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect();
    if running.is_empty() {
        return;
    }
    let pod = &running[rng.range(0, running.len() as u64 - 1) as usize];
    let name = pod.metadata.name.clone().unwrap_or_default();
    let kubelet = Kubelet::of(&soak.admin, &soak.ns, &name);
    let choice = rng.range(0, 5);
    let kind = ["flap", "restart", "crash-loop", "delete", "evict", "oom"][choice as usize];
    soak.event(kind, name.clone());
    if kind == "flap" {
        let mut flapped = soak.flapped.lock().unwrap();
        flapped.insert(name.clone(), Instant::now());
    }
    if matches!(kind, "delete" | "evict" | "crash-loop") {
        mark_disrupted(soak, pod, kind != "crash-loop");
    }
    let hold = Duration::from_millis(rng.range(1000, 6000));
    // Each step in a task of its own: a pod removed meanwhile makes the kubelet helper panic,
    // which only ends that step.
    let step = tokio::spawn(async move {
        match kind {
            "flap" => kubelet.flap_readiness(hold / 2, 2).await,
            "restart" => drop(kubelet.restart(Exit::Error(1)).await),
            "oom" => drop(kubelet.restart(Exit::OomKilled).await),
            "crash-loop" => {
                kubelet.crash_loop().await;
                tokio::time::sleep(hold).await;
                kubelet.recover().await;
            }
            "delete" => drop(pods.delete(&name, &DeleteParams::default()).await),
            _ => drop(pods.evict(&name, &Default::default()).await),
        }
    });
    // Flaps and crash loops go on while the next events come.
    if !matches!(kind, "flap" | "crash-loop") {
        let _ = step.await;
    }
}

/// The summary bench/soak.sh prints: events per kind, checks, violations, RSS, status p99.
fn report(soak: &Soak, seconds: u64) {
    let applied = soak.applied.lock().unwrap();
    let events: Vec<String> = applied.iter().map(|(k, n)| format!("{k}={n}")).collect();
    eprintln!("soak: seed {} ran {seconds} s", soak.seed);
    eprintln!("soak: events applied: {}", events.join(" "));
    eprintln!(
        "soak: invariant checks: {}",
        soak.checks.load(Ordering::SeqCst)
    );
    eprintln!(
        "soak: violations: {}",
        soak.violations.lock().unwrap().len()
    );
    let rss = soak.rss.lock().unwrap();
    // The first sample of every 10 s.
    let mut curve: Vec<String> = Vec::new();
    let mut bucket = None;
    for (t, kib, _) in rss.iter() {
        if bucket != Some(t / 10) {
            bucket = Some(t / 10);
            curve.push(format!("{t}s:{:.1}MiB", *kib as f64 / 1024.0));
        }
    }
    eprintln!("soak: orb serve RSS: {}", curve.join(" "));
    let all = soak.status_ms.lock().unwrap().clone();
    for (label, calm_only) in [("all", false), ("outside blackout/restart", true)] {
        let mut ms: Vec<f64> = all
            .iter()
            .filter(|(_, q)| !(calm_only && *q))
            .map(|(ms, _)| *ms)
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| {
            ms.get(((ms.len() as f64 * q) as usize).min(ms.len().saturating_sub(1)))
                .copied()
        };
        eprintln!(
            "soak: getRequestStatus under churn ({label}): {} calls, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            ms.len(),
            at(0.5).unwrap_or(0.0),
            at(0.99).unwrap_or(0.0),
            ms.last().copied().unwrap_or(0.0)
        );
    }
}
