//! Acquire through orb's four handlers next to a bare kube-rs loop doing the same work, and
//! release of a Pod-handler request next to bare deletes, on the local control plane.
//!
//! Per handler (Pod, Deployment, StatefulSet, Job) and count (100, 500, 1,000), in rounds of
//! alternating order:
//! - **orb**: `K8sProvider::acquire`, then `K8sProvider::status` every poll interval until the
//!   verdict is Fulfilled (every machine Running and Ready on a simulated KWOK node);
//! - **bare**: the exact objects orb would send (`final_workload_for` under another request
//!   id) created with kube-rs (bare pods 50 in flight, orb's limit; a controller as one
//!   create, plus a StatefulSet's headless Service), then a LIST of the namespace's pods every
//!   poll interval until that many are Running and Ready (a Job: the pods and the Job LISTed
//!   every poll until the Job is Complete, the reads orb's status makes).
//!
//! Release: a 500-pod Pod-handler request, all machines returned through
//! `K8sProvider::release`, vs bare deletes of the same pods (50 in flight, UID preconditions
//! like orb's), each timed until the namespace has no pods left. With `BENCH_RELEASE_OF`
//! larger than `BENCH_RELEASE_COUNT`, the request has that many machines and only
//! `BENCH_RELEASE_COUNT` of them are returned (timed until only the rest are left).
//!
//! The bench makes its own KWOK nodes (tainted, so nothing else lands on them; the template
//! tolerates the taint and selects them), 1,100 pods each and enough for its largest request, and
//! deletes them and its namespaces at the end. Between rounds everything is deleted and the
//! namespace drained (not timed). Prints a table and one `BENCH_JSON {...}` line per figure.
//!
//!   KUBECONFIG=.state/control-plane/admin.kubeconfig cargo bench -p orb-k8s --bench acquire_pods
//!
//! Environment: BENCH_ACQUIRE_HANDLERS (pod,deployment,statefulset,job),
//! BENCH_ACQUIRE_COUNTS (100,500,1000), BENCH_ACQUIRE_ROUNDS (3), BENCH_RELEASE_COUNT (500;
//! 0 skips the release figure), BENCH_RELEASE_OF (= BENCH_RELEASE_COUNT), BENCH_POLL_MS (100).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use kube_fixture::TestCluster;
use orb_core::ids::RequestId;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{
    AcquireInput, AcquireOutcome, MachineRef, Provider, ReleaseInput, StatusInput,
};
use orb_core::request::RequestType;
use orb_core::template::{ProviderApi, Template};
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, FileLayer};
use orb_k8s::spec::BuiltWorkload;
use serde_json::json;

/// The Pod handler's create/delete concurrency (`handlers::MAX_IN_FLIGHT`).
const IN_FLIGHT: usize = 50;
const WAIT_LIMIT: Duration = Duration::from_secs(600);
/// The bench's KWOK nodes hold this many pods each; it makes enough of them for its largest
/// request with a tenth to spare, and at least two.
const PODS_PER_NODE: usize = 1100;

fn nodes_for(largest: usize) -> usize {
    (largest + largest / 10).div_ceil(PODS_PER_NODE).max(2)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn api_of(name: &str) -> ProviderApi {
    match name {
        "pod" => ProviderApi::Pod,
        "deployment" => ProviderApi::Deployment,
        "statefulset" => ProviderApi::StatefulSet,
        "job" => ProviderApi::Job,
        other => panic!(
            "BENCH_ACQUIRE_HANDLERS: unknown handler {other:?}; use pod, deployment, statefulset, job"
        ),
    }
}

struct Bench {
    cluster: TestCluster,
    tag: String,
    poll: Duration,
    nodes: usize,
}

impl Bench {
    fn template(&self, api: ProviderApi) -> Template {
        Template {
            template_id: "bench".into(),
            provider_api: Some(api),
            container_image: Some("busybox:1.36".into()),
            command: Some(vec!["sleep".into(), "3600".into()]),
            node_selector: Some([("orb-rs.io/bench-node".to_string(), self.tag.clone())].into()),
            tolerations: Some(vec![json!({
                "key": "orb-rs.io/bench", "operator": "Equal", "value": self.tag,
                "effect": "NoSchedule"
            })]),
            // A Job request is fulfilled when the Job completes (KWOK completes Job pods
            // 1-2 s after they run); every other kind when its pods run and are ready.
            annotations: BTreeMap::new(),
            ..Template::default()
        }
    }

    fn provider(&self, namespace: &str) -> K8sProvider {
        let mut block = serde_json::Map::new();
        block.insert("namespace".into(), json!(namespace));
        let layers = ConfigLayers::new(
            Some(FileLayer {
                path: "bench".into(),
                block,
            }),
            Vec::<(String, String)>::new(),
        );
        let resolved = layers.resolve(None).expect("bench provider config");
        K8sProvider::with_client(self.cluster.client.clone(), resolved, "default")
    }

    fn client(&self) -> Client {
        self.cluster.client.clone()
    }

    /// KWOK nodes only this bench's pods go to (tainted; the template tolerates it).
    async fn create_nodes(&self) -> Vec<String> {
        let api: Api<Node> = Api::all(self.client());
        let mut names = Vec::new();
        for i in 0..self.nodes {
            let name = format!("orb-bench-{}-{i}", self.tag);
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", "type": "kwok",
                        "orb-rs.io/bench-node": self.tag}},
                "spec": {"taints": [{"key": "orb-rs.io/bench", "value": self.tag, "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"cpu": "1000", "memory": "4Ti", "pods": PODS_PER_NODE.to_string()},
                    "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": PODS_PER_NODE.to_string()},
                    "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "amd64", "operatingSystem": "linux"}}
            }))
            .unwrap();
            api.create(&PostParams::default(), &node)
                .await
                .expect("creating a bench KWOK node");
            names.push(name);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = api
                .list(&ListParams::default().labels(&format!("orb-rs.io/bench-node={}", self.tag)))
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|n| {
                            n.status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .is_some_and(|c| {
                                    c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                                })
                        })
                        .count()
                })
                .unwrap_or(0);
            if ready == self.nodes {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the bench's KWOK nodes did not become Ready in 120 s (is kwok running? tools/control-plane/cp status)"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        names
    }

    async fn delete_nodes(&self, names: &[String]) {
        let api: Api<Node> = Api::all(self.client());
        for name in names {
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }

    /// Pods in `namespace` that are Running and Ready and not being deleted.
    async fn ready_pods(&self, namespace: &str) -> usize {
        let api: Api<Pod> = Api::namespaced(self.client(), namespace);
        match api.list(&ListParams::default()).await {
            Ok(list) => list.items.iter().filter(|p| running_and_ready(p)).count(),
            Err(_) => 0,
        }
    }

    async fn wait_ready(&self, namespace: &str, count: usize) {
        let start = Instant::now();
        while self.ready_pods(namespace).await < count {
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "{count} pods in {namespace} not Running and Ready within {WAIT_LIMIT:?}"
            );
            tokio::time::sleep(self.poll).await;
        }
    }

    /// The namespace's one Job has condition Complete=True (what orb's Job status waits for).
    /// Each poll also LISTs the namespace's pods, as the other handlers' bare loops do: a
    /// status read has to report every machine of the request, so orb reads the Job's pods
    /// as well as the Job, and the limit makes the same reads (before 2026-12-05 it read the
    /// Job alone, which at 5,000 pods left the apiserver and the Job controller far less to do).
    async fn wait_job_complete(&self, namespace: &str) {
        let api: Api<Job> = Api::namespaced(self.client(), namespace);
        let start = Instant::now();
        loop {
            let _machines = self.ready_pods(namespace).await;
            let complete = api.list(&ListParams::default()).await.is_ok_and(|l| {
                l.items.iter().any(|j| {
                    j.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter()
                                .any(|c| c.type_ == "Complete" && c.status == "True")
                        })
                })
            });
            if complete {
                return;
            }
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "the Job in {namespace} not complete within {WAIT_LIMIT:?}"
            );
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Waits until at most `left` pods exist in `namespace` (terminating ones count).
    async fn wait_pods_left(&self, namespace: &str, left: usize) {
        let api: Api<Pod> = Api::namespaced(self.client(), namespace);
        let start = Instant::now();
        loop {
            match api.list(&ListParams::default()).await {
                Ok(list) if list.items.len() <= left => return,
                _ => {}
            }
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "pods in {namespace} not down to {left} within {WAIT_LIMIT:?}"
            );
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Deletes every controller, Service and pod in `namespace` and waits until no pod
    /// and no ReplicaSet is left (not timed).
    async fn drain(&self, namespace: &str) {
        let dp = DeleteParams::background();
        let lp = ListParams::default();
        let c = self.client();
        let _ = Api::<Deployment>::namespaced(c.clone(), namespace)
            .delete_collection(&dp, &lp)
            .await;
        let _ = Api::<StatefulSet>::namespaced(c.clone(), namespace)
            .delete_collection(&dp, &lp)
            .await;
        let _ = Api::<Job>::namespaced(c.clone(), namespace)
            .delete_collection(&dp, &lp)
            .await;
        let services: Api<Service> = Api::namespaced(c.clone(), namespace);
        if let Ok(list) = services.list(&lp).await {
            for s in list.items {
                let _ = services.delete(&s.name_any(), &dp).await;
            }
        }
        let replica_sets: Api<ReplicaSet> = Api::namespaced(c.clone(), namespace);
        let pods: Api<Pod> = Api::namespaced(c, namespace);
        let start = Instant::now();
        loop {
            let _ = replica_sets.delete_collection(&dp, &lp).await;
            let _ = pods.delete_collection(&DeleteParams::default(), &lp).await;
            let left = pods.list(&lp).await.map(|l| l.items.len()).unwrap_or(1)
                + replica_sets
                    .list(&lp)
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(1);
            if left == 0 {
                return;
            }
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "{namespace} not drained within {WAIT_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// orb: acquire, then poll the provider's status until Fulfilled. Returns (acquire call,
    /// until fulfilled) and the outcome.
    async fn orb_acquire(
        &self,
        provider: &K8sProvider,
        api: ProviderApi,
        count: u32,
    ) -> (Duration, Duration, RequestId, AcquireOutcome) {
        let template = self.template(api);
        let request_id = RequestId::new_acquire();
        let start = Instant::now();
        let outcome = provider
            .acquire(AcquireInput {
                request_id: request_id.clone(),
                template: template.clone(),
                count,
            })
            .await
            .expect("orb acquire");
        let created = start.elapsed();
        if api == ProviderApi::Pod {
            assert_eq!(
                outcome.resource_ids.len(),
                count as usize,
                "{:?}",
                outcome.message
            );
        }
        let input = StatusInput {
            request_id: request_id.clone(),
            request_type: RequestType::Acquire,
            requested_count: count,
            provider_api: Some(template.api()),
            provider_data: std::sync::Arc::new(outcome.provider_data.clone()),
            template: Some(template.clone()),
            machines: Default::default(),
        };
        loop {
            let report = provider.status(input.clone()).await.expect("orb status");
            match report.verdict {
                Verdict::Fulfilled => break,
                Verdict::InProgress | Verdict::Underway => {}
                other => panic!("orb {api:?} x{count}: {other:?} {:?}", report.message),
            }
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "orb {api:?} x{count} not fulfilled within {WAIT_LIMIT:?}: {} of {count}",
                report.fulfilled
            );
            tokio::time::sleep(self.poll).await;
        }
        (created, start.elapsed(), request_id, outcome)
    }

    /// bare: the same objects orb would send (for another request id), created directly,
    /// then the namespace's pods polled until `count` are Running and Ready.
    async fn bare_acquire(
        &self,
        provider: &K8sProvider,
        namespace: &str,
        api: ProviderApi,
        count: u32,
    ) -> (Duration, Duration, Vec<Pod>) {
        let template = self.template(api);
        let request_id = RequestId::new_acquire();
        let planned = provider
            .final_workload_for(&template, request_id.as_str(), count)
            .expect("bench template builds");
        assert_eq!(planned.namespace, namespace);
        let c = self.client();
        let pp = PostParams::default();
        let start = Instant::now();
        let mut pods_sent = Vec::new();
        match planned.workload.built {
            BuiltWorkload::Pods(pods) => {
                let api: Api<Pod> = Api::namespaced(c, namespace);
                let created: Vec<Option<Pod>> = stream::iter(pods)
                    .map(|pod| {
                        let (api, pp) = (&api, &pp);
                        async move { api.create(pp, &pod).await.ok() }
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .collect()
                    .await;
                assert!(created.iter().all(Option::is_some), "every bare create");
                pods_sent = created.into_iter().flatten().collect();
            }
            BuiltWorkload::Deployment(d) => {
                Api::<Deployment>::namespaced(c, namespace)
                    .create(&pp, &d)
                    .await
                    .expect("bare Deployment");
            }
            BuiltWorkload::StatefulSet(set, service) => {
                Api::<StatefulSet>::namespaced(c.clone(), namespace)
                    .create(&pp, &set)
                    .await
                    .expect("bare StatefulSet");
                Api::<Service>::namespaced(c, namespace)
                    .create(&pp, &service)
                    .await
                    .expect("bare headless Service");
            }
            BuiltWorkload::Job(job) => {
                Api::<Job>::namespaced(c, namespace)
                    .create(&pp, &job)
                    .await
                    .expect("bare Job");
            }
        }
        let created = start.elapsed();
        if api == ProviderApi::Job {
            self.wait_job_complete(namespace).await;
        } else {
            self.wait_ready(namespace, count as usize).await;
        }
        (created, start.elapsed(), pods_sent)
    }
}

fn running_and_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .as_ref()
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    }
}

fn secs(times: &[Duration]) -> Vec<f64> {
    times
        .iter()
        .map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0)
        .collect()
}

/// Prints one comparison as a table row and a `BENCH_JSON` line for bench/collect.py.
fn report(
    kind: &str,
    handler: &str,
    count: u32,
    orb: &[Duration],
    bare: &[Duration],
    orb_create: &[Duration],
    bare_create: &[Duration],
) {
    let (o, b) = (median(orb), median(bare));
    let ratio = o.as_secs_f64() / b.as_secs_f64();
    let create_ratio = if orb_create.is_empty() {
        None
    } else {
        Some(median(orb_create).as_secs_f64() / median(bare_create).as_secs_f64())
    };
    println!(
        "{kind:<8} {handler:<12} {count:>5}   orb {:>7.2}s   bare {:>7.2}s   ratio {ratio:.2}{}   rounds orb {:?} bare {:?}",
        o.as_secs_f64(),
        b.as_secs_f64(),
        create_ratio.map_or(String::new(), |r| format!("   (create calls only: {r:.2})")),
        secs(orb),
        secs(bare),
    );
    println!(
        "BENCH_JSON {}",
        json!({
            "bench": kind, "handler": handler, "count": count, "in_flight": IN_FLIGHT,
            "orb_median_s": o.as_secs_f64(), "bare_median_s": b.as_secs_f64(), "ratio": ratio,
            "orb_rounds_s": secs(orb), "bare_rounds_s": secs(bare),
            "orb_create_median_s": (!orb_create.is_empty()).then(|| median(orb_create).as_secs_f64()),
            "bare_create_median_s": (!bare_create.is_empty()).then(|| median(bare_create).as_secs_f64()),
            "create_ratio": create_ratio,
        })
    );
}

fn machine_refs(request_id: &RequestId, outcome: &AcquireOutcome) -> Vec<MachineRef> {
    outcome
        .machines
        .iter()
        .map(|m| MachineRef {
            machine_id: m.machine_id.clone(),
            name: m.name.clone(),
            request_id: request_id.clone(),
            template_id: "bench".into(),
            provider_api: Some(orb_core::ProviderApi::Pod),
            resource_id: m.resource_id.clone(),
            uid: m.uid.clone(),
            status: MachineStatus::Running,
            request_provider_data: std::sync::Arc::new(outcome.provider_data.clone()),
        })
        .collect()
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` also runs bench binaries; only `cargo bench` (which passes
    // --bench) should create thousands of pods.
    if !std::env::args().any(|a| a == "--bench") {
        println!("acquire_pods: run with `cargo bench -p orb-k8s --bench acquire_pods`");
        return;
    }
    let handlers = env_list("BENCH_ACQUIRE_HANDLERS", "pod,deployment,statefulset,job");
    let counts: Vec<u32> = env_list("BENCH_ACQUIRE_COUNTS", "100,500,1000")
        .iter()
        .map(|c| {
            c.parse()
                .unwrap_or_else(|_| panic!("BENCH_ACQUIRE_COUNTS: {c:?} is not a number"))
        })
        .collect();
    let rounds = env_num("BENCH_ACQUIRE_ROUNDS", 3).max(1) as usize;
    let release_count = env_num("BENCH_RELEASE_COUNT", 500) as u32;
    // The request the release figure returns `release_count` machines of.
    let release_of =
        (env_num("BENCH_RELEASE_OF", u64::from(release_count)) as u32).max(release_count);
    let largest = counts.iter().copied().max().unwrap_or(0).max(release_of);
    let cluster = TestCluster::connect().await;
    let tag = format!(
        "{:08x}",
        std::process::id() ^ (Instant::now().elapsed().subsec_nanos())
    );
    let bench = Bench {
        cluster,
        tag,
        poll: Duration::from_millis(env_num("BENCH_POLL_MS", 100)),
        nodes: nodes_for(largest as usize),
    };
    let nodes = bench.create_nodes().await;
    let ours = bench.cluster.namespace("bench-orb").await;
    let bare = bench.cluster.namespace("bench-bare").await;
    let provider = bench.provider(ours.name());
    let bare_provider = bench.provider(bare.name());
    println!(
        "acquire: orb (acquire + status polls until Fulfilled) vs bare kube-rs (same objects + pod LIST polls), \
         poll {:?}, {rounds} alternating rounds, median; Pod creates {IN_FLIGHT} in flight",
        bench.poll
    );

    // Warm up connections and the apiserver's caches on both paths.
    bench.orb_acquire(&provider, ProviderApi::Pod, 20).await;
    bench
        .bare_acquire(&bare_provider, bare.name(), ProviderApi::Pod, 20)
        .await;
    bench.drain(ours.name()).await;
    bench.drain(bare.name()).await;

    for handler in &handlers {
        let api = api_of(handler);
        for &count in &counts {
            let (mut orb_t, mut bare_t, mut orb_c, mut bare_c) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds {
                let order = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for orb_side in order {
                    if orb_side {
                        let (c, t, ..) = bench.orb_acquire(&provider, api, count).await;
                        orb_c.push(c);
                        orb_t.push(t);
                        bench.drain(ours.name()).await;
                    } else {
                        let (c, t, _) = bench
                            .bare_acquire(&bare_provider, bare.name(), api, count)
                            .await;
                        bare_c.push(c);
                        bare_t.push(t);
                        bench.drain(bare.name()).await;
                    }
                }
            }
            report("acquire", handler, count, &orb_t, &bare_t, &orb_c, &bare_c);
        }
    }

    if release_count > 0 {
        let kept = (release_of - release_count) as usize;
        let (mut orb_t, mut bare_t) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for orb_side in order {
                if orb_side {
                    let (.., request_id, outcome) = bench
                        .orb_acquire(&provider, ProviderApi::Pod, release_of)
                        .await;
                    let mut machines = machine_refs(&request_id, &outcome);
                    assert_eq!(machines.len(), release_of as usize);
                    machines.truncate(release_count as usize);
                    let start = Instant::now();
                    let released = provider
                        .release(ReleaseInput {
                            return_request_id: RequestId::new_return(),
                            machines,
                            templates: BTreeMap::new(),
                            others: BTreeMap::new(),
                        })
                        .await
                        .expect("orb release");
                    assert!(released.failed.is_empty(), "{:?}", released.failed);
                    bench.wait_pods_left(ours.name(), kept).await;
                    orb_t.push(start.elapsed());
                    bench.drain(ours.name()).await;
                } else {
                    let (.., mut pods) = bench
                        .bare_acquire(&bare_provider, bare.name(), ProviderApi::Pod, release_of)
                        .await;
                    pods.truncate(release_count as usize);
                    let api: Api<Pod> = Api::namespaced(bench.client(), bare.name());
                    let start = Instant::now();
                    let deleted: Vec<bool> = stream::iter(pods)
                        .map(|pod| {
                            let api = &api;
                            let params = DeleteParams {
                                preconditions: Some(Preconditions {
                                    uid: pod.metadata.uid.clone(),
                                    resource_version: None,
                                }),
                                ..DeleteParams::default()
                            };
                            async move { api.delete(&pod.name_any(), &params).await.is_ok() }
                        })
                        .buffer_unordered(IN_FLIGHT)
                        .collect()
                        .await;
                    assert!(deleted.iter().all(|ok| *ok), "every bare delete");
                    bench.wait_pods_left(bare.name(), kept).await;
                    bare_t.push(start.elapsed());
                    bench.drain(bare.name()).await;
                }
            }
        }
        let what = if kept > 0 {
            format!("pod of {release_of}")
        } else {
            "pod".to_string()
        };
        report("release", &what, release_count, &orb_t, &bare_t, &[], &[]);
    }
    bench.delete_nodes(&nodes).await;
}
