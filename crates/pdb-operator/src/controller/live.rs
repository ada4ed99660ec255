//! Which workloads exist, read from the controllers' own reflector stores.
//!
//! The sweep that forgets outcomes of deleted workloads used to LIST every kind's metadata
//! every 30 s. Metadata includes managedFields, whose `fieldsV1` parse into nested JSON maps
//! of tens of kilobytes per object: at 5,000 Deployments one unpaginated LIST held about 65 MB
//! of them at once (a heap profile of `operator_scale`; the operator's resident memory stayed
//! at 225 MiB afterwards), and the apiserver encoded the whole set twice a minute. The
//! controllers already hold every workload of their kind in a store, so the sweep reads those.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use kube::runtime::reflector::{Lookup, Store};

/// `(namespace, name)` of the workloads of one kind that exist.
pub type NameSet = HashSet<(String, String)>;

type Names = Arc<dyn Fn() -> Option<NameSet> + Send + Sync>;

/// The reflector store of each running controller, by workload kind.
#[derive(Default)]
pub struct LiveWorkloads {
    kinds: Mutex<HashMap<&'static str, Names>>,
}

impl LiveWorkloads {
    /// Makes `store` the source of truth for which workloads of `kind` exist.
    pub fn register<K>(&self, kind: &'static str, store: Store<K>)
    where
        K: Lookup + kube::Resource + Clone + Send + Sync + 'static,
        <K as Lookup>::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        let names: Names = Arc::new(move || names_in(&store));
        self.kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind, names);
    }

    /// The workloads of `kind` that exist; `None` when no controller of that kind runs or its
    /// store has not finished its first list (nothing can be said to be gone then).
    pub fn names(&self, kind: &str) -> Option<NameSet> {
        let names = self
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .cloned()?;
        names()
    }
}

fn names_in<K>(store: &Store<K>) -> Option<NameSet>
where
    K: Lookup + kube::Resource + Clone + 'static,
    <K as Lookup>::DynamicType: Eq + Hash + Clone,
{
    // Ready once the first list has been applied; it stays ready through later relists, which
    // keep the old content until the new one is complete.
    store.wait_until_ready().now_or_never()?.ok()?;
    Some(
        store
            .state()
            .iter()
            .map(|o| {
                let meta = kube::Resource::meta(o.as_ref());
                let ns = meta.namespace.clone().unwrap_or_default();
                (ns, meta.name.clone().unwrap_or_default())
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::apps::v1::Deployment;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn deployment(ns: &str, name: &str) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.namespace = Some(ns.into());
        d.metadata.name = Some(name.into());
        d
    }

    #[test]
    fn a_kind_without_a_controller_says_nothing() {
        let live = LiveWorkloads::default();
        assert_eq!(live.names("Deployment"), None);
    }

    #[test]
    fn a_store_still_on_its_first_list_says_nothing() {
        let live = LiveWorkloads::default();
        let (store, mut writer) = reflector::store::<Deployment>();
        live.register("Deployment", store);
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(deployment("a", "x")));
        assert_eq!(
            live.names("Deployment"),
            None,
            "an unfinished list would make every other workload look deleted"
        );
    }

    #[test]
    fn a_listed_store_names_what_it_holds_by_namespace() {
        let live = LiveWorkloads::default();
        let (store, mut writer) = reflector::store::<Deployment>();
        live.register("Deployment", store);
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(deployment("a", "x")));
        writer.apply_watcher_event(&Event::InitApply(deployment("b", "x")));
        writer.apply_watcher_event(&Event::InitDone);
        writer.apply_watcher_event(&Event::Delete(deployment("b", "x")));
        let expected: NameSet = [("a".to_string(), "x".to_string())].into();
        assert_eq!(live.names("Deployment"), Some(expected));
        assert_eq!(live.names("StatefulSet"), None);
    }
}
