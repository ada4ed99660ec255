//! Criterion bench for the store read every status call makes: the machines of one request
//! (50 and 500), from a SQLite file, with machine rows shaped like real ones (pod labels as
//! tags, the Kubernetes provider's bookkeeping).
//!
//! Run: `cargo bench -p orb-store --bench store_reads` (bench/run.sh collects the figures).

use std::collections::BTreeMap;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jiff::Timestamp;
use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_store::{MachineFilter, Store};
use serde_json::json;

fn machine(request: &Request, i: u32, now: Timestamp) -> Machine {
    let hex = request.request_id.hex_digits();
    let name = format!("orb-{}-{i:04}", &hex[..20]);
    Machine {
        machine_id: name.clone(),
        name: name.clone(),
        request_id: request.request_id.clone(),
        return_request_id: None,
        template_id: "worker".into(),
        provider_name: "kube".into(),
        provider_api: Some(ProviderApi::Pod),
        resource_id: Some(name.clone()),
        uid: Some(uuid::Uuid::new_v4().to_string()),
        status: MachineStatus::Running,
        status_reason: None,
        private_ip: Some(format!("10.244.{}.{}", i / 250, i % 250 + 1)),
        public_ip: None,
        launch_time: Some(now),
        instance_type: Some("k8s/Pod".into()),
        price_type: Some("ondemand".into()),
        tags: BTreeMap::from([
            ("orb.io/managed".into(), "true".into()),
            ("orb.io/request-id".into(), request.request_id.to_string()),
            ("orb.io/template-id".into(), "worker".into()),
            ("app".into(), "symphony-worker".into()),
        ])
        .into(),
        provider_data: json!({
            "namespace": "default",
            "node_name": format!("kwok-node-{}", i % 8),
            "cloud_host_id": format!("kwok-node-{}", i % 8),
            "host_ip": format!("10.0.0.{}", i % 8 + 1),
            "phase": "Running",
            "ready": true,
            "restart_count": 0,
        })
        .into(),
        created_at: now,
        updated_at: now,
        version: 0,
    }
}

async fn seed(store: &Store, count: u32) -> RequestId {
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
    let mut machines: Vec<Machine> = (0..count).map(|i| machine(&request, i, now)).collect();
    store
        .insert_request(&mut request, &mut machines)
        .await
        .expect("seed the request");
    request.request_id
}

fn machines_of_a_request(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = runtime
        .block_on(Store::open_sqlite_file(&dir.path().join("orb.db")))
        .unwrap();
    let mut group = c.benchmark_group("store");
    for count in [50u32, 500] {
        let id = runtime.block_on(seed(&store, count));
        let filter = MachineFilter {
            request_id: Some(id),
            ..Default::default()
        };
        group.throughput(Throughput::Elements(u64::from(count)));
        group.bench_function(format!("sqlite/machines_of_request/{count}"), |b| {
            b.iter(|| {
                let machines = runtime.block_on(store.list_machines(&filter)).unwrap();
                assert_eq!(machines.len(), count as usize);
                machines
            })
        });
    }
    group.finish();
}

fn short() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = short();
    targets = machines_of_a_request
}
criterion_main!(benches);
