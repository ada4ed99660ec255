//! The eviction path of a Deployment return: the victims are outranked by other pods (see
//! the module above), so they are evicted rather than scaled away, and the ReplicaSet's
//! replacements for them are taken back only where that cannot take a pod nobody named.

use std::collections::HashSet;

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use orb_core::provider::MachineFailure;

use super::super::{EvictionOutcome, HandlerCx, MAX_IN_FLIGHT, Victims, evict_pod, request_pods};
use super::{ScaleOnce, change_replicas, mark_victims};
use crate::error::K8sError;
use crate::provider_data::RequestRecord;
use crate::release_plan::{PodRank, replacements_to_scale_away};

/// The victims outranked by other pods: every eviction is dry-run first (a PDB that says no
/// refuses the return before anything changes), then the victims are evicted. Replicas are
/// not lowered: the ReplicaSet would act on the lower count by its own ranking, before or
/// after the evictions land, and remove an unnamed Pending or not-Ready pod (a replacement it
/// made for a victim becomes Ready within a second, and then ranks after those too).
pub(super) async fn evict_victims(
    cx: &HandlerCx<'_>,
    record: &RequestRecord,
    name: &str,
    victims: &Victims,
    present: Vec<String>,
) -> Result<(Vec<String>, Vec<String>, Vec<MachineFailure>), K8sError> {
    let namespace = &record.namespace;
    let uid = |v: &str| victims.uids.get(v).map(String::as_str);
    let mut blocked = Vec::new();
    let mut gone = Vec::new();
    let mut going = Vec::new();
    for victim in &present {
        match evict_pod(cx.client, namespace, victim, uid(victim), true).await? {
            EvictionOutcome::Evicted => going.push(victim.clone()),
            EvictionOutcome::Gone => gone.push(victim.clone()),
            EvictionOutcome::Blocked(why) => blocked.push(format!("{victim}: {why}")),
        }
    }
    if !blocked.is_empty() {
        return Err(K8sError::Refused(format!(
            "Deployment {name} cannot give back these pods now: a PodDisruptionBudget allows no \
             disruption ({}). Nothing was changed; retry when the budget allows it.",
            blocked.join("; ")
        )));
    }
    let outcomes: Vec<(String, Result<EvictionOutcome, K8sError>)> = stream::iter(going)
        .map(|victim| async move {
            let outcome = evict_pod(cx.client, namespace, &victim, uid(&victim), false).await;
            (victim, outcome)
        })
        .buffer_unordered(MAX_IN_FLIGHT)
        .collect()
        .await;
    let mut evicted = Vec::new();
    let mut failed = Vec::new();
    for (victim, outcome) in outcomes {
        match outcome {
            Ok(EvictionOutcome::Evicted) => evicted.push(victim),
            Ok(EvictionOutcome::Gone) => gone.push(victim),
            Ok(EvictionOutcome::Blocked(why)) => failed.push(MachineFailure {
                machine_id: victim,
                reason: format!("a PodDisruptionBudget refused the eviction: {why}"),
            }),
            Err(e) => failed.push(MachineFailure {
                machine_id: victim,
                reason: e.to_string(),
            }),
        }
    }
    evicted.sort();
    gone.sort();
    Ok((evicted, gone, failed))
}

/// How long a return that evicted waits for the ReplicaSet to replace its victims and for
/// the scheduler to place or refuse the replacements, before it leaves them as they are.
/// (The recorder tests script a pod list that never changes: they wait a moment only.)
const REPLACEMENT_WAIT: std::time::Duration =
    std::time::Duration::from_millis(if cfg!(test) { 500 } else { 10_000 });

/// Whether the scheduler has found no room for the pod (`PodScheduled=False, Unschedulable`).
fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// After an eviction: takes back the replacements the ReplicaSet made for the `evicted`
/// victims, marked and by a scale-down, where that cannot take a pod nobody named
/// ([`replacements_to_scale_away`]); `seen` are the pods before the evictions. Returns the
/// replacements scaled away; the others stay and go with the Deployment.
pub(super) async fn scale_away_replacements(
    cx: &HandlerCx<'_>,
    record: &RequestRecord,
    name: &str,
    victims: &Victims,
    seen: &HashSet<String>,
    evicted: usize,
) -> Result<Vec<String>, K8sError> {
    if evicted == 0 {
        return Ok(Vec::new());
    }
    let deadline = tokio::time::Instant::now() + REPLACEMENT_WAIT;
    let (replacements, unnamed) = loop {
        let pods = request_pods::<Pod>(cx.client, record).await?;
        let mut replacements = Vec::new();
        let mut unnamed = Vec::new();
        for pod in &pods {
            let Some(rank) = PodRank::of(pod) else {
                continue;
            };
            if !seen.contains(&rank.name) {
                replacements.push((rank, unschedulable(pod)));
            } else if !victims.names.contains(&rank.name) {
                unnamed.push(rank);
            }
        }
        let placed = replacements
            .iter()
            .all(|(r, no_room)| r.scheduled || *no_room);
        if (replacements.len() >= evicted && placed) || tokio::time::Instant::now() >= deadline {
            break (replacements, unnamed);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let safe: Vec<String> = replacements_to_scale_away(&replacements, &unnamed)
        .into_iter()
        .take(evicted)
        .collect();
    if safe.is_empty() {
        return Ok(safe);
    }
    let pods_api: Api<Pod> = Api::namespaced(cx.client.clone(), &record.namespace);
    let (marked, _, _) = mark_victims(&pods_api, &safe).await;
    if !marked.is_empty() {
        let api: Api<Deployment> = Api::namespaced(cx.client.clone(), &record.namespace);
        let once = ScaleOnce::new(record, victims, "");
        change_replicas(&api, name, -(marked.len() as i64), once.as_ref()).await?;
    }
    Ok(marked)
}
