//! Start-up cost of fresh `orb` processes, the way HostFactory pays it: one process per call.
//! Prints median and 90th percentile for `orb --version` and for HostFactory status polls of
//! stored 50- and 500-machine requests. A benchmark that reports figures, not a pass/fail test.
//!
//! Run: `cargo bench -p orb --bench startup` (release build).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_store::Store;
use serde_json::json;

const RUNS: usize = 60;

fn measure(label: &str, root: &Path, args: &[&str]) {
    let orb = env!("CARGO_BIN_EXE_orb");
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let out = Command::new(orb)
                .args(args)
                .env("ORB_ROOT_DIR", root)
                .env_remove("ORB_CONFIG_DIR")
                .env_remove("ORB_WORK_DIR")
                .output()
                .expect("run orb");
            let elapsed = started.elapsed();
            assert!(
                out.status.success(),
                "{label}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            elapsed
        })
        .collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<55} median {:>6.2} ms   p90 {:>6.2} ms   min {:>6.2} ms   ({RUNS} runs)",
        ms(times[RUNS / 2]),
        ms(times[RUNS * 9 / 10]),
        ms(times[0])
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

/// Stores a complete acquire request of `count` running machines; returns its id.
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
    let hex = request.request_id.hex_digits();
    let mut machines: Vec<Machine> = (0..count)
        .map(|i| Machine {
            machine_id: format!("orb-{}-{i:04}", &hex[..20]),
            name: format!("orb-{}-{i:04}", &hex[..20]),
            request_id: request.request_id.clone(),
            return_request_id: None,
            template_id: "worker".into(),
            provider_name: "kube".into(),
            provider_api: Some("Pod".into()),
            resource_id: None,
            uid: None,
            status: MachineStatus::Running,
            status_reason: None,
            private_ip: Some(format!("10.0.{}.{}", i / 250, i % 250 + 1)),
            public_ip: None,
            launch_time: Some(now),
            instance_type: Some("k8s/Pod".into()),
            price_type: Some("ondemand".into()),
            tags: BTreeMap::from([("orb.io/managed".into(), "true".into())]),
            provider_data: json!({}),
            created_at: now,
            updated_at: now,
            version: 0,
        })
        .collect();
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    request.request_id.to_string()
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    write_config(root.path());
    println!("fresh `orb` processes on this machine:");
    measure("orb --version", root.path(), &["--version"]);
    for count in [50, 500] {
        let request_id = runtime.block_on(seed(root.path(), count));
        let input = root.path().join(format!("status-{count}.json"));
        std::fs::write(
            &input,
            json!({"requests": [{"requestId": request_id}]}).to_string(),
        )
        .unwrap();
        measure(
            &format!("orb requests status -f (HostFactory, {count}-machine request)"),
            root.path(),
            &[
                "--scheduler",
                "hostfactory",
                "requests",
                "status",
                "-f",
                input.to_str().unwrap(),
            ],
        );
    }
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
