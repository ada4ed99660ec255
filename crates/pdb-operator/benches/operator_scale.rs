//! The real `pdb-operator` binary against 1,000 Deployments on a local control plane, next to
//! the limit: a bare loop that applies one PDB per Deployment on the same burst.
//!
//! 1. Installs the PDBPolicy CRDs. Per round (`BENCH_ROUNDS`, 1): for each concurrency of
//!    `BENCH_BARE_CONCURRENCY` (`32,128,0`; 0 = no limit; empty = no bare runs; only for a
//!    burst) a fresh namespace, the bare loop (`operator_scale/bare_loop.rs`) watching it, and
//!    the burst; then the namespace is deleted and its pods waited out. And the operator:
//!    `pdb-operator run` as a child process (leader election off, `--watch-namespace` = a fresh
//!    namespace, so other tests' workloads are neither touched nor counted), a `standard`
//!    PDBPolicy matching `bench=yes`, and the same burst: 1,000 Deployments (2 replicas, label
//!    `bench=yes`), 32 creates in flight. Latency of one Deployment = the time this process
//!    receives the watch event of its `<name>-pdb` minus the time its create call returned (one
//!    clock, this process's), whoever writes the PDB. Every burst first waits until the
//!    apiserver is quiet (`burst::settle`: the controller-manager is still creating, or
//!    deleting, the previous burst's pods for tens of seconds), and the order alternates: the
//!    last round runs the operator last, the one before it first, and so on, so neither side
//!    is always the one that meets a busier cluster.
//! 2. Resident memory: VmRSS of the last round's operator once all 1,000 PDBs exist.
//! 3. Full resync: kills the operator and starts a fresh one with the 1,000 Deployments and
//!    PDBs in place; the figure is the time from spawning the process until its
//!    `pdb_operator_deployments_managed` gauge for the namespace reaches 1,000 (every Deployment
//!    reconciled and its PDB found up to date), read from `/metrics` every 50 ms.
//!
//! Prints a table, the bare runs and the operator side by side per round with the operator's
//! p99 over the round's best bare p99 (the median over rounds is the figure), and one
//! `BENCH_JSON {...}` line for bench/run.sh.
//!
//!   cargo bench -p pdb-operator --bench operator_scale
//!
//! Environment: KUBECONFIG (default: the repo's .state/control-plane/admin.kubeconfig; the bench
//! never starts or stops a control plane), BENCH_DEPLOYMENTS (1000), BENCH_CREATE_CONCURRENCY
//! (32), BENCH_CREATE_RATE (Deployments per second; 0, the default, creates them in one burst),
//! BENCH_MAX_CONCURRENT_RECONCILES (unset: the operator's default), BENCH_ROUNDS,
//! BENCH_BARE_CONCURRENCY. `--probe` only checks that the apiserver answers (exit 0) or not
//! (exit 1).

#[path = "operator_scale/bare_loop.rs"]
mod bare_loop;
#[path = "operator_scale/burst.rs"]
mod burst;
#[path = "operator_scale/rounds.rs"]
mod rounds;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use burst::{Burst, WAIT_ALL, burst, create_namespace, delete_namespace};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use pdb_operator::crd::{ClusterPDBPolicy, PDBPolicy};
use rounds::{BARE_RATIO_TARGET, Round, bare_concurrencies, concurrency_text, rounds_json};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const P99_TARGET_MS: f64 = 1000.0;
const RESYNC_TARGET_S: f64 = 10.0;
/// Resident-memory ceiling: 64 MiB up to 1,000 Deployments (issue #10), 128 MiB past that
/// (issue #22 sets it at 5,000).
fn rss_target_mib(deployments: usize) -> f64 {
    if deployments <= 1000 { 64.0 } else { 128.0 }
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn connect() -> anyhow::Result<Client> {
    let client = kube_fixture::client_from(&kube_fixture::default_kubeconfig_path()).await?;
    client.apiserver_version().await?;
    Ok(client)
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    l.local_addr().unwrap()
}

fn rss_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// User + system CPU seconds of `pid` so far (/proc/<pid>/stat, 100 ticks a second).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    if f.len() < 13 {
        return f64::NAN;
    }
    (f[11] + f[12]) / 100.0
}

/// The operator child process; killed when dropped.
struct Operator {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_operator(namespace: &str, log: &std::path::Path) -> Operator {
    let addr = free_addr();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("opening the operator log");
    // BENCH_OPERATOR_WRAPPER (e.g. `heaptrack -o /tmp/op`) runs the operator under a profiler;
    // the memory and CPU figures are then the wrapper's, not the operator's.
    let wrapper = std::env::var("BENCH_OPERATOR_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(env!("CARGO_BIN_EXE_pdb-operator"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_pdb-operator")),
    };
    cmd.env("KUBECONFIG", kube_fixture::default_kubeconfig_path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args([
            "run",
            "--leader-elect=false",
            "--watch-namespace",
            namespace,
        ])
        .arg("--health-probe-bind-address")
        .arg(addr.to_string());
    if let Ok(n) = std::env::var("BENCH_MAX_CONCURRENT_RECONCILES") {
        cmd.args(["--max-concurrent-reconciles", &n]);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting pdb-operator");
    Operator { child, addr }
}

/// Plain HTTP/1.1 GET on a fresh connection: (status code, body).
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// Sum of every series of `family` whose labels contain `filter` (e.g. `namespace="x"`).
fn metric_sum(text: &str, family: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// The Deployment controller's reconciles so far and their mean duration in milliseconds.
fn deployment_reconciles(text: &str) -> (f64, f64) {
    let filter = "controller=\"deployment-pdb\"";
    let count = metric_sum(
        text,
        "pdb_operator_reconciliation_duration_seconds_count",
        filter,
    );
    let seconds = metric_sum(
        text,
        "pdb_operator_reconciliation_duration_seconds_sum",
        filter,
    );
    (count, 1000.0 * seconds / count.max(1.0))
}

async fn metrics_text(op: &Operator) -> String {
    http_get(op.addr, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default()
}

async fn install_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply("pdb-operator-bench").force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
    let t0 = Instant::now();
    loop {
        let c = api.get(&name).await.expect("reading the CRD back");
        let established = c
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "CRD {name} not Established after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_ready(op: &mut Operator, log: &std::path::Path) {
    let t0 = Instant::now();
    loop {
        if let Some((200, _)) = http_get(op.addr, "/readyz").await {
            return;
        }
        if let Ok(Some(status)) = op.child.try_wait() {
            panic!(
                "pdb-operator exited ({status}) before it was ready; see {}",
                log.display()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "pdb-operator not ready after 60 s; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `/metrics` until the namespace's managed-Deployment gauge reaches `count`.
async fn wait_managed(op: &Operator, namespace: &str, count: usize, log: &std::path::Path) {
    let filter = format!("namespace=\"{namespace}\"");
    let t0 = Instant::now();
    loop {
        let text = metrics_text(op).await;
        let managed = metric_sum(&text, "pdb_operator_deployments_managed", &filter);
        if managed as usize >= count {
            return;
        }
        assert!(
            t0.elapsed() < WAIT_ALL,
            "the operator manages {managed} of {count} Deployments after {} s; see {}",
            WAIT_ALL.as_secs(),
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.iter().any(|a| a == "--probe") {
        let up = rt.block_on(connect()).is_ok();
        std::process::exit(if up { 0 } else { 1 });
    }
    let client = rt.block_on(connect()).unwrap_or_else(|e| {
        panic!(
            "no control plane answers with kubeconfig {}: {e:#}; start one with tools/control-plane/cp up",
            kube_fixture::default_kubeconfig_path().display()
        )
    });
    let namespace = format!("bench-operator-{}", std::process::id());
    rt.block_on(async {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the bench namespace");
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(run(client.clone(), &namespace))
    }));
    rt.block_on(async {
        let _ = Api::<Namespace>::all(client)
            .delete(&namespace, &DeleteParams::background())
            .await;
    });
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Starts the operator on `namespace` with the bench's `standard` policy and runs one burst.
async fn operator_burst(
    client: &Client,
    namespace: &str,
    log: &std::path::Path,
    deployments: usize,
    in_flight: usize,
    rate: f64,
) -> (Operator, Burst) {
    let mut op = start_operator(namespace, log);
    wait_ready(&mut op, log).await;
    let policies: Api<PDBPolicy> = Api::namespaced(client.clone(), namespace);
    policies
        .create(&PostParams::default(), &bare_loop::bench_policy(namespace))
        .await
        .expect("creating the PDBPolicy");
    let b = burst(
        client,
        namespace,
        deployments,
        in_flight,
        rate,
        &log.display().to_string(),
    )
    .await;
    (op, b)
}

/// One operator burst of round `r`: on `namespace` itself when `keep` (the operator is handed
/// back, still running, for the memory and resync figures), else on a namespace of its own
/// that is deleted afterwards.
#[allow(clippy::too_many_arguments)]
async fn operator_round(
    client: &Client,
    namespace: &str,
    log: &std::path::Path,
    r: usize,
    keep: bool,
    deployments: usize,
    in_flight: usize,
    rate: f64,
) -> (Option<Operator>, Burst) {
    let ns = if keep {
        namespace.to_string()
    } else {
        let ns = format!("{namespace}-r{r}-operator");
        create_namespace(client, &ns).await;
        ns
    };
    let (op, operator) = operator_burst(client, &ns, log, deployments, in_flight, rate).await;
    eprintln!(
        "bench: round {r}, pdb-operator: p50 {:.0} ms, p99 {:.0} ms, last PDB after {:.1} s",
        operator.p50(),
        operator.p99(),
        operator.all_pdbs_seconds
    );
    if keep {
        return (Some(op), operator);
    }
    drop(op);
    delete_namespace(client, &ns).await;
    (None, operator)
}

async fn run(client: Client, namespace: &str) {
    let deployments = env_num("BENCH_DEPLOYMENTS", 1000);
    let in_flight = env_num("BENCH_CREATE_CONCURRENCY", 32).max(1);
    // Creates per second; 0 = a burst, as fast as `in_flight` creates at a time go.
    let rate = env_num("BENCH_CREATE_RATE", 0) as f64;
    let log = std::env::temp_dir().join(format!("{namespace}.log"));
    let _ = std::fs::remove_file(&log);

    install_crd(&client, &PDBPolicy::crd()).await;
    install_crd(&client, &ClusterPDBPolicy::crd()).await;

    // Each round: the bare loop at each concurrency, then the operator, each on a fresh
    // namespace deleted (pods and all) before the next, so every burst starts on the same
    // cluster. The last round's operator namespace stays for the memory and resync figures.
    let rounds_wanted = env_num("BENCH_ROUNDS", 1).max(1);
    let bare_runs = if rate == 0.0 {
        bare_concurrencies()
    } else {
        Vec::new()
    };
    let mut rounds: Vec<Round> = Vec::new();
    let mut last_op = None;
    for r in 0..rounds_wanted {
        let last = r + 1 == rounds_wanted;
        // Whoever runs second meets the apiserver and controller-manager still catching up with
        // the first burst, so the order alternates: counting back from the last round, which
        // runs the operator last (its namespace stays for the memory and resync figures), every
        // other round runs the operator first.
        let operator_first = (rounds_wanted - 1 - r) % 2 == 1;
        let mut first_operator = None;
        if operator_first {
            first_operator = Some(
                operator_round(
                    &client,
                    namespace,
                    &log,
                    r,
                    false,
                    deployments,
                    in_flight,
                    rate,
                )
                .await
                .1,
            );
        }
        let mut bare = Vec::new();
        for &c in &bare_runs {
            let ns = format!("{namespace}-r{r}-bare-{c}");
            create_namespace(&client, &ns).await;
            let looping = bare_loop::start(client.clone(), &ns, c);
            let b = burst(&client, &ns, deployments, in_flight, rate, "the bare loop").await;
            looping.abort();
            delete_namespace(&client, &ns).await;
            eprintln!(
                "bench: round {r}, bare loop, concurrency {}: p50 {:.0} ms, p99 {:.0} ms, last PDB after {:.1} s",
                concurrency_text(c),
                b.p50(),
                b.p99(),
                b.all_pdbs_seconds
            );
            bare.push((c, b));
        }
        let operator = match first_operator {
            Some(b) => b,
            None => {
                let (op, b) = operator_round(
                    &client,
                    namespace,
                    &log,
                    r,
                    last,
                    deployments,
                    in_flight,
                    rate,
                )
                .await;
                if last {
                    last_op = op;
                }
                b
            }
        };
        rounds.push(Round {
            bare,
            operator,
            operator_first,
        });
    }
    let op = last_op.expect("at least one round");
    let first = &rounds.last().expect("at least one round").operator;
    let (create_seconds, all_pdbs_seconds) = (first.create_seconds, first.all_pdbs_seconds);
    let (p50, p99, max) = (first.p50(), first.p99(), first.max());

    // Let the gauge catch up with the last reconcile, then read memory.
    wait_managed(&op, namespace, deployments, &log).await;
    let pid = op.child.id();
    let rss = rss_mib(pid, "VmRSS:");
    let hwm = rss_mib(pid, "VmHWM:");
    let first_metrics = metrics_text(&op).await;
    let (reconciles, reconcile_ms) = deployment_reconciles(&first_metrics);
    let errors = metric_sum(
        &first_metrics,
        "pdb_operator_reconciliation_errors_total",
        "",
    );
    let cpu = cpu_seconds(pid);
    drop(op);

    // Full resync: a fresh process with everything in place.
    let t_restart = Instant::now();
    let mut op = start_operator(namespace, &log);
    wait_ready(&mut op, &log).await;
    let ready_seconds = t_restart.elapsed().as_secs_f64();
    wait_managed(&op, namespace, deployments, &log).await;
    let resync_seconds = t_restart.elapsed().as_secs_f64();
    let resync_rss = rss_mib(op.child.id(), "VmRSS:");
    let resync_cpu = cpu_seconds(op.child.id());
    let text = metrics_text(&op).await;
    let filter = format!("namespace=\"{namespace}\"");
    let resync_writes = metric_sum(&text, "pdb_operator_pdbs_created_total", &filter)
        + metric_sum(&text, "pdb_operator_pdbs_updated_total", &filter);
    let (resync_reconciles, resync_reconcile_ms) = deployment_reconciles(&text);
    drop(op);

    let rss_max = rss.max(resync_rss);
    let rss_target = rss_target_mib(deployments);
    let met = |ok: bool| if ok { "yes" } else { "NO" };
    let reconcilers = std::env::var("BENCH_MAX_CONCURRENT_RECONCILES")
        .map_or("the default".to_string(), |n| n.to_string());
    let arrival = if rate > 0.0 {
        format!("created at {rate:.0} a second")
    } else {
        format!("created in one burst, {in_flight} creates in flight")
    };
    println!(
        "pdb-operator at {deployments} Deployments (2 replicas each), {arrival}, \
         namespace-scoped operator (--watch-namespace), --max-concurrent-reconciles {reconcilers}"
    );
    println!("| figure | value | target | met |");
    println!("|---|---:|---:|---|");
    println!("| Deployment created -> PDB seen, p50 | {p50:.0} ms | | |");
    println!(
        "| Deployment created -> PDB seen, p99 | {p99:.0} ms | <= {P99_TARGET_MS:.0} ms | {} |",
        met(p99 <= P99_TARGET_MS)
    );
    println!("| Deployment created -> PDB seen, max | {max:.0} ms | | |");
    println!(
        "| full resync (spawn -> {deployments} managed) | {resync_seconds:.2} s | <= {RESYNC_TARGET_S:.0} s | {} |",
        met(resync_seconds <= RESYNC_TARGET_S)
    );
    println!(
        "| resident memory (VmRSS) after {deployments} reconciled | {rss:.1} MiB | <= {rss_target:.0} MiB | {} |",
        met(rss_max <= rss_target)
    );
    println!("| resident memory after the resync | {resync_rss:.1} MiB | | |");
    println!(
        "creates took {create_seconds:.1} s, last PDB after {all_pdbs_seconds:.1} s; \
         {reconciles} reconciles of {reconcile_ms:.1} ms on average and {errors} errors for the first pass, operator CPU {cpu:.1} s; \
         peak RSS {hwm:.1} MiB; resync: ready after {ready_seconds:.2} s, {resync_reconciles} reconciles \
         of {resync_reconcile_ms:.1} ms on average, {resync_writes} PDB writes, operator CPU {resync_cpu:.1} s; \
         load average {}; operator log {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        log.display()
    );
    // Side by side per round, and the ratio of the operator's p99 to the round's best bare p99.
    let ratio = rounds::print_side_by_side(&rounds, &bare_runs, deployments, in_flight);
    let rounds_json = rounds_json(&rounds);
    let last_round = rounds.last().expect("at least one round");
    let best = last_round.best_bare();
    println!(
        "BENCH_JSON {}",
        json!({
            "rounds": rounds_json,
            "bare_loop": rounds_json.last().map(|r| r["bare_loop"].clone()),
            "bare_best_concurrency": best.map(|(c, _)| *c),
            "bare_best_p99_ms": best.map(|(_, b)| b.p99()),
            "p99_over_bare": ratio,
            "deployments": deployments,
            "create_concurrency": in_flight,
            "create_rate": rate,
            "create_seconds": create_seconds,
            "all_pdbs_seconds": all_pdbs_seconds,
            "reconcile_avg_ms": reconcile_ms,
            "latency_p50_ms": p50,
            "latency_p99_ms": p99,
            "latency_max_ms": max,
            "resync_seconds": resync_seconds,
            "resync_ready_seconds": ready_seconds,
            "resync_reconciles": resync_reconciles,
            "resync_reconcile_avg_ms": resync_reconcile_ms,
            "operator_cpu_seconds": cpu,
            "resync_cpu_seconds": resync_cpu,
            "resync_pdb_writes": resync_writes,
            "rss_mib": rss,
            "rss_peak_mib": hwm,
            "rss_after_resync_mib": resync_rss,
            "reconciles": reconciles,
            "reconcile_errors": errors,
            "targets": {
                "p99_ms_max": P99_TARGET_MS,
                "resync_seconds_max": RESYNC_TARGET_S,
                "rss_mib_max": rss_target,
                "p99_met": p99 <= P99_TARGET_MS,
                "resync_met": resync_seconds <= RESYNC_TARGET_S,
                "rss_met": rss_max <= rss_target,
                "bare_ratio_max": BARE_RATIO_TARGET,
                "bare_ratio_met": ratio.map(|r| r <= BARE_RATIO_TARGET),
            }
        })
    );
}
