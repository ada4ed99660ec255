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

/// [`PodRead::provider_data`], built.
pub(crate) fn provider_data_of(pod: &(impl PodRead + ?Sized)) -> Value {
    let node = pod.node_name();
    let restarts: i32 = pod.containers(false).map(|c| c.restart_count).sum();
    json!({
        "namespace": pod.meta().namespace,
        "node_name": node,
        "cloud_host_id": node,
        "host_ip": pod.host_ip(),
        "phase": pod.phase(),
        "ready": pod.condition_true("Ready"),
        "restart_count": restarts,
    })
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
