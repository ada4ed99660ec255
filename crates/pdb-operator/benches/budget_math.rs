//! Criterion benches for the operator's budget math: the drain clamp and gang budgets, and the
//! whole per-workload decision (`desired_pdb_for_workload`) over 1,000 Deployments with a
//! realistic set of policies, which is what a full resync computes.
//!
//! Run: `cargo bench -p pdb-operator --bench budget_math` (bench/run.sh collects the figures).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use pdb_operator::budget::{BudgetRule, BudgetValue, clamp_pod_budget};
use pdb_operator::crd::{PDBPolicy, PDBPolicySpec};
use pdb_operator::desired::{Policies, WorkloadKind, WorkloadView, desired_pdb_for_workload};
use pdb_operator::gang::{DisruptionMode, ObservedGroup, budget_for_gang};
use pdb_operator::names::keys;
use pdb_operator::resolve::WorkloadMeta;
use serde_json::json;

const WORKLOADS: usize = 1_000;

fn rules() -> Vec<BudgetRule> {
    use BudgetValue::{Count, Percent};
    vec![
        BudgetRule::MinAvailable(Percent(50)),
        BudgetRule::MinAvailable(Percent(75)),
        BudgetRule::MinAvailable(Percent(100)),
        BudgetRule::MinAvailable(Count(3)),
        BudgetRule::MaxUnavailable(Percent(0)),
        BudgetRule::MaxUnavailable(Count(1)),
    ]
}

fn clamp(c: &mut Criterion) {
    let rules = rules();
    let mut group = c.benchmark_group("budget");
    let cases = rules.len() * 100;
    group.throughput(Throughput::Elements(cases as u64));
    group.bench_function("clamp_pod_budget/600_cases", |b| {
        b.iter(|| {
            for rule in &rules {
                for n in 2..102 {
                    black_box(clamp_pod_budget(*rule, n));
                }
            }
        })
    });
    group.finish();
}

fn gangs(c: &mut Criterion) {
    // 1,000 training jobs, 2..=9 groups of uneven sizes each.
    let jobs: Vec<Vec<ObservedGroup>> = (0..WORKLOADS)
        .map(|j| {
            (0..2 + j % 8)
                .map(|g| ObservedGroup {
                    name: format!("job-{j}-group-{g}"),
                    pods: 4 + ((j + g) % 5) as u32,
                    min_count: 3,
                })
                .collect()
        })
        .collect();
    let rule = BudgetRule::MinAvailable(BudgetValue::Percent(75));
    let mut group = c.benchmark_group("gang");
    group.throughput(Throughput::Elements(WORKLOADS as u64));
    for (label, mode) in [
        ("all", DisruptionMode::All),
        ("single", DisruptionMode::Single),
    ] {
        group.bench_function(format!("budget_for_gang/{label}/1k_gangs"), |b| {
            b.iter(|| {
                for groups in &jobs {
                    black_box(budget_for_gang(rule, mode, groups));
                }
            })
        });
    }
    group.finish();
}

fn deployment(i: usize) -> WorkloadView {
    let name = format!("svc-{i}");
    let tier = ["frontend", "backend", "batch", "data"][i % 4];
    let labels = BTreeMap::from([
        ("app".to_string(), name.clone()),
        ("tier".to_string(), tier.to_string()),
    ]);
    // A third carry the class annotation; the rest are reached by policies (or not at all).
    let annotations = if i.is_multiple_of(3) {
        let class = ["standard", "high-availability", "non-critical"][i % 9 / 3];
        BTreeMap::from([(keys::AVAILABILITY_CLASS.to_string(), class.to_string())])
    } else {
        BTreeMap::new()
    };
    WorkloadView {
        kind: WorkloadKind::Deployment,
        meta: WorkloadMeta {
            namespace: format!("team-{}", i % 10),
            name: name.clone(),
            labels: labels.clone(),
            annotations,
        },
        uid: format!("uid-{i}"),
        replicas: Some(1 + (i % 12) as i32),
        selector: LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_string(), name)])),
            match_expressions: None,
        },
        pod_labels: labels,
        terminating: false,
    }
}

fn policy(namespace: &str, name: &str, spec: serde_json::Value) -> PDBPolicy {
    let spec: PDBPolicySpec = serde_json::from_value(spec).expect("bench policy spec is valid");
    PDBPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

fn desired(c: &mut Criterion) {
    let workloads: Vec<WorkloadView> = (0..WORKLOADS).map(deployment).collect();
    // Per team namespace: a frontend and a backend policy (one with a maintenance window).
    let policies: Vec<PDBPolicy> = (0..10)
        .flat_map(|t| {
            let ns = format!("team-{t}");
            [
                policy(
                    &ns,
                    "frontend",
                    json!({"availabilityClass": "high-availability", "workloadSelector": {"matchLabels": {"tier": "frontend"}}}),
                ),
                policy(
                    &ns,
                    "backend",
                    json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"tier": "backend"}},
                           "maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "UTC", "daysOfWeek": [0, 6]}]}),
                ),
            ]
        })
        .collect();
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    let now: Timestamp = "2026-11-30T12:00:00Z".parse().expect("valid timestamp");
    let mut group = c.benchmark_group("desired");
    group.throughput(Throughput::Elements(WORKLOADS as u64));
    group.bench_function("desired_pdb_for_workload/1k_deployments_20_policies", |b| {
        b.iter(|| {
            for w in &workloads {
                black_box(desired_pdb_for_workload(w, &p, now));
            }
        })
    });
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
    targets = clamp, gangs, desired
}
criterion_main!(benches);
