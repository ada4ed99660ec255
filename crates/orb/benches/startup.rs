//! Start-up cost of fresh `orb` processes, the way HostFactory pays it: one process per call.
//! Prints median and 90th percentile for `orb --version` and for HostFactory status polls.
//!
//! - A finished return of 50 and of 500 machines (seeded in the store; a finished return is
//!   answered from the store alone): direct (`ORB_DAEMON=off`) alternating call by call with
//!   `--version`, before any daemon runs, with the ratio; then direct against a running
//!   `orb serve` (spawned here on the same config and work dir; the process forwards over
//!   `<work dir>/orb.sock`), alternating, the replies checked equal. No cluster needed.
//! - With a control plane (`KUBECONFIG`, else the dev one): a completed acquire of 50 pods
//!   that run. Every status call of it follows the live pods on the cluster, so direct it
//!   costs a connection and a LIST per call, and through `orb serve` the watch cache answers.
//!   Each is timed alternating with `--version`. Beside the direct figure, the floor under it:
//!   the same LIST sent bare from this process, as protobuf (what orb asks for) and as JSON.
//!   Skipped, with a line saying so, without a control plane.
//!
//! A benchmark that reports figures, not a pass/fail test. Run: `cargo bench -p orb --bench
//! startup` (release build). `BENCH_STARTUP_RUNS` (default 60) sets the runs per figure,
//! `BENCH_STARTUP_SIZES` (default `50,500`) the machines of the seeded returns.
//! `BENCH_STARTUP_ROOT=DIR` seeds config and store there and leaves them, to profile one call
//! by hand (`ORB_ROOT_DIR=DIR orb ...`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_store::Store;
use serde_json::json;

fn runs() -> usize {
    std::env::var("BENCH_STARTUP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| *n >= 2)
        .unwrap_or(60)
}

/// The root the bench seeds (a temporary dir, or `BENCH_STARTUP_ROOT`).
struct Root(PathBuf);

impl Root {
    fn path(&self) -> &Path {
        &self.0
    }
}

/// One fresh `orb` process with `args` and extra environment `env`.
fn run_orb(label: &str, root: &Path, args: &[&str], env: &[(&str, &str)]) -> (Duration, Output) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orb"));
    command
        .args(args)
        .env("ORB_ROOT_DIR", root)
        .env_remove("ORB_CONFIG_DIR")
        .env_remove("ORB_WORK_DIR")
        .env_remove("ORB_DAEMON");
    for (k, v) in env {
        command.env(k, v);
    }
    let started = Instant::now();
    let out = command.output().expect("run orb");
    let elapsed = started.elapsed();
    assert!(
        out.status.success(),
        "{label}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (elapsed, out)
}

/// Machine counts from the comma list in `var`, else `default`: `BENCH_STARTUP_SIZES` (the
/// seeded returns) and `BENCH_STARTUP_LIVE` (the acquires of running pods).
fn counts(var: &str, default: &str) -> Vec<u32> {
    let raw = std::env::var(var).unwrap_or_else(|_| default.into());
    raw.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("{var}={raw}: give machine counts like 50,500"))
        })
        .collect()
}

fn report(label: &str, mut times: Vec<Duration>) -> Duration {
    times.sort();
    let n = times.len();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<55} median {:>6.2} ms   p90 {:>6.2} ms   min {:>6.2} ms   ({n} runs)",
        ms(times[n / 2]),
        ms(times[n * 9 / 10]),
        ms(times[0])
    );
    times[n / 2]
}

fn measure(label: &str, root: &Path, args: &[&str]) -> Duration {
    let times = (0..runs())
        .map(|_| run_orb(label, root, args, &[("ORB_DAEMON", "off")]).0)
        .collect();
    report(label, times)
}

/// A running `orb serve` on `root`'s config and work dir; killed on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Starts `orb serve` (TCP on a free loopback port, plus its default socket
/// `<root>/work/orb.sock`) and waits until it says where the scripts reach it.
fn start_daemon(root: &Path) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orb"))
        .env("ORB_ROOT_DIR", root)
        .env_remove("ORB_CONFIG_DIR")
        .env_remove("ORB_WORK_DIR")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting orb serve");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let socket = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("orb serve exited before opening its socket");
        }
        if let Some(rest) = line.split("reach it at unix:").nth(1) {
            break PathBuf::from(rest.split_whitespace().next().unwrap());
        }
    };
    // Keep draining stderr so the daemon never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    Daemon { child, socket }
}

/// The arguments of a HostFactory status poll for the request ids in `input`.
fn status_args(input: &Path) -> [&str; 6] {
    [
        "--scheduler",
        "hostfactory",
        "requests",
        "status",
        "-f",
        input.to_str().unwrap(),
    ]
}

/// `orb --version` and the HostFactory status of the requests in `input` (`env` says
/// direct or through which daemon), alternating call by call (which goes first flips every
/// round), so both meet the same machine load. Prints both and the status over `--version`.
/// `what` names the request, `how` the way the call goes ("no daemon up", "via orb serve").
fn measure_against_version(what: &str, how: &str, root: &Path, input: &Path, env: &[(&str, &str)]) {
    let args = status_args(input);
    let label = &format!("orb requests status -f (HostFactory, {what}, {how})");
    let version_label =
        &format!("  orb --version (alternating with the status of the {what}, {how})");
    let (mut version, mut status) = (Vec::new(), Vec::new());
    for i in 0..runs() {
        for version_now in [i % 2 == 0, i % 2 == 1] {
            if version_now {
                version.push(run_orb(version_label, root, &["--version"], env).0);
            } else {
                status.push(run_orb(label, root, &args, env).0);
            }
        }
    }
    let status = report(label, status);
    let version = report(version_label, version);
    println!(
        "ratio status / --version ({what}, {how}): {:.2}",
        status.as_secs_f64() / version.as_secs_f64()
    );
}

/// HostFactory `requests status -f` of one stored request, direct and through `daemon`,
/// alternating call by call. Checks the daemon answered (no fallback note) with the same
/// stdout as the direct run.
fn measure_status(count: u32, root: &Path, input: &Path, daemon: &Daemon) {
    let args = status_args(input);
    let via = format!("unix:{}", daemon.socket.display());
    let direct_env = [("ORB_DAEMON", "off")];
    let daemon_env = [("ORB_DAEMON", via.as_str())];
    let direct_label =
        format!("orb requests status -f (HostFactory, finished {count}-machine return)");
    let daemon_label = format!(
        "orb requests status -f (HostFactory, finished {count}-machine return, via orb serve)"
    );
    let (_, expected) = run_orb(&direct_label, root, &args, &direct_env);
    let (_, answered) = run_orb(&daemon_label, root, &args, &daemon_env);
    let stderr = String::from_utf8_lossy(&answered.stderr);
    assert!(
        !stderr.contains("did not answer"),
        "{daemon_label}: the daemon did not answer: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&answered.stdout),
        String::from_utf8_lossy(&expected.stdout),
        "{daemon_label}: the daemon's reply differs from the direct one"
    );
    let (mut direct, mut via_daemon) = (Vec::new(), Vec::new());
    for i in 0..runs() {
        let one = |env: &[(&str, &str)], label: &str| run_orb(label, root, &args, env).0;
        if i % 2 == 0 {
            direct.push(one(&direct_env, &direct_label));
            via_daemon.push(one(&daemon_env, &daemon_label));
        } else {
            via_daemon.push(one(&daemon_env, &daemon_label));
            direct.push(one(&direct_env, &direct_label));
        }
    }
    let direct_median = report(&direct_label, direct);
    let daemon_median = report(&daemon_label, via_daemon);
    println!(
        "ratio via orb serve / direct ({count} machines): {:.2}",
        daemon_median.as_secs_f64() / direct_median.as_secs_f64()
    );
}

fn write_config(root: &Path) {
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({"providers": [{"name": "kube", "type": "k8s", "config": {}}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("templates.json"),
        json!({"templates": [{"templateId": "worker", "imageId": "busybox:1.36", "maxNumber": -1}]}).to_string(),
    )
    .unwrap();
}

/// Stores a complete acquire of `count` machines and the complete return that gave them all
/// back; returns the return's id. A finished return is answered from the store alone (a
/// finished acquire whose machines still run is not: each status call follows them on the
/// cluster, see [`live_request`]).
async fn seed(root: &Path, count: u32) -> String {
    let store = Store::open_sqlite_file(&root.join("work/orb.db"))
        .await
        .unwrap();
    let now = Timestamp::now();
    let mut request = Request::new(
        RequestId::new_acquire(),
        RequestType::Acquire,
        Some("worker".into()),
        "kube",
        "k8s",
        count,
        now,
    );
    request.status = RequestStatus::Complete;
    request.fulfilled_count = count;
    let mut giving_back = Request::new(
        RequestId::new_return(),
        RequestType::Return,
        None,
        "kube",
        "k8s",
        count,
        now,
    );
    // As a return leaves it: every pod gone, so every machine terminated.
    giving_back.status = RequestStatus::Complete;
    giving_back.status_message = Some(format!("{count} of {count} machines released"));
    giving_back.fulfilled_count = count;
    let hex = request.request_id.hex_digits();
    let mut machines: Vec<Machine> = (0..count)
        .map(|i| Machine {
            machine_id: format!("orb-{}-{i:04}", &hex[..20]),
            name: format!("orb-{}-{i:04}", &hex[..20]),
            request_id: request.request_id.clone(),
            return_request_id: Some(giving_back.request_id.clone()),
            template_id: "worker".into(),
            provider_name: "kube".into(),
            provider_api: Some(orb_core::ProviderApi::Pod),
            resource_id: None,
            uid: None,
            status: MachineStatus::Terminated,
            status_reason: None,
            private_ip: Some(format!("10.0.{}.{}", i / 250, i % 250 + 1)),
            public_ip: None,
            launch_time: Some(now),
            instance_type: Some("k8s/Pod".into()),
            price_type: Some("ondemand".into()),
            tags: BTreeMap::from([("orb.io/managed".into(), "true".into())]).into(),
            provider_data: json!({}).into(),
            created_at: now,
            updated_at: now,
            version: 0,
        })
        .collect();
    giving_back.machine_ids = machines.iter().map(|m| m.machine_id.clone()).collect();
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    store
        .insert_request(&mut giving_back, &mut [])
        .await
        .unwrap();
    giving_back.request_id.to_string()
}

/// Completed acquires of running pods (`BENCH_STARTUP_LIVE`, default 50), their status
/// direct and through `orb serve`, each alternating with `--version`. A finished acquire whose
/// machines still run is followed on the cluster by every status call (a pod that fails or is
/// deleted after the request completed must not read `running`): direct, that is a new
/// connection and a LIST of the request's pods per call; through the daemon, its watch cache
/// answers. The pods go to a KWOK node of the bench's own (kube-fixture's test node, deleted
/// with the namespace when the guards drop). Skipped when no control plane answers.
fn live_request(runtime: &tokio::runtime::Runtime) {
    let kubeconfig = kube_fixture::default_kubeconfig_path();
    let Some(client) = runtime.block_on(async {
        let client = kube_fixture::client_from(&kubeconfig).await.ok()?;
        tokio::time::timeout(Duration::from_secs(3), client.apiserver_version())
            .await
            .ok()?
            .ok()?;
        Some(client)
    }) else {
        println!(
            "completed acquires of running pods: skipped, no control plane answers at {} (tools/control-plane/cp up)",
            kubeconfig.display()
        );
        return;
    };
    let cluster = kube_fixture::TestCluster { client, kubeconfig };
    let sizes = counts("BENCH_STARTUP_LIVE", "50");
    // Every size's pods keep running to the end (nothing is returned), so the node needs room
    // for all of them at once.
    let all: u32 = sizes.iter().sum();
    let namespace = runtime.block_on(cluster.namespace("bench-startup"));
    let node = runtime.block_on(cluster.node_with_room("bench-startup", all + all / 10));
    for count in sizes {
        measure_live(runtime, &cluster, &namespace, &node, count);
    }
}

/// A completed acquire of `count` running pods in `namespace` on `node`, its status direct
/// and through a fresh `orb serve`, each alternating with `--version`.
fn measure_live(
    runtime: &tokio::runtime::Runtime,
    cluster: &kube_fixture::TestCluster,
    namespace: &kube_fixture::TestNamespace,
    node: &kube_fixture::TestNode,
    count: u32,
) {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path();
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({"request": {"max_machines_per_request": count.max(1000)},
            "providers": [{"name": "kube", "type": "k8s", "config": {
            "namespace": namespace.name(),
            "kubeconfig_path": cluster.kubeconfig,
            "in_cluster": false,
        }}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        config.join("templates.json"),
        json!({"templates": [{"templateId": "worker", "imageId": "busybox:1.36", "maxNumber": -1,
            "nodeSelector": node.node_selector(), "tolerations": node.tolerations()}]})
        .to_string(),
    )
    .unwrap();
    let direct_env = [("ORB_DAEMON", "off")];
    let wanted = count.to_string();
    let (_, acquired) = run_orb(
        "machines request worker --wait",
        root,
        &["machines", "request", "worker", &wanted, "--wait"],
        &direct_env,
    );
    let reply: serde_json::Value = serde_json::from_slice(&acquired.stdout).unwrap();
    assert_eq!(
        reply["request"]["status"], "complete",
        "the acquire did not complete: {reply}"
    );
    let request_id = reply["request"]["request_id"].as_str().unwrap().to_string();
    let input = root.join("status-live.json");
    std::fs::write(
        &input,
        json!({"requests": [{"requestId": request_id}]}).to_string(),
    )
    .unwrap();
    measure_against_version(
        &format!("completed acquire of {count} running pods"),
        "no daemon up",
        root,
        &input,
        &direct_env,
    );
    measure_bare_list(runtime, &cluster.client, namespace.name(), &request_id);
    let daemon = start_daemon(root);
    // Its watch cache LISTs the namespace first (about a second at 5,000 pods); reads before
    // that are LISTs of their own, not what is measured.
    std::thread::sleep(Duration::from_secs(3));
    let via = format!("unix:{}", daemon.socket.display());
    let daemon_env = [("ORB_DAEMON", via.as_str())];
    let (_, answered) = run_orb(
        "status via orb serve",
        root,
        &status_args(&input),
        &daemon_env,
    );
    let stderr = String::from_utf8_lossy(&answered.stderr);
    assert!(
        !stderr.contains("did not answer"),
        "the daemon did not answer: {stderr}"
    );
    measure_against_version(
        &format!("completed acquire of {count} running pods"),
        "via orb serve",
        root,
        &input,
        &daemon_env,
    );
    // The floor under any way of answering: a process that only prints the same reply (3.4 MB
    // at 5,000 machines), started and read the way the calls above are.
    let reply = root.join("status-live.out");
    std::fs::write(&reply, &answered.stdout).unwrap();
    let label = format!(
        "  cat of the same reply ({} KB, the floor of printing it)",
        answered.stdout.len() / 1000
    );
    let times = (0..runs())
        .map(|_| {
            let started = Instant::now();
            let out = Command::new("cat").arg(&reply).output().expect("run cat");
            let elapsed = started.elapsed();
            assert_eq!(out.stdout.len(), answered.stdout.len(), "{label}");
            elapsed
        })
        .collect();
    report(&label, times);
}

/// The floor under a direct status read: the LIST it sends, alone, in this process (no
/// process start, no store, nothing decoded), as protobuf (what orb asks for) and as JSON.
fn measure_bare_list(
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    namespace: &str,
    request_id: &str,
) {
    use http_body_util::BodyExt;
    let url = format!(
        "/api/v1/namespaces/{namespace}/pods?labelSelector=orb.io%2Frequest-id%3D{request_id}"
    );
    for (encoding, accept) in [
        ("protobuf", "application/vnd.kubernetes.protobuf"),
        ("JSON", "application/json"),
    ] {
        let mut size = 0;
        let times = (0..runs())
            .map(|_| {
                let request = hyper::Request::get(&url)
                    .header(hyper::header::ACCEPT, accept)
                    .body(kube::client::Body::empty())
                    .unwrap();
                let started = Instant::now();
                let body = runtime.block_on(async {
                    let response = client.send(request).await.expect("bare LIST");
                    assert!(response.status().is_success(), "bare LIST: {response:?}");
                    response
                        .into_body()
                        .collect()
                        .await
                        .expect("bare LIST body")
                        .to_bytes()
                });
                let elapsed = started.elapsed();
                size = body.len();
                elapsed
            })
            .collect();
        report(
            &format!("  bare LIST of the pods, {encoding} ({} KB)", size / 1000),
            times,
        );
    }
}

/// `orb --config … server start --foreground --api-only --socket-path S`, the SDKs' managed
/// mode: time from exec until `GET /health` over the socket answers 200, then SIGTERM.
fn measure_server_start(root: &Path) {
    use std::io::{Read, Write};
    let label = "server start --socket-path: exec -> /health answers";
    let socket = root.join("sdk.sock");
    let config = root.join("config/config.json");
    let mut times = Vec::new();
    for _ in 0..runs().div_ceil(3).max(2) {
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_orb"))
            .env("ORB_ROOT_DIR", root)
            .env_remove("ORB_CONFIG_DIR")
            .env_remove("ORB_WORK_DIR")
            .arg("--config")
            .arg(&config)
            .args([
                "server",
                "start",
                "--foreground",
                "--api-only",
                "--socket-path",
            ])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting orb server");
        let answered = loop {
            if let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&socket) {
                let _ = write!(
                    stream,
                    "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                );
                let mut reply = String::new();
                let _ = stream.read_to_string(&mut reply);
                if reply.starts_with("HTTP/1.1 200") {
                    break started.elapsed();
                }
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "orb server start exited before answering"
            );
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{label}: no answer in 30 s"
            );
            std::thread::sleep(Duration::from_micros(500));
        };
        times.push(answered);
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
    report(label, times);
}

fn main() {
    let temp = tempfile::tempdir().unwrap();
    // BENCH_STARTUP_ROOT=DIR: seed there instead, and leave it, to profile one call by hand.
    let kept = std::env::var_os("BENCH_STARTUP_ROOT").map(PathBuf::from);
    let root = Root(match &kept {
        Some(dir) => {
            std::fs::create_dir_all(dir).unwrap();
            dir.clone()
        }
        None => temp.path().to_path_buf(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    write_config(root.path());
    println!("fresh `orb` processes on this machine:");
    measure("orb --version", root.path(), &["--version"]);
    let mut inputs = Vec::new();
    for count in counts("BENCH_STARTUP_SIZES", "50,500") {
        let request_id = runtime.block_on(seed(root.path(), count));
        let input = root.path().join(format!("status-{count}.json"));
        std::fs::write(
            &input,
            json!({"requests": [{"requestId": request_id}]}).to_string(),
        )
        .unwrap();
        inputs.push((count, input));
    }
    // Side by side with --version first, while no daemon runs: a running `orb serve` (its
    // retries towards an absent cluster, its allocator's background thread) takes CPU from
    // the calls measured while it is up, and `--version` alone above ran before it started.
    for (count, input) in &inputs {
        measure_against_version(
            &format!("finished {count}-machine return"),
            "no daemon up",
            root.path(),
            input,
            &[("ORB_DAEMON", "off")],
        );
    }
    let daemon = start_daemon(root.path());
    for (count, input) in &inputs {
        measure_status(*count, root.path(), input, &daemon);
    }
    drop(daemon);
    measure_server_start(root.path());
    live_request(&runtime);
    measure(
        "orb templates list -f (HostFactory)",
        root.path(),
        &[
            "--scheduler",
            "hostfactory",
            "templates",
            "list",
            "-d",
            "{}",
        ],
    );
}
