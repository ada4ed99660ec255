//! Criterion benches for the pure decisions that run per pod or per request: release planning
//! over 10,000 pods, pod → machine translation of 10,000 realistic pods, config layering
//! (full file block + env + template overrides), and the HostFactory status reply of a
//! 5,000-machine request (its entries and pretty JSON, the work `orb serve` does per call;
//! `orb` renders the same text with a faster formatter of its own).
//!
//! Run: `cargo bench -p orb-k8s --bench hot_paths` (bench/run.sh collects the figures).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod,
    PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use orb_core::ProviderApi;
use orb_k8s::config::{ConfigLayers, FileLayer, TemplateOverrides};
use orb_k8s::machine_state::observe_pod;
use orb_k8s::release_plan::{
    PodPhase, PodRank, plan_deployment_release, plan_pod_release, plan_statefulset_release,
};
use serde_json::{Value, json};

const PODS: usize = 10_000;

fn pod_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn release_planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("release_plan");
    group.throughput(Throughput::Elements(PODS as u64));

    // Bare pods: 10,000 names with every tenth repeated (HostFactory may name a host twice).
    let mut victims = pod_names("orb-3f2a9c1d4e5b6a7c8d9e-w", PODS);
    victims.extend(victims.iter().step_by(10).cloned().collect::<Vec<_>>());
    group.bench_function("pod/10k_victims", |b| {
        b.iter(|| plan_pod_release(black_box(&victims)))
    });

    // Deployment with 10,000 live Ready pods: return 1,000 of them (the ranking check runs
    // over all 10,000), then all of them.
    let names = pod_names("orb-dep-7d9f8b6c5-x", PODS);
    let live: Vec<PodRank> = names
        .iter()
        .map(|name| PodRank {
            name: name.clone(),
            scheduled: true,
            phase: PodPhase::Running,
            ready: true,
            deletion_cost: 0,
        })
        .collect();
    let some: Vec<String> = names.iter().step_by(10).cloned().collect();
    let kept: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 != 0)
        .map(|(_, n)| n.clone())
        .collect();
    group.bench_function("deployment/10k_live_1k_victims", |b| {
        b.iter(|| {
            plan_deployment_release(
                "orb-dep",
                black_box(&live),
                Some(black_box(&kept)),
                black_box(&some),
            )
        })
    });
    group.bench_function("deployment/10k_live_all_victims", |b| {
        b.iter(|| plan_deployment_release("orb-dep", black_box(&live), None, black_box(&names)))
    });

    // StatefulSet with 10,000 replicas: the top 1,000 ordinals, then all of them.
    let all: Vec<String> = (0..PODS).map(|i| format!("orb-sts-{i}")).collect();
    let tail: Vec<String> = all[PODS - 1_000..].to_vec();
    let none_failed = std::collections::BTreeSet::new();
    group.bench_function("statefulset/10k_replicas_tail_1k", |b| {
        b.iter(|| plan_statefulset_release("orb-sts", PODS as u32, black_box(&tail), &none_failed))
    });
    group.bench_function("statefulset/10k_replicas_all", |b| {
        b.iter(|| plan_statefulset_release("orb-sts", PODS as u32, black_box(&all), &none_failed))
    });
    group.finish();
}

fn container(name: &str, ready: bool, restarts: i32, state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: "registry.example/worker:1.36".into(),
        image_id: "registry.example/worker@sha256:0123456789abcdef".into(),
        ready,
        restart_count: restarts,
        state: Some(state),
        ..ContainerStatus::default()
    }
}

/// A pod as the apiserver returns it for a HostFactory machine; `i` picks its condition:
/// 80% running and ready, 10% pending unschedulable, 5% image pull failure, 5% crash loop.
fn realistic_pod(i: usize) -> Pod {
    let name = format!("orb-3f2a9c1d4e5b6a7c8d9e-{i:05}");
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "orb".to_string(),
        ),
        ("orb.io/request-id".to_string(), "ret-3f2a9c1d".to_string()),
        ("orb.io/template-id".to_string(), "worker".to_string()),
        ("orb.io/machine-name".to_string(), name.clone()),
    ]);
    let running = ContainerState {
        running: Some(Default::default()),
        ..ContainerState::default()
    };
    let (phase, ready, statuses, conditions) = match i % 20 {
        0 | 1 => (
            "Pending",
            false,
            vec![],
            vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("0/3 nodes are available: 3 Insufficient cpu.".into()),
                ..PodCondition::default()
            }],
        ),
        2 => (
            "Pending",
            false,
            vec![container(
                "worker",
                false,
                0,
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ImagePullBackOff".into()),
                        message: Some("Back-off pulling image".into()),
                    }),
                    ..ContainerState::default()
                },
            )],
            vec![],
        ),
        3 => (
            "Running",
            false,
            vec![ContainerStatus {
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 1,
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..container("worker", false, 3, running.clone())
            }],
            vec![],
        ),
        _ => (
            "Running",
            true,
            vec![
                container("worker", true, 0, running.clone()),
                container("sidecar", true, 0, running),
            ],
            vec![],
        ),
    };
    let mut conditions = conditions;
    conditions.push(PodCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        ..PodCondition::default()
    });
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some("hpc".into()),
            uid: Some(format!("0b8e5a7c-1d2f-4e3a-9b6c-{i:012}")),
            labels: Some(labels),
            creation_timestamp: Some(Time("2026-11-30T06:00:00Z".parse().unwrap())),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: (phase == "Running").then(|| format!("node-{}", i % 50)),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            pod_ip: (phase == "Running")
                .then(|| format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256)),
            host_ip: (phase == "Running").then(|| format!("192.168.0.{}", i % 50)),
            conditions: Some(conditions),
            container_statuses: Some(statuses),
            ..PodStatus::default()
        }),
    }
}

fn pod_translation(c: &mut Criterion) {
    let pods: Vec<Pod> = (0..PODS).map(realistic_pod).collect();
    let mut group = c.benchmark_group("machine_state");
    group.throughput(Throughput::Elements(PODS as u64));
    group.bench_function("observe_pod/10k_pods", |b| {
        b.iter(|| {
            pods.iter()
                .map(|p| observe_pod(p, ProviderApi::Pod, "orb-3f2a9c1d4e5b6a7c8d9e"))
                .collect::<Vec<_>>()
        })
    });
    group.finish();
}

fn object(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().expect("a JSON object").clone()
}

fn config_merge(c: &mut Criterion) {
    // Every group of seed 001 set in the file block.
    let file = FileLayer {
        path: PathBuf::from("/etc/orb/config.json"),
        block: object(json!({
            "kubeconfig_path": "/etc/orb/kubeconfig",
            "context": "hpc",
            "namespace": "hpc",
            "namespaces": ["hpc", "hpc-batch", "hpc-prod", "hpc-gpu"],
            "label_prefix": "orb.io",
            "emit_legacy_labels": false,
            "default_node_selector": {"pool": "symphony", "zone": "a"},
            "default_tolerations": [{"key": "dedicated", "operator": "Equal", "value": "hpc", "effect": "NoSchedule"}],
            "default_image_pull_secret": "registry",
            "pod_timeout_seconds": 600,
            "delete_timed_out_pods": true,
            "stale_cache_timeout_seconds": 30,
            "watch_enabled": true,
            "auto_cleanup_orphans": true,
            "orphan_gc_enabled": true,
            "orphan_gc_interval_seconds": 300,
            "orphan_min_age_seconds": 600,
            "periodic_resync_interval_seconds": 300,
            "audit_high_risk_pod_fields": true,
            "reject_high_risk_pod_fields": true,
            "controller_status_cache_ttl_seconds": 2.5,
            "circuit_breaker_failure_threshold": 5,
            "circuit_breaker_reset_timeout": 30,
            "max_retries": 3,
            "retry_base_delay": 0.5,
            "retry_max_delay": 10.0,
            "metrics_enabled": true,
            "native_spec_enabled": true,
            "naming": {"prefix": "orb", "uuid_chars": 12}
        })),
    };
    let env = [
        ("ORB_K8S_NAMESPACE", "hpc-prod"),
        ("ORB_K8S_POD_TIMEOUT_SECONDS", "900"),
        ("ORB_K8S_DEFAULT_NODE_SELECTOR__ZONE", "b"),
        ("ORB_K8S_MAX_RETRIES", "5"),
        ("ORB_K8S_NAMING__PREFIX", "hf"),
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/egoadmin"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let layers = ConfigLayers::new(Some(file), env);
    let overrides = TemplateOverrides {
        template_id: "gpu-worker".into(),
        values: object(json!({
            "emit_legacy_labels": false,
            "default_node_selector": {"accelerator": "a100"},
            "pod_timeout_seconds": 1200,
            "naming": {"max_pod_name_len": 50}
        })),
    };
    layers
        .resolve(Some(&overrides))
        .expect("the bench config is valid");
    let mut group = c.benchmark_group("config");
    group.bench_function("resolve/file_env_template", |b| {
        b.iter(|| layers.resolve(Some(black_box(&overrides))))
    });
    group.bench_function("resolve/file_env_provider_wide", |b| {
        b.iter(|| layers.resolve(None))
    });
    // What a config reload pays: building the layers from scratch as well.
    group.bench_function("layers_new_and_resolve", |b| {
        b.iter_batched(
            || layers.clone(),
            |l| ConfigLayers::new(l.file, l.env).resolve(Some(&overrides)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn short() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

/// The getRequestStatus reply of one completed 5,000-machine acquire, each machine tagged with
/// its pod's labels as the Kubernetes provider records them: the entries, then pretty JSON,
/// as orb writes it and as serde_json does (the same bytes).
fn status_reply(c: &mut Criterion) {
    use orb_core::hostfactory::output::{StatusReply, request_status_entry};
    use orb_core::test_support::{machine, request};
    use orb_core::{MachineStatus, RequestStatus, RequestType};
    const MACHINES: usize = 5_000;
    let acquire = request(RequestType::Acquire)
        .count(MACHINES as u32)
        .fulfilled(MACHINES as u32)
        .status(RequestStatus::Complete)
        .build();
    let machines: Vec<_> = (0..MACHINES)
        .map(|i| {
            let name = format!("orb-3f2a9c1d4e5b6a7c8d9e-{i:04}");
            machine(&name)
                .of(&acquire)
                .status(MachineStatus::Running)
                .ip(&format!("10.244.{}.{}", i / 250, i % 250))
                .instance_type("k8s/Pod")
                .tag("orb.io/managed", "true")
                .tag("orb.io/request-id", acquire.request_id.as_str())
                .tag("orb.io/machine-id", &name)
                .tag("orb.io/provider-api", "Pod")
                .tag("orb.io/template-id", "worker")
                .provider_data(json!({"cloud_host_id": "kwok-node-0"}))
                .build()
        })
        .collect();
    let mut group = c.benchmark_group("hostfactory_status");
    group.throughput(Throughput::Elements(MACHINES as u64));
    // What orb writes (by hand), and beside it the same bytes through serde_json.
    group.bench_function("5k_machines/render", |b| {
        b.iter(|| {
            let reply = StatusReply {
                requests: vec![request_status_entry(&acquire, black_box(&machines))],
            };
            reply.to_pretty_json()
        })
    });
    group.bench_function("5k_machines/render_serde_json", |b| {
        b.iter(|| {
            let reply = StatusReply {
                requests: vec![request_status_entry(&acquire, black_box(&machines))],
            };
            serde_json::to_vec_pretty(&reply).unwrap()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = short();
    targets = release_planning, pod_translation, config_merge, status_reply
}
criterion_main!(benches);
