//! `pdb-operator explain <kind>/<name> -n <ns>`: reads the live object, the policies and (for a
//! Workload) its PodGroups and pods, runs the controller's decision and prints it with the
//! same table as `plan`, followed by the PDB that exists in the cluster now.

use std::fmt::Write as _;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::Workload;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::controller::apps::decide;
use crate::controller::gang::{GangObjects, decide_gang, leader_worker_set_facts};
use crate::controller::lws::{decide_lws, lws_pod_labels, lws_resource, lws_view};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{Decision, ViewError, WorkloadView};
use crate::gang_decision::{gang_summary, leader_worker_set_names};
use crate::gang_record::GangRecord;
use crate::pdb::{find_pdb_conflict, is_owned_by, pdb_name};
use crate::plan::render_decision;
use crate::workload_api::GangWorkloadView;

/// Why `explain` could not explain.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(
        "target {0:?} is not <kind>/<name>; use e.g. deployment/web, statefulset/db, leaderworkerset/vllm or workload/trainer"
    )]
    BadTarget(String),
    #[error(
        "kind {0:?} is not managed; use deployment, statefulset, leaderworkerset or workload (short forms deploy, sts, lws)"
    )]
    UnknownKind(String),
    #[error("{kind} {name} not found in namespace {namespace}; check the name and -n")]
    NotFound {
        kind: &'static str,
        name: String,
        namespace: String,
    },
    #[error("reading from the cluster failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    View(#[from] ViewError),
}

/// Parsed `<kind>/<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    Deployment,
    StatefulSet,
    LeaderWorkerSet,
    Workload,
}

/// Parses `deployment/web` (also `deploy`, `sts`, `lws`, plural and `Kind.group` forms).
pub fn parse_target(target: &str) -> Result<(TargetKind, String), ExplainError> {
    let (kind, name) = target
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| ExplainError::BadTarget(target.to_string()))?;
    let base = kind.split('.').next().unwrap_or(kind).to_ascii_lowercase();
    let k = match base.as_str() {
        "deployment" | "deployments" | "deploy" => TargetKind::Deployment,
        "statefulset" | "statefulsets" | "sts" => TargetKind::StatefulSet,
        "leaderworkerset" | "leaderworkersets" | "lws" => TargetKind::LeaderWorkerSet,
        "workload" | "workloads" => TargetKind::Workload,
        _ => return Err(ExplainError::UnknownKind(kind.to_string())),
    };
    Ok((k, name.to_string()))
}

async fn get<K>(api: Api<K>, kind: &'static str, name: &str, ns: &str) -> Result<K, ExplainError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await?
        .ok_or_else(|| ExplainError::NotFound {
            kind,
            name: name.to_string(),
            namespace: ns.to_string(),
        })
}

/// Explains the live decision for `target` in `namespace`.
pub async fn explain(
    client: Client,
    target: &str,
    namespace: &str,
) -> Result<String, ExplainError> {
    let (kind, name) = parse_target(target)?;
    let policies = (
        Api::<PDBPolicy>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items,
        Api::<ClusterPDBPolicy>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items,
    );
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Explain at {} ({} policies in {namespace}, {} cluster policies)",
        jiff::Timestamp::now(),
        policies.0.len(),
        policies.1.len()
    );
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let (decision, uid, pod_labels) = match kind {
        TargetKind::Deployment => {
            let d: Deployment = get(
                Api::namespaced(client.clone(), namespace),
                "Deployment",
                &name,
                namespace,
            )
            .await?;
            let v = WorkloadView::from_deployment(&d)?;
            let _ = writeln!(
                out,
                "\nDeployment {namespace}/{name} (replicas {})",
                v.replicas.unwrap_or(1)
            );
            let d = decide(&v, &policies, false);
            (d, v.uid, vec![v.pod_labels])
        }
        TargetKind::StatefulSet => {
            let s: StatefulSet = get(
                Api::namespaced(client.clone(), namespace),
                "StatefulSet",
                &name,
                namespace,
            )
            .await?;
            let v = WorkloadView::from_stateful_set(&s)?;
            let _ = writeln!(
                out,
                "\nStatefulSet {namespace}/{name} (replicas {})",
                v.replicas.unwrap_or(1)
            );
            let d = decide(&v, &policies, false);
            (d, v.uid, vec![v.pod_labels])
        }
        TargetKind::LeaderWorkerSet => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &lws_resource());
            let o = get(api, "LeaderWorkerSet", &name, namespace).await?;
            let v = lws_view(&o)?;
            let _ = writeln!(
                out,
                "\nLeaderWorkerSet {namespace}/{name} ({} groups of {})",
                v.replicas.unwrap_or(1),
                v.size.unwrap_or(1)
            );
            let d = decide_lws(&v, &policies, false);
            (d, v.uid, vec![lws_pod_labels(&name)])
        }
        TargetKind::Workload => {
            let w: Workload = get(
                Api::namespaced(client.clone(), namespace),
                "Workload",
                &name,
                namespace,
            )
            .await?;
            let v = GangWorkloadView::from_workload(&w)?;
            let objects = GangObjects::list(&client, namespace).await?;
            let record = pdbs
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pdb_name(&name).as_str()))
                .filter(|p| is_owned_by(p, &v.uid))
                .map(GangRecord::from_pdb);
            let names = leader_worker_set_names(&v, &objects.groups, &objects.pods);
            let lws = leader_worker_set_facts(&client, namespace, names, &pdbs).await?;
            let _ = writeln!(
                out,
                "\nWorkload {namespace}/{name} ({})",
                gang_summary(&v, &objects.groups, &objects.pods)
            );
            let (d, members) = decide_gang(&v, &objects, record, lws, &policies, false);
            (d, v.uid, members)
        }
    };
    render_decision(&mut out, &decision);
    // What the controller checks before writing: another PDB over the same pods wins.
    if matches!(decision, Decision::Apply(_))
        && let Some(conflict) = find_pdb_conflict(&uid, &pdb_name(&name), &pod_labels, &pdbs)
    {
        let _ = writeln!(
            out,
            "\nPDB conflict, so the operator keeps no PDB for it: {}",
            conflict.note.message
        );
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, namespace);
    let pdb = pdb_name(&name);
    match pdbs.get_opt(&pdb).await? {
        None => {
            let _ = writeln!(out, "\nIn the cluster: no PodDisruptionBudget {pdb}");
        }
        Some(p) => {
            let spec = p.spec.unwrap_or_default();
            let st = p.status.unwrap_or_default();
            let show = |v: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
                v.map(|v| serde_json::to_string(&v).unwrap_or_default())
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
                out,
                "\nIn the cluster: PodDisruptionBudget {pdb}: minAvailable {}, maxUnavailable {}, \
currentHealthy {}, desiredHealthy {}, disruptionsAllowed {}",
                show(spec.min_available),
                show(spec.max_unavailable),
                st.current_healthy.unwrap_or(0),
                st.desired_healthy.unwrap_or(0),
                st.disruptions_allowed.unwrap_or(0)
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::deployment("deployment/web", TargetKind::Deployment, "web")]
    #[case::short("deploy/web", TargetKind::Deployment, "web")]
    #[case::sts("sts/db", TargetKind::StatefulSet, "db")]
    #[case::lws(
        "leaderworkerset.leaderworkerset.x-k8s.io/vllm",
        TargetKind::LeaderWorkerSet,
        "vllm"
    )]
    #[case::workload("Workload/trainer", TargetKind::Workload, "trainer")]
    fn targets_parse(#[case] input: &str, #[case] kind: TargetKind, #[case] name: &str) {
        assert_eq!(parse_target(input).unwrap(), (kind, name.to_string()));
    }

    #[rstest]
    #[case::no_slash("web")]
    #[case::empty_name("deployment/")]
    #[case::nested("deployment/a/b")]
    fn bad_targets_say_the_form(#[case] input: &str) {
        let e = parse_target(input).unwrap_err().to_string();
        assert!(e.contains("is not <kind>/<name>"), "{e}");
    }

    #[test]
    fn unmanaged_kind_lists_the_managed_ones() {
        let e = parse_target("daemonset/x").unwrap_err().to_string();
        assert!(
            e.contains("use deployment, statefulset, leaderworkerset or workload"),
            "{e}"
        );
    }
}
