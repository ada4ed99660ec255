//! `pdb-operator plan`: runs the same desired-state functions as the controller over objects
//! read from a YAML file, and prints, per workload, the policy chosen, the enforcement steps
//! and the arithmetic — no cluster needed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::budget::Step;
use crate::controller::lws::lws_pod_labels;
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{
    Decision, LeaderWorkerSetView, Policies, WorkloadView, desired_pdb_for_leader_worker_set,
    desired_pdb_for_workload,
};
use crate::gang_decision::{GangFacts, LeaderWorkerSetFact, gang_summary, leader_worker_set_names};
use crate::pdb::{pdb_name, pdb_selects};
use crate::resolve::WorkloadMeta;
use crate::validation::{PolicyScope, validate_policy_spec};
use crate::workload_api::{
    GangShape, GangWorkloadView, PodGroupView, PodView, classify_workload, desired_pdb_for_gang,
    gang_members,
};

/// Namespace assumed for objects that do not name one (as kubectl would with no context).
pub const DEFAULT_NAMESPACE: &str = "default";

/// A document that cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "cannot read the YAML stream: {0}; each document must be a Kubernetes object separated by `---`"
    )]
    Yaml(#[from] serde_saphyr::Error),
    #[error("document {index} is not a Kubernetes object (it needs `kind` and `metadata.name`)")]
    NotAnObject { index: usize },
    #[error(
        "document {index} ({kind} {name}) is malformed: {reason}; compare it with `kubectl explain {kind_lower}`"
    )]
    Malformed {
        index: usize,
        kind: String,
        name: String,
        kind_lower: String,
        reason: String,
    },
}

#[derive(Default)]
struct Objects {
    policies: Vec<PDBPolicy>,
    cluster_policies: Vec<ClusterPDBPolicy>,
    deployments: Vec<Deployment>,
    stateful_sets: Vec<StatefulSet>,
    leader_worker_sets: Vec<(usize, Value)>,
    workloads: Vec<Workload>,
    pod_groups: Vec<PodGroup>,
    pods: Vec<Pod>,
    ignored: Vec<String>,
}

fn typed<T: DeserializeOwned>(
    index: usize,
    kind: &str,
    name: &str,
    mut doc: Value,
) -> Result<T, PlanError> {
    // Offline files rarely carry namespace or uid; fill them the way the API server would.
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        let namespaced = kind != "ClusterPDBPolicy";
        if namespaced && !meta.contains_key("namespace") {
            meta.insert("namespace".into(), DEFAULT_NAMESPACE.into());
        }
        if !meta.contains_key("uid") {
            meta.insert(
                "uid".into(),
                format!("offline-{}-{name}", kind.to_lowercase()).into(),
            );
        }
    }
    serde_json::from_value(doc).map_err(|e| PlanError::Malformed {
        index,
        kind: kind.to_string(),
        name: name.to_string(),
        kind_lower: kind.to_lowercase(),
        reason: e.to_string(),
    })
}

fn read_objects(yaml: &str) -> Result<Objects, PlanError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)?;
    let mut o = Objects::default();
    for (i, doc) in docs.into_iter().enumerate().filter(|(_, d)| !d.is_null()) {
        let index = i + 1;
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(PlanError::NotAnObject { index })?
            .to_string();
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or(PlanError::NotAnObject { index })?
            .to_string();
        match kind.as_str() {
            "PDBPolicy" => o.policies.push(typed(index, &kind, &name, doc)?),
            "ClusterPDBPolicy" => o.cluster_policies.push(typed(index, &kind, &name, doc)?),
            "Deployment" => o.deployments.push(typed(index, &kind, &name, doc)?),
            "StatefulSet" => o.stateful_sets.push(typed(index, &kind, &name, doc)?),
            "LeaderWorkerSet" => o
                .leader_worker_sets
                .push((index, typed::<Value>(index, &kind, &name, doc)?)),
            "Workload" => o.workloads.push(typed(index, &kind, &name, doc)?),
            "PodGroup" => o.pod_groups.push(typed(index, &kind, &name, doc)?),
            "Pod" => o.pods.push(typed(index, &kind, &name, doc)?),
            _ => o.ignored.push(format!("{kind}/{name}")),
        }
    }
    Ok(o)
}

fn table(out: &mut String, steps: &[Step]) {
    let width = steps
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(out, "  | {:<width$} | Value", "Step");
    let _ = writeln!(out, "  |-{}-|------", "-".repeat(width));
    for s in steps {
        let _ = writeln!(out, "  | {:<width$} | {}", s.label, s.value);
    }
}

/// Renders a decision: the steps table, the PDB (or why there is none) and its events.
/// Shared with the live `explain`.
pub fn render_decision(out: &mut String, d: &Decision) {
    match d {
        Decision::Apply(p) => {
            table(out, &p.steps);
            let spec = p.pdb.spec.clone().unwrap_or_default();
            let value = |v: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
                v.map(|v| serde_json::to_string(&v).unwrap_or_default())
            };
            let budget = match (value(spec.min_available), value(spec.max_unavailable)) {
                (Some(m), _) => format!("minAvailable: {m}"),
                (None, Some(m)) => format!("maxUnavailable: {m}"),
                (None, None) => "no budget".to_string(),
            };
            let selector = serde_json::to_string(&spec.selector).unwrap_or_default();
            let name = p.pdb.metadata.name.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "  => PodDisruptionBudget {name}: {budget}, selector {selector}"
            );
            if let Some(e) = spec.unhealthy_pod_eviction_policy {
                let _ = writeln!(out, "     unhealthyPodEvictionPolicy: {e}");
            }
            if p.only_if_exists {
                let _ = writeln!(
                    out,
                    "     maintenance window open: an existing PDB is relaxed, none is created"
                );
            }
            for e in &p.events {
                let _ = writeln!(
                    out,
                    "     event {} {}: {}",
                    e.type_.as_str(),
                    e.reason,
                    e.message
                );
            }
        }
        Decision::NoPdb(n) => {
            table(out, &n.steps);
            let _ = writeln!(out, "  => no PodDisruptionBudget ({})", n.cause);
            for e in n.event.iter().chain(&n.events) {
                let _ = writeln!(
                    out,
                    "     event {} {}: {}",
                    e.type_.as_str(),
                    e.reason,
                    e.message
                );
            }
            if let Some(r) = n.retry_after {
                let _ = writeln!(out, "     retried every {}s", r.as_secs());
            }
        }
    }
}

/// Plans every workload in `yaml` at `now` and renders the report.
pub fn plan_report(yaml: &str, now: Timestamp) -> Result<String, PlanError> {
    let o = read_objects(yaml)?;
    let policies = Policies {
        namespaced: &o.policies,
        cluster: &o.cluster_policies,
        legacy_cross_namespace: false,
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Plan at {now} ({} policies, {} cluster policies)",
        o.policies.len(),
        o.cluster_policies.len()
    );
    for p in &o.policies {
        let scope = PolicyScope::Namespaced(p.metadata.namespace.clone().unwrap_or_default());
        for e in validate_policy_spec(&p.spec, &scope).errors {
            let _ = writeln!(
                out,
                "! PDBPolicy {} is invalid and takes no part: {e}",
                p.metadata.name.as_deref().unwrap_or("")
            );
        }
    }
    for p in &o.cluster_policies {
        for e in validate_policy_spec(&p.spec.0, &PolicyScope::Cluster).errors {
            let _ = writeln!(
                out,
                "! ClusterPDBPolicy {} is invalid and takes no part: {e}",
                p.metadata.name.as_deref().unwrap_or("")
            );
        }
    }
    let mut planned: Vec<Planned> = Vec::new();
    let views = o
        .deployments
        .iter()
        .map(WorkloadView::from_deployment)
        .chain(o.stateful_sets.iter().map(WorkloadView::from_stateful_set));
    for v in views {
        let v = v.map_err(|e| PlanError::Malformed {
            index: 0,
            kind: "workload".into(),
            name: String::new(),
            kind_lower: "deployment".into(),
            reason: e.to_string(),
        })?;
        let _ = writeln!(
            out,
            "\n{} {}/{} (replicas {})",
            v.kind.kind(),
            v.meta.namespace,
            v.meta.name,
            v.replicas.unwrap_or(1)
        );
        let decision = desired_pdb_for_workload(&v, &policies, now);
        render_decision(&mut out, &decision);
        let who = format!("{} {}/{}", v.kind.kind(), v.meta.namespace, v.meta.name);
        planned.push((who, decision, vec![v.pod_labels.clone()]));
    }
    // (namespace, name) of each LeaderWorkerSet in the file → whether it gets a PDB, for the
    // Workloads whose pods it owns.
    let mut lws_pdbs = std::collections::BTreeMap::new();
    for (index, lws) in &o.leader_worker_sets {
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(lws["metadata"].clone()).unwrap_or_default();
        let int = |ptr: &str| lws.pointer(ptr).and_then(Value::as_i64).map(|v| v as i32);
        let view = LeaderWorkerSetView {
            meta: WorkloadMeta {
                namespace: meta
                    .namespace
                    .clone()
                    .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
                name: meta.name.clone().unwrap_or_default(),
                labels: meta.labels.clone().unwrap_or_default(),
                annotations: meta.annotations.clone().unwrap_or_default(),
            },
            uid: meta
                .uid
                .clone()
                .unwrap_or_else(|| format!("offline-lws-{index}")),
            replicas: int("/spec/replicas"),
            size: int("/spec/leaderWorkerTemplate/size"),
            terminating: false,
        };
        let _ = writeln!(
            out,
            "\nLeaderWorkerSet {}/{} ({} groups of {})",
            view.meta.namespace,
            view.meta.name,
            view.replicas.unwrap_or(1),
            view.size.unwrap_or(1)
        );
        let decision = desired_pdb_for_leader_worker_set(&view, &policies, now);
        let pdb = matches!(decision, Decision::Apply(_)).then(|| pdb_name(&view.meta.name));
        lws_pdbs.insert((view.meta.namespace.clone(), view.meta.name.clone()), pdb);
        render_decision(&mut out, &decision);
        let who = format!("LeaderWorkerSet {}/{}", view.meta.namespace, view.meta.name);
        planned.push((who, decision, vec![lws_pod_labels(&view.meta.name)]));
    }
    for w in &o.workloads {
        let view = GangWorkloadView::from_workload(w).map_err(|e| PlanError::Malformed {
            index: 0,
            kind: "Workload".into(),
            name: w.metadata.name.clone().unwrap_or_default(),
            kind_lower: "workload".into(),
            reason: e.to_string(),
        })?;
        let ns = view.meta.namespace.clone();
        let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.namespace.as_deref() == Some(ns.as_str())
        };
        let groups: Vec<PodGroupView> = o
            .pod_groups
            .iter()
            .filter(|g| in_ns(&g.metadata))
            .map(PodGroupView::from_pod_group)
            .collect();
        let pods: Vec<PodView> = o
            .pods
            .iter()
            .filter(|p| in_ns(&p.metadata))
            .map(PodView::from_pod)
            .collect();
        let _ = writeln!(
            out,
            "\nWorkload {}/{} ({})",
            ns,
            view.meta.name,
            gang_summary(&view, &groups, &pods)
        );
        let leader_worker_sets = leader_worker_set_names(&view, &groups, &pods)
            .into_iter()
            .map(|n| {
                let fact = match lws_pdbs.get(&(ns.clone(), n.clone())) {
                    Some(pdb) => LeaderWorkerSetFact::Present { pdb: pdb.clone() },
                    None => LeaderWorkerSetFact::Absent,
                };
                (n, fact)
            })
            .collect();
        let facts = GangFacts {
            pod_groups: &groups,
            pods: &pods,
            record: None,
            leader_worker_sets,
        };
        let decision = desired_pdb_for_gang(&view, &facts, &policies, now);
        render_decision(&mut out, &decision);
        let members = match classify_workload(&view.spec) {
            GangShape::Gang { template, .. } => {
                let (_, gang) = gang_members(&view.meta.name, &template, &groups, &pods);
                gang.live.iter().map(|m| m.labels.clone()).collect()
            }
            _ => Vec::new(),
        };
        planned.push((
            format!("Workload {ns}/{}", view.meta.name),
            decision,
            members,
        ));
    }
    for (a, b) in overlaps(&planned) {
        let _ = writeln!(
            out,
            "\n! {a} and {b} would both get a PDB over the same pods; two PDBs over one pod make \
every eviction of it fail, so the operator keeps only the one written first and the other posts \
PDBConflict"
        );
    }
    if !o.ignored.is_empty() {
        let _ = writeln!(
            out,
            "\nIgnored (not a managed kind): {}",
            o.ignored.join(", ")
        );
    }
    Ok(out)
}

/// One workload's decision (`Kind ns/name`, decision, its pods' labels), for the overlap check.
type Planned = (String, Decision, Vec<BTreeMap<String, String>>);

/// Pairs of planned PDBs that would select a pod of each other's workload.
fn overlaps(planned: &[Planned]) -> Vec<(&str, &str)> {
    let pdb = |d: &Decision| match d {
        Decision::Apply(want) => Some(want.pdb.clone()),
        Decision::NoPdb(_) => None,
    };
    let mut out = Vec::new();
    for (i, (a, da, pods_a)) in planned.iter().enumerate() {
        for (b, db, pods_b) in &planned[i + 1..] {
            let (Some(pa), Some(pb)) = (pdb(da), pdb(db)) else {
                continue;
            };
            let same_ns = pa.metadata.namespace == pb.metadata.namespace;
            let covers = |p: &PodDisruptionBudget, pods: &[BTreeMap<String, String>]| {
                pods.iter().any(|l| pdb_selects(p, l))
            };
            if same_ns && (covers(&pa, pods_b) || covers(&pb, pods_a)) {
                out.push((a.as_str(), b.as_str()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../tests/data/seed-003-trainer.yaml");

    #[test]
    fn seed_worked_example_table() {
        let report = plan_report(SEED, "2026-06-24T12:00:00Z".parse().unwrap()).unwrap();
        insta::assert_snapshot!("plan_seed_003", report);
        assert!(
            report.contains("=> PodDisruptionBudget trainer-pdb: minAvailable: 6"),
            "{report}"
        );
    }

    #[test]
    fn deployments_policies_and_windows() {
        let yaml = include_str!("../tests/data/deployments-and-policies.yaml");
        let report = plan_report(yaml, "2026-06-24T03:00:00Z".parse().unwrap()).unwrap();
        insta::assert_snapshot!("plan_deployments_and_policies", report);
    }

    #[test]
    fn malformed_document_names_index_and_kind() {
        let err = plan_report(
            "kind: Deployment\nmetadata:\n  name: a\nspec:\n  replicas: many\n",
            Timestamp::UNIX_EPOCH,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("document 1 (Deployment a)"), "{msg}");
    }

    #[test]
    fn two_workloads_over_the_same_pods_are_reported() {
        let deployment = |name: &str, app: &str| {
            format!(
                "kind: Deployment\nmetadata:\n  name: {name}\n  namespace: ns\n  uid: u-{name}\n  \
annotations:\n    pdboperator.io/availability-class: standard\nspec:\n  replicas: 2\n  \
selector:\n    matchLabels:\n      app: {app}\n  template:\n    metadata:\n      labels:\n        \
app: {app}\n"
            )
        };
        let yaml = [
            deployment("a", "x"),
            deployment("b", "x"),
            deployment("c", "z"),
        ]
        .join("---\n");
        let report = plan_report(&yaml, Timestamp::UNIX_EPOCH).unwrap();
        let warnings: Vec<&str> = report.lines().filter(|l| l.starts_with("! ")).collect();
        assert_eq!(warnings.len(), 1, "{report}");
        assert!(
            warnings[0].starts_with("! Deployment ns/a and Deployment ns/b would both get a PDB"),
            "{report}"
        );
    }

    #[test]
    fn document_without_kind_is_rejected() {
        let err = plan_report("just: data\n", Timestamp::UNIX_EPOCH).unwrap_err();
        assert!(matches!(err, PlanError::NotAnObject { index: 1 }), "{err}");
    }
}
