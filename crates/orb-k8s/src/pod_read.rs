//! What the pod readers (the machine translator, the pod timeout, reclaims) read of a pod,
//! behind one trait, so that they read a `Pod` from a LIST and what the watch cache keeps of
//! a pod ([`crate::kept::Kept`]) alike. Before, a cached pod was rebuilt into a full `Pod`
//! for every read: at 5,000 pods in one request that rebuild was a quarter of a status read
//! through `orb serve`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use orb_core::provider::MachineObservation;
use orb_core::shared::Shared;
use orb_core::template::ProviderApi;
use serde_json::{Value, json};

/// One pod condition, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionRead<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
}

/// A container state, borrowed: an absent state reads as neither waiting nor terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateRead<'a> {
    /// Reason and message.
    pub waiting: Option<(Option<&'a str>, Option<&'a str>)>,
    /// Reason and exit code.
    pub terminated: Option<(Option<&'a str>, i32)>,
}

/// One container status, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerRead<'a> {
    pub name: &'a str,
    pub restart_count: i32,
    pub state: StateRead<'a>,
    pub last_state: StateRead<'a>,
}

/// The fields of a pod its readers use. A field not here cannot be read from a cached pod.
pub trait PodRead {
    fn meta(&self) -> &ObjectMeta;
    fn node_name(&self) -> Option<&str>;
    fn restart_policy(&self) -> Option<&str>;
    fn termination_grace_period_seconds(&self) -> Option<i64>;
    fn phase(&self) -> Option<&str>;
    /// `status.reason` (e.g. `Evicted`).
    fn status_reason(&self) -> Option<&str>;
    fn status_message(&self) -> Option<&str>;
    fn pod_ip(&self) -> Option<&str>;
    fn host_ip(&self) -> Option<&str>;
    fn conditions(&self) -> impl Iterator<Item = ConditionRead<'_>>;
    /// The containers' statuses, `init` for the init containers'.
    fn containers(&self, init: bool) -> impl Iterator<Item = ContainerRead<'_>>;

    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    fn uid(&self) -> Option<&str> {
        self.meta().uid.as_deref()
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.meta()
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn created(&self) -> Option<Timestamp> {
        self.meta().creation_timestamp.as_ref().map(|t| t.0)
    }

    fn condition_true(&self, type_: &str) -> bool {
        self.conditions()
            .any(|c| c.type_ == type_ && c.status == "True")
    }

    /// The pod's labels, as its machine's tags.
    fn tags(&self) -> Shared<BTreeMap<String, String>> {
        self.meta().labels.clone().unwrap_or_default().into()
    }

    /// What its machine's provider data records of the pod: where it runs, its phase, whether
    /// it is ready, how often its containers restarted.
    fn provider_data(&self) -> Shared<Value> {
        provider_data_of(self).into()
    }

    /// [`observe_pod`](crate::machine_state::observe_pod) of this pod: its observation as a
    /// machine of `kind` owned by `resource_id`.
    fn observation(&self, kind: ProviderApi, resource_id: &str) -> Shared<MachineObservation>
    where
        Self: Sized,
    {
        crate::machine_state::observe_pod(self, kind, resource_id).into()
    }
}

/// What [`PodRead::provider_data`] is made of, borrowed from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProviderDataOf<'a> {
    namespace: Option<&'a str>,
    node: Option<&'a str>,
    host_ip: Option<&'a str>,
    phase: Option<&'a str>,
    ready: bool,
    restarts: i32,
}

impl<'a> ProviderDataOf<'a> {
    fn of(pod: &'a (impl PodRead + ?Sized)) -> Self {
        Self {
            namespace: pod.meta().namespace.as_deref(),
            node: pod.node_name(),
            host_ip: pod.host_ip(),
            phase: pod.phase(),
            ready: pod.condition_true("Ready"),
            restarts: pod.containers(false).map(|c| c.restart_count).sum(),
        }
    }

    fn value(&self) -> Value {
        json!({
            "namespace": self.namespace,
            "node_name": self.node,
            "cloud_host_id": self.node,
            "host_ip": self.host_ip,
            "phase": self.phase,
            "ready": self.ready,
            "restart_count": self.restarts,
        })
    }

    fn owned(&self) -> ProviderDataKey {
        let own = |s: Option<&str>| s.map(str::to_string);
        ProviderDataKey {
            namespace: own(self.namespace),
            node: own(self.node),
            host_ip: own(self.host_ip),
            phase: own(self.phase),
            ready: self.ready,
            restarts: self.restarts,
        }
    }
}

/// [`ProviderDataOf`], owned: the key of a [`SharedProviderData`] entry.
#[derive(Debug, PartialEq, Eq)]
struct ProviderDataKey {
    namespace: Option<String>,
    node: Option<String>,
    host_ip: Option<String>,
    phase: Option<String>,
    ready: bool,
    restarts: i32,
}

impl ProviderDataKey {
    fn is(&self, of: &ProviderDataOf<'_>) -> bool {
        self.namespace.as_deref() == of.namespace
            && self.node.as_deref() == of.node
            && self.host_ip.as_deref() == of.host_ip
            && self.phase.as_deref() == of.phase
            && self.ready == of.ready
            && self.restarts == of.restarts
    }
}

/// Provider data shared between the pods whose provider data is equal. It records only the
/// namespace, node, phase, readiness and restarts, so the pods of one namespace waiting to be
/// scheduled all have the same, and so do the running pods of a node; kept once a pod, it was
/// about 850 bytes of each of the watch cache's pods (40 MiB at 50,000). Holds at most
/// `limit` values, and starts over when full.
pub(crate) struct SharedProviderData {
    limit: usize,
    /// By the hash of their [`ProviderDataOf`]; a collision keeps the newer one.
    entries: std::collections::HashMap<u64, (ProviderDataKey, Shared<Value>)>,
}

impl SharedProviderData {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            entries: std::collections::HashMap::new(),
        }
    }

    /// The provider data of `pod`: one already made for a pod with the same, or a new one
    /// (kept for the next).
    pub(crate) fn of(&mut self, pod: &(impl PodRead + ?Sized)) -> Shared<Value> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let of = ProviderDataOf::of(pod);
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(of);
        if let Some((key, value)) = self.entries.get(&hash)
            && key.is(&of)
        {
            return value.clone();
        }
        if self.entries.len() >= self.limit {
            self.entries.clear();
        }
        let value = Shared::new(of.value());
        self.entries.insert(hash, (of.owned(), value.clone()));
        value
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// How many distinct provider data the watch cache's pods share (a few a node and phase;
/// 4,096 is a few hundred bytes each, about 3 MiB at most).
const SHARED_PROVIDER_DATA: usize = 4096;

/// [`PodRead::provider_data`] of a pod the watch cache keeps, shared with every kept pod
/// whose provider data is the same (see [`SharedProviderData`]).
pub(crate) fn shared_provider_data_of(pod: &(impl PodRead + ?Sized)) -> Shared<Value> {
    static SHARED: std::sync::LazyLock<std::sync::Mutex<SharedProviderData>> =
        std::sync::LazyLock::new(|| {
            std::sync::Mutex::new(SharedProviderData::new(SHARED_PROVIDER_DATA))
        });
    SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .of(pod)
}

/// [`PodRead::provider_data`], built.
pub(crate) fn provider_data_of(pod: &(impl PodRead + ?Sized)) -> Value {
    ProviderDataOf::of(pod).value()
}

fn condition(c: &PodCondition) -> ConditionRead<'_> {
    ConditionRead {
        type_: &c.type_,
        status: &c.status,
        reason: c.reason.as_deref(),
        message: c.message.as_deref(),
    }
}

fn state(s: Option<&ContainerState>) -> StateRead<'_> {
    let Some(s) = s else {
        return StateRead::default();
    };
    StateRead {
        waiting: s
            .waiting
            .as_ref()
            .map(|w| (w.reason.as_deref(), w.message.as_deref())),
        terminated: s
            .terminated
            .as_ref()
            .map(|t| (t.reason.as_deref(), t.exit_code)),
    }
}

fn container(c: &ContainerStatus) -> ContainerRead<'_> {
    ContainerRead {
        name: &c.name,
        restart_count: c.restart_count,
        state: state(c.state.as_ref()),
        last_state: state(c.last_state.as_ref()),
    }
}

impl PodRead for Pod {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    fn restart_policy(&self) -> Option<&str> {
        self.spec.as_ref()?.restart_policy.as_deref()
    }

    fn termination_grace_period_seconds(&self) -> Option<i64> {
        self.spec.as_ref()?.termination_grace_period_seconds
    }

    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    fn status_reason(&self) -> Option<&str> {
        self.status.as_ref()?.reason.as_deref()
    }

    fn status_message(&self) -> Option<&str> {
        self.status.as_ref()?.message.as_deref()
    }

    fn pod_ip(&self) -> Option<&str> {
        self.status.as_ref()?.pod_ip.as_deref()
    }

    fn host_ip(&self) -> Option<&str> {
        self.status.as_ref()?.host_ip.as_deref()
    }

    fn conditions(&self) -> impl Iterator<Item = ConditionRead<'_>> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .map(condition)
    }

    fn containers(&self, init: bool) -> impl Iterator<Item = ContainerRead<'_>> {
        self.status
            .as_ref()
            .and_then(|s| {
                if init {
                    s.init_container_statuses.as_deref()
                } else {
                    s.container_statuses.as_deref()
                }
            })
            .unwrap_or_default()
            .iter()
            .map(container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept::Kept;
    use crate::test_support;

    /// Pods that differ in name, uid and labels but not in what provider data records.
    fn twins(node: &str) -> [Pod; 2] {
        ["a", "b"].map(|name| {
            test_support::pod(name)
                .namespace("ns")
                .uid(name)
                .label("orb.io/request-id", name)
                .running_on(node)
                .ready(true)
                .build()
        })
    }

    /// Every field provider data records, changed one at a time from a running pod.
    fn variants() -> Vec<Pod> {
        let base = || {
            test_support::pod("p")
                .namespace("ns")
                .running_on("n1")
                .ready(true)
        };
        vec![
            base().build(),
            base().namespace("other").build(),
            base().node("n2").build(),
            base()
                .with(|p| p.status.get_or_insert_default().host_ip = Some("10.0.0.9".into()))
                .build(),
            base().phase("Pending").build(),
            base().ready(false).build(),
            base()
                .with(|p| {
                    p.status.get_or_insert_default().container_statuses =
                        Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                            name: "c".into(),
                            restart_count: 2,
                            ..Default::default()
                        }])
                })
                .build(),
            test_support::pod("bare").build(),
        ]
    }

    #[test]
    fn pods_with_the_same_provider_data_share_one() {
        let mut shared = SharedProviderData::new(16);
        let [a, b] = twins("n1");
        let (from_a, from_b) = (shared.of(&a), shared.of(&b));
        assert!(Shared::ptr_eq(&from_a, &from_b), "made twice");
        assert_eq!(*from_a, provider_data_of(&b));
        let [c, _] = twins("n2");
        let from_c = shared.of(&c);
        assert!(!Shared::ptr_eq(&from_a, &from_c));
        assert_eq!(*from_c, provider_data_of(&c));
    }

    /// Each pod gets provider data equal to its own, whatever was shared before it, and only
    /// an equal pod gets the same allocation.
    #[test]
    fn a_pod_that_differs_in_any_field_gets_its_own() {
        let mut shared = SharedProviderData::new(64);
        let pods = variants();
        let made: Vec<_> = pods.iter().map(|p| shared.of(p)).collect();
        for (i, pod) in pods.iter().enumerate() {
            assert_eq!(*made[i], provider_data_of(pod), "pod {i}");
            for (j, other) in made.iter().enumerate() {
                assert_eq!(Shared::ptr_eq(&made[i], other), i == j, "pods {i} and {j}");
            }
            assert!(Shared::ptr_eq(&shared.of(pod), &made[i]), "pod {i} again");
        }
    }

    #[test]
    fn it_holds_no_more_than_its_limit() {
        let mut shared = SharedProviderData::new(3);
        for (i, pod) in variants().iter().enumerate() {
            shared.of(pod);
            assert!(shared.len() <= 3, "after pod {i}: {}", shared.len());
            assert_eq!(*shared.of(pod), provider_data_of(pod), "pod {i}");
        }
    }

    /// The watch cache's pods share theirs through the process-wide table.
    #[test]
    fn kept_pods_share_their_provider_data() {
        let [a, b] = twins("kept-node");
        let (a, b) = (Kept::from(a.clone()), Kept::from(b));
        assert!(Shared::ptr_eq(&a.provider_data(), &b.provider_data()));
        assert_eq!(*a.provider_data(), provider_data_of(&a));
    }
}
