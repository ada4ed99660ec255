//! Reconcile triggers that ignore changes no decision depends on.
//!
//! A decision reads a workload's spec and metadata and a PDB's spec, metadata and owners,
//! never their status. Yet most watch events are status updates: the Deployment controller
//! and the disruption controller write status several times while 2,000 pods start, and in
//! the bench `operator_scale` those updates queued about 2,100 reconciles of unchanged
//! workloads through the same 5 reconcilers as the 1,000 new ones. Here each object gets a
//! fingerprint of what decisions read; an update that leaves it unchanged triggers nothing.
//! Deletions always trigger (a deleted object need not change its fingerprint), and a relist
//! triggers only objects that changed while the watch was away.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::runtime::watcher;

/// What the fingerprints are kept by: the object's UID, or its namespace/name without one.
fn key_of<K: Resource>(o: &K) -> String {
    let m = o.meta();
    match &m.uid {
        Some(uid) => uid.clone(),
        None => format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        ),
    }
}

/// Annotations the apps controllers write on every rollout that no decision reads. The
/// Deployment controller sets the revision right after a Deployment is created, which cost
/// every new Deployment a second (no-op) reconcile in a burst.
const CONTROLLER_ANNOTATIONS: [&str; 1] = ["deployment.kubernetes.io/revision"];

/// Fingerprint of what a workload's decision reads: its generation (the spec), labels,
/// annotations (less [`CONTROLLER_ANNOTATIONS`]), finalizers (the legacy finalizer is
/// stripped) and whether it is terminating.
pub fn workload_fingerprint<K: Resource>(o: &K) -> u64 {
    let m = o.meta();
    let mut h = DefaultHasher::new();
    m.generation.hash(&mut h);
    m.labels.hash(&mut h);
    for (k, v) in m.annotations.iter().flatten() {
        if !CONTROLLER_ANNOTATIONS.contains(&k.as_str()) {
            (k, v).hash(&mut h);
        }
    }
    m.finalizers.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// Fingerprint of what decisions read of a PDB: generation (the spec), labels, annotations
/// and owners (see [`crate::pdb::find_pdb_conflict`] and the up-to-date check).
pub fn pdb_fingerprint(p: &PodDisruptionBudget) -> u64 {
    let m = &p.metadata;
    let mut h = DefaultHasher::new();
    m.generation.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    for o in m.owner_references.iter().flatten() {
        (&o.uid, &o.kind, &o.name, o.controller).hash(&mut h);
    }
    m.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// Fingerprints seen so far, and those seen in the relist under way.
struct Seen {
    prints: HashMap<String, u64>,
    relisted: Option<HashSet<String>>,
}

impl Seen {
    /// The objects `event` should trigger.
    fn step<K: Resource>(
        &mut self,
        event: watcher::Event<K>,
        fingerprint: fn(&K) -> u64,
    ) -> Vec<K> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(o) => {
                let key = key_of(&o);
                if let Some(r) = &mut self.relisted {
                    r.insert(key.clone());
                }
                self.changed(key, fingerprint(&o))
                    .then_some(o)
                    .into_iter()
                    .collect()
            }
            watcher::Event::InitDone => {
                // Objects gone while the watch was away: forget them (nothing to trigger,
                // the controller's store no longer has them either).
                if let Some(r) = self.relisted.take() {
                    self.prints.retain(|k, _| r.contains(k));
                }
                Vec::new()
            }
            watcher::Event::Apply(o) => {
                let key = key_of(&o);
                self.changed(key, fingerprint(&o))
                    .then_some(o)
                    .into_iter()
                    .collect()
            }
            watcher::Event::Delete(o) => {
                self.prints.remove(&key_of(&o));
                vec![o]
            }
        }
    }

    fn changed(&mut self, key: String, print: u64) -> bool {
        self.prints.insert(key, print) != Some(print)
    }
}

/// The objects of a (reflected) watch stream whose fingerprint changed, deletions included;
/// watch errors pass through for the controller to log.
pub fn meaningful_changes<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let seen = Seen {
        prints: HashMap::new(),
        relisted: None,
    };
    events
        .scan(seen, move |seen, ev| {
            let out: Vec<Result<K, watcher::Error>> = match ev {
                Ok(event) => seen.step(event, fingerprint).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::future::ready(Some(stream::iter(out)))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use kube::ResourceExt;

    fn deployment(name: &str, generation: i64) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.name = Some(name.into());
        d.metadata.namespace = Some("ns".into());
        d.metadata.uid = Some(format!("uid-{name}"));
        d.metadata.generation = Some(generation);
        d
    }

    fn with_status(mut d: Deployment, ready: i32) -> Deployment {
        d.status = Some(DeploymentStatus {
            ready_replicas: Some(ready),
            ..Default::default()
        });
        d
    }

    fn names(events: Vec<watcher::Event<Deployment>>) -> Vec<String> {
        let s = stream::iter(events.into_iter().map(Ok));
        let out = futures::executor::block_on(
            meaningful_changes(s, workload_fingerprint::<Deployment>).collect::<Vec<_>>(),
        );
        out.into_iter()
            .map(|r| r.expect("no watch error was sent").name_any())
            .collect()
    }

    #[test]
    fn status_only_updates_trigger_nothing_and_spec_and_metadata_changes_do() {
        use watcher::Event::*;
        let mut labelled = deployment("a", 1);
        labelled.labels_mut().insert("tier".into(), "web".into());
        let got = names(vec![
            Init,
            InitApply(deployment("a", 1)),
            InitDone,
            Apply(with_status(deployment("a", 1), 1)),
            Apply(with_status(deployment("a", 1), 2)),
            Apply(deployment("a", 2)),
            Apply(labelled),
            Apply(deployment("b", 1)),
            Apply(with_status(deployment("b", 1), 2)),
        ]);
        assert_eq!(got, ["a", "a", "a", "b"]);
    }

    #[test]
    fn the_deployment_controllers_revision_is_not_a_change_but_ours_are() {
        let d = deployment("a", 1);
        let base = workload_fingerprint(&d);
        let mut revised = d.clone();
        revised
            .annotations_mut()
            .insert("deployment.kubernetes.io/revision".into(), "1".into());
        assert_eq!(workload_fingerprint(&revised), base);
        let mut classed = d;
        classed.annotations_mut().insert(
            "pdboperator.io/availability-class".into(),
            "standard".into(),
        );
        assert_ne!(workload_fingerprint(&classed), base);
    }

    #[test]
    fn a_deletion_always_triggers() {
        use watcher::Event::*;
        let got = names(vec![
            Apply(deployment("a", 1)),
            Delete(deployment("a", 1)),
            Apply(deployment("a", 1)),
        ]);
        assert_eq!(got, ["a", "a", "a"], "created, deleted, created again");
    }

    #[test]
    fn a_relist_triggers_only_what_changed_while_away() {
        use watcher::Event::*;
        let got = names(vec![
            Init,
            InitApply(deployment("a", 1)),
            InitApply(deployment("b", 1)),
            InitApply(deployment("c", 1)),
            InitDone,
            // The watch broke; c was deleted and b's spec changed meanwhile.
            Init,
            InitApply(with_status(deployment("a", 1), 2)),
            InitApply(deployment("b", 2)),
            InitDone,
            // c comes back: new to the filter again.
            Apply(deployment("c", 1)),
        ]);
        assert_eq!(got, ["a", "b", "c", "b", "c"]);
    }

    #[test]
    fn a_pdb_status_update_is_not_a_change_but_a_new_owner_is() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let mut p = PodDisruptionBudget::default();
        p.metadata.generation = Some(1);
        let base = pdb_fingerprint(&p);
        p.status = Some(PodDisruptionBudgetStatus {
            current_healthy: Some(3),
            ..Default::default()
        });
        assert_eq!(pdb_fingerprint(&p), base);
        p.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u".into(),
            kind: "Deployment".into(),
            name: "a".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert_ne!(pdb_fingerprint(&p), base);
    }
}
