//! What the soak samples every second (no pod selected by two PDBs for longer than the operator
//! needs to yield; both replicas alive; their RSS every 10 s) and checks at the end (every PDB
//! of the operator has a live owner).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::Workload;
use kube::api::{DynamicObject, ListParams};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Resource, ResourceExt};
use pdb_operator::names::keys::{MANAGED_BY, OPERATOR_NAME};

use super::world::live;
use super::{Soak, YIELD};

/// Live pod → the PDBs selecting it.
fn selected_by(pdbs: &[PodDisruptionBudget], pods: &[Pod]) -> BTreeMap<String, Vec<String>> {
    let selectors: Vec<(String, Selector)> = pdbs
        .iter()
        .filter_map(|p| {
            let s = p.spec.as_ref()?.selector.clone()?;
            Some((p.name_any(), Selector::try_from(s).ok()?))
        })
        .collect();
    pods.iter()
        .filter(|p| live(p))
        .map(|p| {
            let labels = p.labels();
            let names = selectors
                .iter()
                .filter(|(_, s)| s.matches(labels))
                .map(|(n, _)| n.clone())
                .collect();
            (p.name_any(), names)
        })
        .collect()
}

/// The PDBs selecting `pod`.
pub fn pdbs_over<'a>(pdbs: &'a [PodDisruptionBudget], pod: &Pod) -> Vec<&'a PodDisruptionBudget> {
    let over = selected_by(pdbs, std::slice::from_ref(pod));
    let names = over.values().next().cloned().unwrap_or_default();
    pdbs.iter()
        .filter(|p| names.contains(&p.name_any()))
        .collect()
}

/// The PDBs over `pod` as one line: spec, status and the remembered gang sizes.
pub fn describe_pdbs_over(pdbs: &[PodDisruptionBudget], pod: &Pod) -> String {
    let lines: Vec<String> = pdbs_over(pdbs, pod)
        .into_iter()
        .map(|p| {
            let spec = p.spec.clone().unwrap_or_default();
            let st = p.status.clone().unwrap_or_default();
            let sizes = p.annotations().get(pdb_operator::names::keys::GANG_SIZES);
            format!(
                "{} minAvailable {:?} healthy {:?} desired {:?} allowed {:?} sizes {sizes:?}",
                p.name_any(),
                spec.min_available,
                st.current_healthy,
                st.desired_healthy,
                st.disruptions_allowed
            )
        })
        .collect();
    if lines.is_empty() {
        "no PDB over it".into()
    } else {
        lines.join("; ")
    }
}

pub async fn sample_every_second(soak: Arc<Soak>) {
    let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    // Overlap (pod and the PDBs over it) → when first seen.
    let mut overlaps: BTreeMap<String, Instant> = BTreeMap::new();
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick += 1;
        if tick.is_multiple_of(10) {
            let rss = soak.operators.lock().unwrap().rss();
            soak.rss.lock().unwrap().push((soak.secs() as u64, rss));
        }
        if let Some(exit) = soak.operators.lock().unwrap().exited() {
            soak.violate("operator-exit", exit);
        }
        let (Ok(p), Ok(b)) = (
            pods.list(&ListParams::default()).await,
            pdbs.list(&ListParams::default()).await,
        ) else {
            continue;
        };
        let mut now = BTreeSet::new();
        for (pod, over) in selected_by(&b.items, &p.items) {
            soak.checked();
            if over.len() < 2 {
                continue;
            }
            let key = format!("{pod} under {}", over.join(" and "));
            let first = *overlaps.entry(key.clone()).or_insert_with(|| {
                soak.note(format!("two PDBs: {key}"));
                soak.overlaps.fetch_add(1, Ordering::Relaxed);
                Instant::now()
            });
            let ms = first.elapsed().as_millis() as u64;
            soak.longest_overlap_ms.fetch_max(ms, Ordering::Relaxed);
            if first.elapsed() > YIELD && !soak.operator_gap() {
                soak.violate(
                    &format!("two-pdbs:{}", over.join("+")),
                    format!("{key} for {:.0}s", first.elapsed().as_secs_f64()),
                );
            }
            now.insert(key);
        }
        overlaps.retain(|k, _| now.contains(k));
    }
}

/// The uids of every live object a managed PDB may belong to.
async fn live_owner_uids(soak: &Soak) -> BTreeSet<String> {
    let (c, ns) = (&soak.admin, soak.ns.as_str());
    let lp = ListParams::default();
    let mut uids = BTreeSet::new();
    let mut add = |metas: Vec<kube::core::ObjectMeta>| {
        uids.extend(metas.into_iter().filter_map(|m| m.uid));
    };
    if let Ok(l) = Api::<Deployment>::namespaced(c.clone(), ns).list(&lp).await {
        add(l.items.into_iter().map(|o| o.meta().clone()).collect());
    }
    if let Ok(l) = Api::<StatefulSet>::namespaced(c.clone(), ns)
        .list(&lp)
        .await
    {
        add(l.items.into_iter().map(|o| o.meta().clone()).collect());
    }
    if let Ok(l) = Api::<Workload>::namespaced(c.clone(), ns).list(&lp).await {
        add(l.items.into_iter().map(|o| o.meta().clone()).collect());
    }
    let ar = pdb_operator::controller::lws::lws_resource();
    if let Ok(l) = Api::<DynamicObject>::namespaced_with(c.clone(), ns, &ar)
        .list(&lp)
        .await
    {
        add(l.items.into_iter().map(|o| o.metadata).collect());
    }
    uids
}

/// The operator's PDBs without a live owner (controller reference to an existing object).
async fn orphans(soak: &Soak) -> Vec<String> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let lp = ListParams::default().labels(&format!("{MANAGED_BY}={OPERATOR_NAME}"));
    let Ok(list) = pdbs.list(&lp).await else {
        return vec!["(the PDB list failed)".into()];
    };
    let uids = live_owner_uids(soak).await;
    list.items
        .iter()
        .filter(|p| {
            !p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && uids.contains(&o.uid))
        })
        .map(|p| p.name_any())
        .collect()
}

/// At the end: every PDB of the operator has a live owner, within `settle` of the last change
/// (a deleted owner's PDB goes by garbage collection).
pub async fn final_owners(soak: &Soak, settle: Duration) {
    let since = Instant::now();
    loop {
        let left = orphans(soak).await;
        soak.checked();
        if left.is_empty() {
            soak.note(format!(
                "every operator PDB has a live owner ({:.0}s after the end)",
                since.elapsed().as_secs_f64()
            ));
            return;
        }
        if since.elapsed() > settle {
            for pdb in left {
                soak.violate(
                    &format!("orphan:{pdb}"),
                    format!("PDB {pdb} of the operator has no live owner {settle:?} after the end"),
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
