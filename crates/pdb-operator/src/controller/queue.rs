//! `pdb_operator_reconcile_queue_length`: how many workloads wait for a reconcile, triggered by
//! a change (of the workload, a PDB, a PodGroup, a pod or a policy) and not started yet. kube's
//! Controller keeps its queue to itself, so triggers are counted on their way in and struck off
//! when the reconcile starts, or when the controller finds the object gone. A trigger for a
//! workload already waiting adds nothing (the controller runs it once). A scheduled requeue (the
//! 30 s retry, the next window boundary) is not waiting work and is not counted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use prometheus_client::metrics::gauge::Gauge;

use crate::desired::WorkloadKind;

type Key = (&'static str, String, String);

/// Workloads triggered and not started yet, mirrored into a gauge.
pub struct WorkQueue {
    pending: Mutex<HashSet<Key>>,
    gauge: Gauge,
}

impl WorkQueue {
    pub fn new(gauge: Gauge) -> Self {
        Self {
            pending: Mutex::new(HashSet::new()),
            gauge,
        }
    }

    fn update(&self, f: impl FnOnce(&mut HashSet<Key>)) {
        let mut set = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut set);
        self.gauge.set(set.len() as i64);
    }

    fn key(kind: WorkloadKind, namespace: Option<&str>, name: &str) -> Key {
        (
            kind.kind(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        )
    }

    /// A change asked for a reconcile of `r`.
    pub fn triggered<K: Resource>(&self, kind: WorkloadKind, r: &ObjectRef<K>) {
        self.triggered_at(kind, r.namespace.as_deref(), &r.name);
    }

    /// A change asked for a reconcile of `namespace/name`.
    pub fn triggered_at(&self, kind: WorkloadKind, namespace: Option<&str>, name: &str) {
        let key = Self::key(kind, namespace, name);
        self.update(|s| {
            s.insert(key);
        });
    }

    /// The reconcile of `namespace/name` started (or the object is gone): it waits no longer.
    pub fn started(&self, kind: WorkloadKind, namespace: Option<&str>, name: &str) {
        let key = Self::key(kind, namespace, name);
        self.update(|s| {
            s.remove(&key);
        });
    }

    pub fn len(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Polls a controller's output until it ends. A trigger for an object the controller no longer
/// has (it was deleted) is struck off the waiting count here, since no reconcile starts for it.
pub(crate) fn drain_controller<K, S, E1, E2>(
    kind: WorkloadKind,
    queue: Arc<WorkQueue>,
    stream: S,
) -> impl std::future::Future<Output = ()>
where
    K: Resource,
    S: Stream<Item = Result<(ObjectRef<K>, Action), ControllerError<E1, E2>>>,
    E1: std::error::Error + 'static,
    E2: std::error::Error + 'static,
{
    let name = kind.controller_name();
    stream.for_each(move |r| {
        match &r {
            Err(ControllerError::ObjectNotFound(gone)) => {
                queue.started(kind, gone.namespace.as_deref(), &gone.name);
            }
            Err(e) => tracing::debug!(controller = name, error = %e, "controller event"),
            Ok(_) => {}
        }
        std::future::ready(())
    })
}

/// `mapper`, with every workload it names counted as waiting for a reconcile.
pub(crate) fn counted<T, K, I>(
    kind: WorkloadKind,
    queue: Arc<WorkQueue>,
    mapper: impl Fn(T) -> I + Send + Sync + 'static,
) -> impl Fn(T) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource,
    I: IntoIterator<Item = ObjectRef<K>>,
{
    move |o| {
        let refs: Vec<ObjectRef<K>> = mapper(o).into_iter().collect();
        for r in &refs {
            queue.triggered(kind, r);
        }
        refs
    }
}

/// The policy trigger, with every workload of `store` counted as waiting (a policy change
/// looks at all of them).
pub(crate) fn counted_policy_changes<K>(
    kind: WorkloadKind,
    queue: Arc<WorkQueue>,
    store: Store<K>,
    changes: impl Stream<Item = ()> + Send + 'static,
) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    changes.inspect(move |_| {
        for o in store.state() {
            let m = o.meta();
            queue.triggered_at(
                kind,
                m.namespace.as_deref(),
                m.name.as_deref().unwrap_or_default(),
            );
        }
    })
}

/// A workload stream, with every object in it counted as waiting for a reconcile.
pub(crate) fn counted_stream<K, S>(
    kind: WorkloadKind,
    queue: Arc<WorkQueue>,
    stream: S,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<K, watcher::Error>> + Send + 'static,
{
    stream.inspect(move |r| {
        if let Ok(o) = r {
            let m = o.meta();
            queue.triggered_at(
                kind,
                m.namespace.as_deref(),
                m.name.as_deref().unwrap_or_default(),
            );
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;

    fn r(name: &str) -> ObjectRef<Deployment> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn the_gauge_counts_workloads_waiting_not_triggers() {
        let gauge = Gauge::default();
        let q = WorkQueue::new(gauge.clone());
        let d = WorkloadKind::Deployment;
        q.triggered(d, &r("a"));
        q.triggered(d, &r("a"));
        q.triggered(d, &r("b"));
        q.triggered(WorkloadKind::StatefulSet, &r("a"));
        assert_eq!(
            gauge.get(),
            3,
            "a twice is one reconcile; a StatefulSet a is another"
        );
        q.started(d, Some("ns"), "a");
        assert_eq!(gauge.get(), 2);
        q.started(d, Some("ns"), "a");
        q.started(d, Some("other"), "b");
        assert_eq!(
            gauge.get(),
            2,
            "starting something not waiting changes nothing"
        );
        q.started(d, Some("ns"), "b");
        q.started(WorkloadKind::StatefulSet, Some("ns"), "a");
        assert!(q.is_empty());
        assert_eq!(gauge.get(), 0);
    }
}
