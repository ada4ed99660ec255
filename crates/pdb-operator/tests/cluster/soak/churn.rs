//! The seeded changes of the soak: workloads that come, go and scale, gangs that add and remove
//! PodGroups and lower minCount, user PDBs that appear over managed pods and go, and the two
//! leader changes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::operators::Operators;
use super::world::{self, Shape, UNIT};
use super::{Rng, Soak, YIELD};

/// Ends the leader with `signal` and waits for the other replica to take the Lease.
async fn change_leader(soak: &Soak, kind: &'static str, signal: &str) {
    let Some(leader) = Operators::leader(soak).await else {
        soak.note("no leader to end".into());
        return;
    };
    soak.gap_for(Duration::from_secs(90));
    soak.operators.lock().unwrap().restart(&leader, signal);
    soak.event(kind, format!("{leader} ended ({signal}), started again"));
    match Operators::wait_leader(soak, Some(&leader)).await {
        Some((next, took)) => {
            soak.note(format!("{next} leads after {:.1}s", took.as_secs_f64()));
            soak.gap_for(YIELD);
        }
        None => soak.violate(
            "leader",
            format!("no replica took the Lease from {leader} within 60 s"),
        ),
    }
}

/// A PDB of the user's over `unit`'s pods (maxUnavailable 1).
async fn add_user_pdb(soak: &Soak, unit: &str) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": format!("user-{unit}")},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {UNIT: unit}}}}))
    .unwrap();
    soak.user_pdbs
        .lock()
        .unwrap()
        .insert(unit.to_string(), Instant::now());
    if let Err(e) = pdbs.create(&PostParams::default(), &pdb).await {
        soak.note(format!("user PDB over {unit}: {e}"));
    }
}

async fn remove_user_pdb(soak: &Soak, unit: &str) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(soak.admin.clone(), &soak.ns);
    soak.user_pdbs.lock().unwrap().remove(unit);
    let _ = pdbs
        .delete(&format!("user-{unit}"), &Default::default())
        .await;
}

/// One seeded change of the workloads every 2–5 s until `end`; the leader is SIGKILLed at a
/// third of the run and SIGTERMed at two thirds.
pub(crate) async fn churn(soak: &Soak, mut rng: Rng, end: Instant, run: Duration) {
    let mut leader_changes = [
        (run / 3, "leader-killed", "-KILL"),
        (run * 2 / 3, "leader-stopped", "-TERM"),
    ]
    .into_iter()
    .peekable();
    let mut user_until: BTreeMap<String, Instant> = BTreeMap::new();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.range(2000, 5000))).await;
        if let Some((at, kind, signal)) = leader_changes.peek().copied()
            && soak.start.elapsed() >= at
        {
            leader_changes.next();
            change_leader(soak, kind, signal).await;
            continue;
        }
        let due: Vec<String> = user_until
            .iter()
            .filter(|(_, t)| Instant::now() >= **t)
            .map(|(u, _)| u.clone())
            .collect();
        for unit in due {
            user_until.remove(&unit);
            remove_user_pdb(soak, &unit).await;
            soak.event("user-pdb-removed", unit);
        }
        let mut world = soak.world.lock().await;
        match rng.range(0, 9) {
            0 | 1 => {
                let shape =
                    [Shape::Deployment, Shape::StatefulSet, Shape::Lws][rng.range(0, 2) as usize];
                if world.count(shape) < 2 {
                    let name = world.create(soak, shape, &mut rng).await;
                    soak.event("workload-created", format!("{shape:?} {name}"));
                } else if let Some(name) = world.pick(&mut rng, |u| u.shape == shape) {
                    user_until.remove(&name);
                    soak.user_pdbs.lock().unwrap().remove(&name);
                    world.delete(soak, &name).await;
                    soak.event("workload-deleted", format!("{shape:?} {name}"));
                }
            }
            2 => {
                let all = rng.range(0, 1) == 0;
                let shape = Shape::Gang { all };
                if world.count(shape) < 2 {
                    let name = world.create(soak, shape, &mut rng).await;
                    soak.event("gang-created", format!("{name} (all: {all})"));
                } else if let Some(name) = world.pick(&mut rng, |u| u.shape == shape) {
                    user_until.remove(&name);
                    soak.user_pdbs.lock().unwrap().remove(&name);
                    world.delete(soak, &name).await;
                    soak.event("gang-deleted", name);
                }
            }
            3 => {
                let scalable =
                    |u: &world::Unit| matches!(u.shape, Shape::Deployment | Shape::StatefulSet);
                if let Some(name) = world.pick(&mut rng, scalable) {
                    let replicas = rng.range(2, 5) as i32;
                    world.scale(soak, &name, replicas).await;
                    soak.event("scaled", format!("{name} to {replicas}"));
                }
            }
            4 | 5 => {
                let gang =
                    |u: &world::Unit| matches!(u.shape, Shape::Gang { .. }) && u.groups.len() < 4;
                if let Some(name) = world.pick(&mut rng, gang) {
                    let group = world.add_group(soak, &name).await;
                    soak.event("group-added", group);
                }
            }
            6 => {
                let gang =
                    |u: &world::Unit| matches!(u.shape, Shape::Gang { .. }) && u.groups.len() > 2;
                if let Some(name) = world.pick(&mut rng, gang) {
                    let groups: Vec<String> = world.units[&name].groups.keys().cloned().collect();
                    let group = groups[rng.range(0, groups.len() as u64 - 1) as usize].clone();
                    world.remove_group(soak, &name, &group).await;
                    soak.event("group-removed", group);
                }
            }
            7 => {
                let single = |u: &world::Unit| u.shape == Shape::Gang { all: false };
                if let Some(name) = world.pick(&mut rng, single) {
                    let groups: Vec<String> = world.units[&name].groups.keys().cloned().collect();
                    let group = groups[rng.range(0, groups.len() as u64 - 1) as usize].clone();
                    if world.lower_min_count(soak, &name, &group).await {
                        soak.event("min-count-lowered", group);
                    }
                }
            }
            _ => {
                let free = |u: &world::Unit| u.replicas != 1;
                if let Some(name) = world.pick(&mut rng, free)
                    && !user_until.contains_key(&name)
                {
                    add_user_pdb(soak, &name).await;
                    user_until.insert(
                        name.clone(),
                        Instant::now() + Duration::from_secs(rng.range(10, 40)),
                    );
                    soak.event("user-pdb-added", name);
                }
            }
        }
    }
}
