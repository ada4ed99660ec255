//! Node drains as `kubectl drain` does them: cordon, evict every pod through the Eviction API
//! one after the other, retrying a refusal (429) every second, uncordon. Each answer is counted,
//! and each allowed eviction of a gang pod is checked against the state just before it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::world::{GROUP, Shape, UNIT, World, live};
use super::{Rng, Soak};
use crate::common::is_ready;

/// How long one drain may wait for the budgets (kubectl drain --timeout). Longer than the
/// 2 minutes the disruption controller keeps an evicted pod's name in the PDB's
/// `status.disruptedPods`: a StatefulSet recreates the pod under the same name, and the
/// replacement does not count as healthy until that entry expires, so a PDB that allows one
/// disruption holds the next eviction of that StatefulSet for up to 2 minutes (seen at 60 s:
/// three Ready pods, `currentHealthy` 2, `disruptedPods` naming the recreated `-0`).
const DRAIN_WITHIN: Duration = Duration::from_secs(150);
/// A group emptied this recently may still be counted healthy by the disruption controller,
/// which updates the PDB's status a moment after the pods go (a PDB counts pods, not groups).
const RACE: Duration = Duration::from_secs(3);

pub async fn drain_repeatedly(soak: Arc<Soak>, nodes: Vec<String>, mut rng: Rng) {
    while !soak.stopping() {
        let node = &nodes[rng.range(0, nodes.len() as u64 - 1) as usize];
        drain(&soak, node).await;
        tokio::time::sleep(Duration::from_millis(rng.range(1000, 5000))).await;
    }
}

async fn cordon(soak: &Soak, node: &str, on: bool) {
    let nodes: Api<Node> = Api::all(soak.admin.clone());
    let patch = Patch::Merge(serde_json::json!({"spec": {"unschedulable": on}}));
    if let Err(e) = nodes.patch(node, &PatchParams::default(), &patch).await {
        soak.note(format!("cordon={on} {node}: {e}"));
    }
}

async fn drain(soak: &Soak, node: &str) {
    cordon(soak, node, true).await;
    let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let on_node = match pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            soak.note(format!("listing the pods of {node}: {e}"));
            cordon(soak, node, false).await;
            return;
        }
    };
    soak.event("drain", format!("{node}: {} pods", on_node.len()));
    let (started, since) = (Instant::now(), jiff::Timestamp::now());
    let mut blocked = Vec::new();
    let mut abandoned = false;
    'pods: for pod in on_node.iter().filter(|p| live(p)) {
        let name = pod.name_any();
        loop {
            if soak.stopping() {
                abandoned = true;
                break 'pods;
            }
            let before = soak.world.lock().await.clone();
            let (Ok(all), Ok(budgets)) = (
                pods.list(&ListParams::default()).await,
                pdbs.list(&ListParams::default()).await,
            ) else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let code = match pods.evict(&name, &EvictParams::default()).await {
                Ok(_) => 200,
                Err(kube::Error::Api(s)) => s.code,
                Err(e) => {
                    soak.note(format!("evicting {name}: {e}"));
                    0
                }
            };
            *soak.answers.lock().unwrap().entry(code).or_default() += 1;
            match code {
                200 => {
                    // A replacement may turn Ready between the list and the eviction: a group
                    // is short only if it was short both before and after.
                    let after = pods.list(&ListParams::default()).await;
                    let after = after.map(|l| l.items).unwrap_or_default();
                    let seen = [all.items.as_slice(), after.as_slice()];
                    check_eviction(soak, &before, seen, &budgets.items, pod);
                    break;
                }
                404 => break,
                500 => soak.answered_500(pod),
                429 => {}
                other => soak.note(format!("evicting {name}: answered {other}")),
            }
            if started.elapsed() > DRAIN_WITHIN {
                blocked.push(pod.clone());
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    for pod in &blocked {
        warned_about(soak, pod, since).await;
    }
    cordon(soak, node, false).await;
    let outcome = if abandoned {
        "abandoned at the end"
    } else if blocked.is_empty() {
        "finished"
    } else {
        "blocked"
    };
    *soak.drains.lock().unwrap().entry(outcome).or_default() += 1;
    soak.note(format!(
        "drain of {node} {outcome} after {:.1}s",
        started.elapsed().as_secs_f64()
    ));
}

/// The Ready live pods of each group, from one list.
fn ready_by_group(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut ready = BTreeMap::new();
    for p in pods.iter().filter(|p| live(p) && is_ready(p)) {
        if let Some(g) = p.labels().get(GROUP) {
            *ready.entry(g.clone()).or_default() += 1;
        }
    }
    ready
}

/// The gang invariants of one allowed eviction of `pod`, against the world before it and the
/// pods seen just before and just after it: an all-mode gang never loses a pod while another of
/// its groups is short, a single-mode group never goes below minCount.
fn check_eviction(
    soak: &Soak,
    before: &World,
    seen: [&[Pod]; 2],
    pdbs: &[PodDisruptionBudget],
    pod: &Pod,
) {
    let labels = pod.labels();
    let (Some(unit), Some(group)) = (labels.get(UNIT), labels.get(GROUP)) else {
        return;
    };
    soak.mark_disturbed(group);
    let Some(u) = before.units.get(unit) else {
        return;
    };
    if u.groups
        .get(group)
        .is_none_or(|g| g.created.elapsed() < super::FORMING)
    {
        return;
    }
    let ready = seen.map(ready_by_group);
    // The evicted pod counts before, not after: the most Ready of the two lists.
    let ready_in = |g: &str| {
        let n = |i: usize| ready[i].get(g).copied().unwrap_or(0);
        let before = n(0).saturating_sub(usize::from(g == group));
        before.max(n(1))
    };
    let context = || {
        let groups: Vec<String> = u
            .groups
            .iter()
            .map(|(n, g)| format!("{n} {}/{} min {}", ready_in(n), g.size, g.min_count))
            .collect();
        format!(
            " [Ready/size: {}] [{}]",
            groups.join(", "),
            super::invariants::describe_pdbs_over(pdbs, pod)
        )
    };
    soak.checked();
    match u.shape {
        Shape::Gang { all: true } => {
            for (other, g) in u.groups.iter().filter(|(o, _)| *o != group) {
                if ready_in(other) >= g.size || g.created.elapsed() < super::FORMING {
                    continue;
                }
                let what = format!(
                    "{} evicted from all-mode gang {unit} while {other} had {} of {} Ready{}",
                    pod.name_any(),
                    ready_in(other),
                    g.size,
                    context()
                );
                if soak.disturbed_within(other, RACE) {
                    soak.noted_race(what);
                } else {
                    soak.violate(&format!("all-mode:{unit}"), what);
                }
            }
        }
        Shape::Gang { all: false } => {
            if let Some(g) = u.groups.get(group)
                && (ready_in(group) as i32) < g.min_count
            {
                let what = format!(
                    "{} evicted from {group}, leaving {} Ready: below minCount {}{}",
                    pod.name_any(),
                    ready_in(group),
                    g.min_count,
                    context()
                );
                soak.violate(&format!("single-mode:{group}"), what);
            }
        }
        _ => {}
    }
}

/// A drain left `pod` behind: a Warning since the drain began must name it (regarding the pod
/// or its workload, with a reason), else it is a violation.
async fn warned_about(soak: &Soak, pod: &Pod, since: jiff::Timestamp) {
    let name = pod.name_any();
    let unit = pod.labels().get(UNIT).cloned().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let list = events.list(&ListParams::default()).await.map(|l| l.items);
    let warning = list.unwrap_or_default().into_iter().find(|e| {
        let seen = e
            .series
            .as_ref()
            .map(|s| s.last_observed_time.0)
            .or(e.event_time.as_ref().map(|t| t.0));
        let about = e.regarding.as_ref().and_then(|r| r.name.as_deref());
        e.type_.as_deref() == Some("Warning")
            && seen.is_none_or(|t| t >= since)
            && (about == Some(name.as_str())
                || about == Some(unit.as_str())
                || e.note.as_deref().is_some_and(|n| n.contains(&name)))
    });
    soak.checked();
    match warning {
        Some(e) => soak.note(format!(
            "{name} not drained within {DRAIN_WITHIN:?}; Warning {}: {}",
            e.reason.unwrap_or_default(),
            e.note.unwrap_or_default()
        )),
        None => soak.violate(
            &format!("drain-blocked:{unit}"),
            format!(
                "{name} not evicted within {DRAIN_WITHIN:?} and no Warning names it or {unit}{}",
                blocked_state(soak, pod).await
            ),
        ),
    }
}

/// What held a drain: the PDBs over the pod and the pods of its workload (Ready, node).
async fn blocked_state(soak: &Soak, pod: &Pod) -> String {
    let unit = pod.labels().get(UNIT).cloned().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let lp = ListParams::default().labels(&format!("{UNIT}={unit}"));
    let (Ok(p), Ok(b)) = (
        pods.list(&lp).await,
        pdbs.list(&ListParams::default()).await,
    ) else {
        return String::new();
    };
    let states: Vec<String> = p
        .items
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            let gone = if p.metadata.deletion_timestamp.is_some() {
                " terminating"
            } else {
                ""
            };
            format!(
                "{} {phase:?} ready={} {node:?}{gone}",
                p.name_any(),
                is_ready(p)
            )
        })
        .collect();
    format!(
        " [pods: {}] [{}]",
        states.join(", "),
        super::invariants::describe_pdbs_over(&b.items, pod)
    )
}
