//! Acquire 500 bare pods through the Pod handler, and in the same run create 500 pods with a
//! bare kube-rs loop at the same concurrency (50 in flight), sending the same pod objects, against the local control plane.
//! Prints both times and their ratio (target ≤ 1.2).
//!
//! Run: `KUBECONFIG=.state/control-plane/admin.kubeconfig cargo bench -p orb-k8s --bench acquire_pods`
//! Pods get an unsatisfiable nodeSelector so the measurement is the apiserver work of
//! creating them, not scheduling; the namespaces are deleted afterwards.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube_fixture::TestCluster;
use orb_core::ids::RequestId;
use orb_core::provider::{AcquireInput, Provider};
use orb_core::template::{ProviderApi, Template};
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, FileLayer, K8sProviderConfig};
use orb_k8s::spec::{SpecInputs, build_pods};
use serde_json::json;

const PODS: u32 = 500;
const IN_FLIGHT: usize = 50;
const ROUNDS: usize = 4;

fn template() -> Template {
    Template {
        template_id: "bench".into(),
        provider_api: Some(ProviderApi::Pod),
        container_image: Some("busybox:1.36".into()),
        command: Some(vec!["sleep".into(), "3600".into()]),
        node_selector: Some([("pool".to_string(), "bench-nowhere".to_string())].into()),
        ..Template::default()
    }
}

fn provider(cluster: &TestCluster, namespace: &str) -> K8sProvider {
    let mut block = serde_json::Map::new();
    block.insert("namespace".into(), json!(namespace));
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "bench".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    );
    K8sProvider::with_client(
        cluster.client.clone(),
        layers.resolve(None).unwrap(),
        "default",
    )
}

async fn orb_acquire(provider: &K8sProvider, count: u32) -> Duration {
    let start = Instant::now();
    let outcome = provider
        .acquire(AcquireInput {
            request_id: RequestId::new_acquire(),
            template: template(),
            count,
        })
        .await
        .expect("acquire");
    assert_eq!(
        outcome.resource_ids.len() as u32,
        count,
        "{:?}",
        outcome.message
    );
    start.elapsed()
}

/// The same pod objects orb would send (built for another request id), created by a plain
/// loop: the difference in time is orb's own overhead.
async fn bare_loop(cluster: &TestCluster, namespace: &str, count: u32) -> Duration {
    let config = K8sProviderConfig::default();
    let t = template();
    let request_id = RequestId::new_acquire();
    let pods = build_pods(&SpecInputs {
        template: &t,
        config: &config,
        request_id: request_id.as_str(),
        namespace,
        count,
    })
    .expect("bench template builds");
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let start = Instant::now();
    let created: Vec<bool> = stream::iter(pods)
        .map(|pod| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod).await.is_ok() }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    assert!(created.iter().all(|ok| *ok), "every bare create succeeds");
    start.elapsed()
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` also runs bench binaries; only `cargo bench` (which passes
    // --bench) should create thousands of pods.
    if !std::env::args().any(|a| a == "--bench") {
        println!("acquire_pods: run with `cargo bench -p orb-k8s --bench acquire_pods`");
        return;
    }
    let cluster = TestCluster::connect().await;
    let ours = cluster.namespace("bench-orb").await;
    let bare = cluster.namespace("bench-bare").await;
    let provider = provider(&cluster, ours.name());
    // Warm up connections and the apiserver's caches on both paths.
    orb_acquire(&provider, 20).await;
    bare_loop(&cluster, bare.name(), 20).await;

    // Rounds in alternating order, so neither path always runs against the fuller
    // store; each path's best round is compared.
    let mut bare_times = Vec::new();
    let mut orb_times = Vec::new();
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            bare_times.push(bare_loop(&cluster, bare.name(), PODS).await);
            orb_times.push(orb_acquire(&provider, PODS).await);
        } else {
            orb_times.push(orb_acquire(&provider, PODS).await);
            bare_times.push(bare_loop(&cluster, bare.name(), PODS).await);
        }
    }
    let secs = |d: &[Duration]| {
        d.iter()
            .map(|d| format!("{:.2}s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let best = |d: &[Duration]| d.iter().min().copied().unwrap_or_default();
    let (bare_time, orb_time) = (best(&bare_times), best(&orb_times));
    let ratio = orb_time.as_secs_f64() / bare_time.as_secs_f64();
    println!(
        "bare kube-rs loop: {PODS} pods, {IN_FLIGHT} in flight: {} (best {:.2}s)",
        secs(&bare_times),
        bare_time.as_secs_f64()
    );
    println!(
        "orb Pod handler:   {PODS} pods, {IN_FLIGHT} in flight: {} (best {:.2}s)",
        secs(&orb_times),
        orb_time.as_secs_f64()
    );
    println!("ratio orb / bare:  {ratio:.2} (target <= 1.20)");
}
