//! The workloads of the soak and what their owners do: Deployments and StatefulSets (their
//! controllers run), LeaderWorkerSet-shaped groups and Workload API gangs, whose pods the soak
//! creates itself as their controllers would (no LWS or Job controller runs here). The
//! [`keep_groups`] loop plays those controllers: a gang in all mode and a LeaderWorkerSet group
//! restart as a unit, a single-mode group replaces the pods it lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::TEST_NODE_KEY;
use pdb_operator::names::keys::LWS_NAME;
use serde_json::{Value, json};

use super::{POOL_LABEL, Rng, Soak};
use crate::common::{create_pod_group, create_workload, gang_template};

/// The label every pod of a unit carries, and the one naming its group (gangs, LWS).
pub const UNIT: &str = "soak-unit";
pub const GROUP: &str = "soak-group";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Deployment,
    StatefulSet,
    /// LeaderWorkerSet-shaped: groups restart as a unit.
    Lws,
    /// A Workload gang; `all` is disruptionMode all (restart as a unit), else single.
    Gang {
        all: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Group {
    pub min_count: i32,
    pub size: usize,
    pub created: Instant,
    next: u32,
}

#[derive(Clone, Debug)]
pub struct Unit {
    pub shape: Shape,
    pub replicas: i32,
    pub groups: BTreeMap<String, Group>,
}

#[derive(Clone, Debug, Default)]
pub struct World {
    pub units: BTreeMap<String, Unit>,
    counter: u32,
}

fn pod_spec_placement(ns: &str) -> Value {
    json!({"nodeSelector": {POOL_LABEL: ns},
           "tolerations": [{"key": TEST_NODE_KEY, "operator": "Exists"}],
           "terminationGracePeriodSeconds": 0,
           "containers": [{"name": "c", "image": "busybox:1.36"}]})
}

/// Workload objects carry the class label the soak's two PDBPolicies select.
fn class_of(shape: Shape) -> &'static str {
    match shape {
        Shape::Deployment | Shape::Lws | Shape::Gang { all: false } => "standard",
        Shape::StatefulSet | Shape::Gang { all: true } => "critical",
    }
}

impl World {
    fn name(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    pub fn count(&self, shape: Shape) -> usize {
        self.units.values().filter(|u| u.shape == shape).count()
    }

    pub fn pick(&self, rng: &mut Rng, accept: impl Fn(&Unit) -> bool) -> Option<String> {
        let names: Vec<&String> = self
            .units
            .iter()
            .filter(|(_, u)| accept(u))
            .map(|(n, _)| n)
            .collect();
        (!names.is_empty()).then(|| names[rng.range(0, names.len() as u64 - 1) as usize].clone())
    }

    /// Creates a unit of `shape` (with its pods, for the shapes without a controller).
    pub async fn create(&mut self, soak: &Soak, shape: Shape, rng: &mut Rng) -> String {
        let (c, ns) = (&soak.admin, soak.ns.as_str());
        let pp = PostParams::default();
        let prefix = match shape {
            Shape::Deployment => "d",
            Shape::StatefulSet => "s",
            Shape::Lws => "l",
            Shape::Gang { all: true } => "ga",
            Shape::Gang { all: false } => "gs",
        };
        let name = self.name(prefix);
        let labels = json!({"soak-class": class_of(shape)});
        let template = json!({"metadata": {"labels": {"app": name, UNIT: name}},
                                  "spec": pod_spec_placement(ns)});
        let mut unit = Unit {
            shape,
            replicas: 0,
            groups: BTreeMap::new(),
        };
        match shape {
            Shape::Deployment => {
                unit.replicas = rng.range(3, 5) as i32;
                let d: Deployment = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"replicas": unit.replicas, "selector": {"matchLabels": {"app": name}},
                             "template": template}}))
                .unwrap();
                Api::<Deployment>::namespaced(c.clone(), ns)
                    .create(&pp, &d)
                    .await
                    .expect("create Deployment");
            }
            Shape::StatefulSet => {
                unit.replicas = rng.range(3, 4) as i32;
                let s: StatefulSet = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"replicas": unit.replicas, "serviceName": name,
                             "podManagementPolicy": "Parallel",
                             "selector": {"matchLabels": {"app": name}}, "template": template}}))
                .unwrap();
                Api::<StatefulSet>::namespaced(c.clone(), ns)
                    .create(&pp, &s)
                    .await
                    .expect("create StatefulSet");
            }
            Shape::Lws => {
                let (groups, size) = (3, 2);
                let lws: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": size}}}))
                .unwrap();
                let ar = pdb_operator::controller::lws::lws_resource();
                Api::<DynamicObject>::namespaced_with(c.clone(), ns, &ar)
                    .create(&pp, &lws)
                    .await
                    .expect("create LeaderWorkerSet");
                for g in 0..groups {
                    unit.groups
                        .insert(format!("{name}-{g}"), Group::new(size as i32, size));
                }
            }
            Shape::Gang { all } => {
                let mode = if all { "all" } else { "single" };
                let (groups, size, min) = if all { (4, 2, 2) } else { (2, 5, 3) };
                create_workload(
                    c,
                    ns,
                    &name,
                    labels,
                    json!([gang_template("workers", min, mode)]),
                )
                .await;
                for g in 0..groups {
                    let group = format!("{name}-g{g}");
                    create_pod_group(c, ns, &name, "workers", &group, min, mode).await;
                    unit.groups.insert(group, Group::new(min, size));
                }
            }
        }
        let groups: Vec<String> = unit.groups.keys().cloned().collect();
        self.units.insert(name.clone(), unit);
        for g in groups {
            let size = self.units[&name].groups[&g].size;
            self.add_pods(soak, &name, &g, size).await;
        }
        name
    }

    /// Creates `n` pods of group `group` of unit `unit`, as its controller would.
    async fn add_pods(&mut self, soak: &Soak, unit: &str, group: &str, n: usize) {
        let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
        let u = self.units.get_mut(unit).unwrap();
        let shape = u.shape;
        let g = u.groups.get_mut(group).unwrap();
        for _ in 0..n {
            g.next += 1;
            let name = format!("{group}-{}", g.next);
            let mut labels = json!({"app": unit, UNIT: unit, GROUP: group});
            let mut spec = pod_spec_placement(&soak.ns);
            if shape == Shape::Lws {
                labels[LWS_NAME] = json!(unit);
                let index = group.rsplit('-').next().unwrap_or_default();
                labels["leaderworkerset.sigs.k8s.io/group-index"] = json!(index);
            } else {
                spec["schedulingGroup"] = json!({"podGroupName": group});
            }
            let p: Pod =
                serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
                                              "spec": spec}))
                .unwrap();
            if let Err(e) = pods.create(&PostParams::default(), &p).await {
                soak.note(format!("creating pod {name}: {e}"));
            }
        }
    }

    /// Deletes unit `name`: its object, and the pods and PodGroups the soak made for it.
    pub async fn delete(&mut self, soak: &Soak, name: &str) {
        let (c, ns) = (&soak.admin, soak.ns.as_str());
        let Some(unit) = self.units.remove(name) else {
            return;
        };
        let dp = DeleteParams::default();
        let r = match unit.shape {
            Shape::Deployment => Api::<Deployment>::namespaced(c.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            Shape::StatefulSet => Api::<StatefulSet>::namespaced(c.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            Shape::Lws => {
                let ar = pdb_operator::controller::lws::lws_resource();
                Api::<DynamicObject>::namespaced_with(c.clone(), ns, &ar)
                    .delete(name, &dp)
                    .await
                    .map(|_| ())
            }
            Shape::Gang { .. } => Api::<Workload>::namespaced(c.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
        };
        if let Err(e) = r {
            soak.note(format!("deleting {name}: {e}"));
        }
        if matches!(unit.shape, Shape::Lws | Shape::Gang { .. }) {
            let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
            let lp = ListParams::default().labels(&format!("{UNIT}={name}"));
            let _ = pods.delete_collection(&Default::default(), &lp).await;
            for g in unit.groups.keys() {
                let _ = Api::<PodGroup>::namespaced(c.clone(), ns)
                    .delete(g, &dp)
                    .await;
            }
        }
        let _ = Api::<PodDisruptionBudget>::namespaced(c.clone(), ns)
            .delete(&format!("user-{name}"), &dp)
            .await;
    }

    /// Scales a Deployment or StatefulSet to `replicas`.
    pub async fn scale(&mut self, soak: &Soak, name: &str, replicas: i32) {
        let (c, ns) = (&soak.admin, soak.ns.as_str());
        let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        let pp = PatchParams::default();
        let unit = self.units.get_mut(name).unwrap();
        unit.replicas = replicas;
        let r = match unit.shape {
            Shape::Deployment => Api::<Deployment>::namespaced(c.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(|_| ()),
            _ => Api::<StatefulSet>::namespaced(c.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(|_| ()),
        };
        if let Err(e) = r {
            soak.note(format!("scaling {name}: {e}"));
        }
    }

    /// Adds a PodGroup (and its pods, all at once as a gang's controller creates them).
    pub async fn add_group(&mut self, soak: &Soak, name: &str) -> String {
        let unit = &self.units[name];
        let Shape::Gang { all } = unit.shape else {
            unreachable!("groups are added to gangs")
        };
        let first = unit.groups.values().next().cloned();
        let (min, size) = first.map_or((3, 5), |g| (g.min_count.max(2), g.size.max(3)));
        let group = format!("{name}-g{}", self.name("x"));
        let mode = if all { "all" } else { "single" };
        create_pod_group(&soak.admin, &soak.ns, name, "workers", &group, min, mode).await;
        self.units
            .get_mut(name)
            .unwrap()
            .groups
            .insert(group.clone(), Group::new(min, size));
        self.add_pods(soak, name, &group, size).await;
        group
    }

    /// Removes a PodGroup as its owner does: its pods first, then the PodGroup.
    pub async fn remove_group(&mut self, soak: &Soak, name: &str, group: &str) {
        self.units.get_mut(name).unwrap().groups.remove(group);
        let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
        let lp = ListParams::default().labels(&format!("{GROUP}={group}"));
        let _ = pods.delete_collection(&Default::default(), &lp).await;
        let _ = Api::<PodGroup>::namespaced(soak.admin.clone(), &soak.ns)
            .delete(group, &DeleteParams::default())
            .await;
    }

    /// Lowers a single-mode group's minCount by one, then removes one of its pods (the API's
    /// way to shrink a gang).
    pub async fn lower_min_count(&mut self, soak: &Soak, name: &str, group: &str) -> bool {
        let g = self
            .units
            .get_mut(name)
            .unwrap()
            .groups
            .get_mut(group)
            .unwrap();
        if g.min_count <= 2 {
            return false;
        }
        g.min_count -= 1;
        let min = g.min_count;
        let patch =
            Patch::Merge(json!({"spec": {"schedulingPolicy": {"gang": {"minCount": min}}}}));
        let groups: Api<PodGroup> = Api::namespaced(soak.admin.clone(), &soak.ns);
        if let Err(e) = groups.patch(group, &PatchParams::default(), &patch).await {
            soak.note(format!("lowering minCount of {group}: {e}"));
        }
        if g.size > min as usize + 1 {
            g.size -= 1;
            let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
            let lp = ListParams::default().labels(&format!("{GROUP}={group}"));
            if let Some(p) = pods
                .list(&lp)
                .await
                .ok()
                .and_then(|l| l.items.last().cloned())
            {
                let _ = pods.delete(&p.name_any(), &DeleteParams::default()).await;
            }
        }
        true
    }
}

impl Group {
    fn new(min_count: i32, size: usize) -> Group {
        Group {
            min_count,
            size,
            created: Instant::now(),
            next: 0,
        }
    }
}

pub fn live(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Every 500 ms, what the missing controllers would do: restart an all-mode gang group or a
/// LeaderWorkerSet group that lost a pod as a unit, and replace a single-mode group's lost pods.
pub async fn keep_groups(soak: std::sync::Arc<Soak>) {
    let pods: Api<Pod> = Api::namespaced(soak.admin.clone(), &soak.ns);
    let grace0 = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    while !soak.finished() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut world = soak.world.lock().await;
        let Ok(list) = pods.list(&ListParams::default().labels(GROUP)).await else {
            continue;
        };
        let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in list.items.iter().filter(|p| live(p)) {
            if let Some(g) = p.labels().get(GROUP) {
                by_group.entry(g.clone()).or_default().push(p.name_any());
            }
        }
        let mut todo = Vec::new();
        for (unit, u) in &world.units {
            let as_unit = matches!(u.shape, Shape::Lws | Shape::Gang { all: true });
            for (group, g) in &u.groups {
                let have = by_group.get(group).cloned().unwrap_or_default();
                if have.len() >= g.size {
                    continue;
                }
                if as_unit && !have.is_empty() {
                    for p in &have {
                        let _ = pods.delete(p, &grace0).await;
                    }
                    soak.note(format!(
                        "{group} restarts as a unit ({} of {} left)",
                        have.len(),
                        g.size
                    ));
                    todo.push((unit.clone(), group.clone(), 0));
                } else {
                    todo.push((unit.clone(), group.clone(), g.size - have.len()));
                }
            }
        }
        for (unit, group, n) in todo {
            soak.mark_disturbed(&group);
            if n > 0 {
                world.add_pods(&soak, &unit, &group, n).await;
            }
        }
    }
}
