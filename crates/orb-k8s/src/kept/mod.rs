//! What orb keeps of a pod: the fields the pod readers ([`crate::pod_read::PodRead`]) use,
//! and nothing else. The watch cache of `orb serve` holds pods this way, and a status read
//! turns a LIST's pods into it too, so every reader sees one shape.
//!
//! Not a `Pod`: k8s-openapi's `Pod` holds its `PodSpec` (1.5 KB) and `PodStatus` (0.6 KB)
//! inline, and each `ContainerStatus` is 0.75 KB even when nearly every field is empty. At
//! 50,000 cached pods every such byte is 50 MB. Readers read it through [`PodRead`], which
//! has no accessor for a field not kept here; [`Kept::to_pod`] rebuilds a `Pod` for the few
//! callers that want one (tests and the orphan GC).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use orb_core::shared::Shared;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use orb_core::provider::MachineObservation;
use orb_core::template::ProviderApi;

use crate::machine_state::observe_pod;
use crate::pod_read::{ConditionRead, ContainerRead, PodRead, StateRead, shared_provider_data_of};

pub(crate) mod protobuf;

/// Also decoded straight from a pod's JSON (a LIST page, a watch event): the fields not kept
/// are skipped by the parser, never built, which at 5,000 pods is most of a LIST's decoding.
/// `kept_decodes_as_the_kept_original` holds the two ways to the same value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "KeptWire")]
pub struct Kept {
    /// Less `managedFields`, and less `labels`, which are kept in [`Kept::labels`].
    pub(crate) metadata: ObjectMeta,
    spec: Option<KeptSpec>,
    status: Option<KeptStatus>,
    /// The pod's labels, shared as they are with the tags of every observation of it (and,
    /// through the store's kept machine lists, with its machine): a status read copies a
    /// reference count where it copied a map of strings.
    pub(crate) labels: Shared<BTreeMap<String, String>>,
    /// The provider data and the observation status reads derive from this pod, derived at
    /// the first read and shared the same way (the provider data also with every kept pod
    /// whose provider data is equal).
    derived: Derived,
}

/// A pod's JSON as decoded, before its labels move out of its metadata.
#[derive(Deserialize)]
struct KeptWire {
    /// Less `managedFields`.
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<KeptSpec>,
    #[serde(default)]
    status: Option<KeptStatus>,
}

impl From<KeptWire> for Kept {
    fn from(wire: KeptWire) -> Self {
        Self::new(wire.metadata, wire.spec, wire.status)
    }
}

/// See [`Kept::derived`]. Equal whatever it holds: it follows from the other fields. A
/// `Kept` is not changed once read (the cache hands out `Arc<Kept>`); one that was would
/// have to be a fresh value for this to be right.
#[derive(Debug, Clone, Default)]
struct Derived {
    provider_data: OnceLock<Shared<Value>>,
    /// The observation of the pod as a machine of this kind and resource (the first asked
    /// for; a pod is only ever observed as one): a status read through `orb serve` of a
    /// 5,000-pod request made and dropped 5,000 observations, a quarter of its work. The
    /// resource it was made for is the observation's own `resource_id`, not a copy beside it
    /// (3 MB at 50,000 pods).
    observation: OnceLock<(ProviderApi, Shared<MachineObservation>)>,
}

impl PartialEq for Derived {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// `metadata` as the apiserver sends it, less `managedFields` (skipped, not decoded: its
/// `fieldsV1` trees are the largest part of a pod's metadata).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

pub(crate) fn meta_without_managed_fields<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<ObjectMeta, D::Error> {
    let Some(m) = Option::<MetaWire>::deserialize(d)? else {
        return Ok(ObjectMeta::default());
    };
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// Lets `Api<Kept>` LIST and WATCH pods, decoding each into what is kept.
impl kube::Resource for Kept {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::KIND.into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::GROUP.into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::VERSION.into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptSpec {
    node_name: Option<String>,
    restart_policy: Option<String>,
    termination_grace_period_seconds: Option<i64>,
    priority: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct KeptStatus {
    phase: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "hostIP")]
    host_ip: Option<String>,
    conditions: Option<Vec<KeptCondition>>,
    #[serde(rename = "containerStatuses")]
    containers: Option<Vec<KeptContainer>>,
    #[serde(rename = "initContainerStatuses")]
    init_containers: Option<Vec<KeptContainer>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct KeptCondition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    reason: Option<String>,
    message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptContainer {
    #[serde(default)]
    name: String,
    #[serde(default)]
    restart_count: i32,
    state: Option<KeptState>,
    last_state: Option<KeptState>,
}

/// A container state: which of the three it is, and the reasons and exit code readers use.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "StateWire")]
struct KeptState {
    running: bool,
    waiting: Option<(Option<String>, Option<String>)>,
    terminated: Option<(Option<String>, i32)>,
}

#[derive(Deserialize)]
struct StateWire {
    running: Option<IgnoredAny>,
    waiting: Option<WaitingWire>,
    terminated: Option<TerminatedWire>,
}

#[derive(Deserialize)]
struct WaitingWire {
    reason: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminatedWire {
    reason: Option<String>,
    #[serde(default)]
    exit_code: i32,
}

impl From<StateWire> for KeptState {
    fn from(s: StateWire) -> Self {
        Self {
            running: s.running.is_some(),
            waiting: s.waiting.map(|w| (w.reason, w.message)),
            terminated: s.terminated.map(|t| (t.reason, t.exit_code)),
        }
    }
}

impl From<Pod> for Kept {
    fn from(pod: Pod) -> Self {
        let mut metadata = pod.metadata;
        metadata.managed_fields = None;
        Self::new(
            metadata,
            pod.spec.map(|spec| KeptSpec {
                node_name: spec.node_name,
                restart_policy: spec.restart_policy,
                termination_grace_period_seconds: spec.termination_grace_period_seconds,
                priority: spec.priority,
            }),
            pod.status.map(KeptStatus::from),
        )
    }
}

impl From<PodStatus> for KeptStatus {
    fn from(status: PodStatus) -> Self {
        let containers = |list: Option<Vec<ContainerStatus>>| {
            list.map(|l| l.into_iter().map(Into::into).collect())
        };
        Self {
            phase: status.phase,
            reason: status.reason,
            message: status.message,
            pod_ip: status.pod_ip,
            host_ip: status.host_ip,
            conditions: status.conditions.map(|all| {
                all.into_iter()
                    .map(|c| KeptCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                    })
                    .collect()
            }),
            containers: containers(status.container_statuses),
            init_containers: containers(status.init_container_statuses),
        }
    }
}

impl From<ContainerStatus> for KeptContainer {
    fn from(c: ContainerStatus) -> Self {
        Self {
            name: c.name,
            restart_count: c.restart_count,
            state: c.state.map(KeptState::from),
            last_state: c.last_state.map(KeptState::from),
        }
    }
}

impl From<ContainerState> for KeptState {
    fn from(s: ContainerState) -> Self {
        Self {
            running: s.running.is_some(),
            waiting: s.waiting.map(|w| (w.reason, w.message)),
            terminated: s.terminated.map(|t| (t.reason, t.exit_code)),
        }
    }
}

impl Kept {
    fn new(mut metadata: ObjectMeta, spec: Option<KeptSpec>, status: Option<KeptStatus>) -> Self {
        let labels = metadata.labels.take().unwrap_or_default().into();
        Self {
            metadata,
            spec,
            status,
            labels,
            derived: Derived::default(),
        }
    }

    /// The value of the label `key`.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The pod with the kept fields, everything else unset.
    pub(crate) fn to_pod(&self) -> Pod {
        let mut metadata = self.metadata.clone();
        metadata.labels = (!self.labels.is_empty()).then(|| (*self.labels).clone());
        Pod {
            metadata,
            spec: self.spec.as_ref().map(|s| PodSpec {
                node_name: s.node_name.clone(),
                restart_policy: s.restart_policy.clone(),
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                priority: s.priority,
                ..Default::default()
            }),
            status: self.status.as_ref().map(KeptStatus::to_status),
        }
    }
}

impl KeptStatus {
    fn to_status(&self) -> PodStatus {
        let containers = |list: &Option<Vec<KeptContainer>>| {
            list.as_ref()
                .map(|l| l.iter().map(KeptContainer::to_status).collect())
        };
        PodStatus {
            phase: self.phase.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            pod_ip: self.pod_ip.clone(),
            host_ip: self.host_ip.clone(),
            conditions: self.conditions.as_ref().map(|all| {
                all.iter()
                    .map(|c| PodCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        ..Default::default()
                    })
                    .collect()
            }),
            container_statuses: containers(&self.containers),
            init_container_statuses: containers(&self.init_containers),
            ..Default::default()
        }
    }
}

impl KeptContainer {
    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            restart_count: self.restart_count,
            state: self.state.as_ref().map(KeptState::to_state),
            last_state: self.last_state.as_ref().map(KeptState::to_state),
            ..Default::default()
        }
    }
}

impl KeptState {
    fn to_state(&self) -> ContainerState {
        ContainerState {
            running: self.running.then(ContainerStateRunning::default),
            waiting: self
                .waiting
                .as_ref()
                .map(|(reason, message)| ContainerStateWaiting {
                    reason: reason.clone(),
                    message: message.clone(),
                }),
            terminated: self.terminated.as_ref().map(|(reason, exit_code)| {
                ContainerStateTerminated {
                    reason: reason.clone(),
                    exit_code: *exit_code,
                    ..Default::default()
                }
            }),
        }
    }
}

impl KeptState {
    fn read(&self) -> StateRead<'_> {
        StateRead {
            waiting: self
                .waiting
                .as_ref()
                .map(|(reason, message)| (reason.as_deref(), message.as_deref())),
            terminated: self
                .terminated
                .as_ref()
                .map(|(reason, code)| (reason.as_deref(), *code)),
        }
    }
}

impl PodRead for Kept {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn tags(&self) -> Shared<BTreeMap<String, String>> {
        self.labels.clone()
    }

    fn provider_data(&self) -> Shared<Value> {
        self.derived
            .provider_data
            .get_or_init(|| shared_provider_data_of(self))
            .clone()
    }

    fn observation(&self, kind: ProviderApi, resource_id: &str) -> Shared<MachineObservation> {
        let (seen_kind, observation) = self
            .derived
            .observation
            .get_or_init(|| (kind, observe_pod(self, kind, resource_id).into()));
        if *seen_kind == kind && observation.resource_id.as_deref() == Some(resource_id) {
            observation.clone()
        } else {
            observe_pod(self, kind, resource_id).into()
        }
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
            .map(|c| ConditionRead {
                type_: &c.type_,
                status: &c.status,
                reason: c.reason.as_deref(),
                message: c.message.as_deref(),
            })
    }

    fn containers(&self, init: bool) -> impl Iterator<Item = ContainerRead<'_>> {
        self.status
            .as_ref()
            .and_then(|s| {
                if init {
                    s.init_containers.as_deref()
                } else {
                    s.containers.as_deref()
                }
            })
            .unwrap_or_default()
            .iter()
            .map(|c| ContainerRead {
                name: &c.name,
                restart_count: c.restart_count,
                state: c.state.as_ref().map(KeptState::read).unwrap_or_default(),
                last_state: c
                    .last_state
                    .as_ref()
                    .map(KeptState::read)
                    .unwrap_or_default(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine_state::{observe_pod, pending_reason, pod_age};
    use crate::release_plan::PodRank;
    use jiff::Timestamp;
    use orb_core::ProviderApi;
    use serde_json::json;

    fn recorded() -> Vec<Pod> {
        [
            include_str!("../../tests/data/pod_image_pull_backoff.json"),
            include_str!("../../tests/data/pod_init_create_config_error.json"),
            include_str!("../../tests/data/pod_crash_looping.json"),
            include_str!("../../tests/data/pod_unschedulable.json"),
        ]
        .into_iter()
        .map(|text| serde_json::from_str(text).expect("recorded pod parses"))
        .collect()
    }

    /// A pod as a kubelet (or KWOK) reports it, with every heavy field the cache drops.
    fn reported(phase: &str, extra_status: serde_json::Value) -> Pod {
        let mut status = json!({
            "phase": phase,
            "hostIP": "10.0.0.4", "hostIPs": [{"ip": "10.0.0.4"}],
            "podIP": "10.244.1.9", "podIPs": [{"ip": "10.244.1.9"}],
            "qosClass": "BestEffort", "startTime": "2026-12-05T09:00:01Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-05T09:00:00Z"},
                {"type": "Ready", "status": if phase == "Running" { "True" } else { "False" },
                 "reason": "PodCompleted", "lastProbeTime": null},
            ],
            "containerStatuses": [{
                "name": "orb", "image": "busybox:1.36", "imageID": "docker.io/library/busybox@sha256:9ae97d36",
                "containerID": "containerd://4f1c", "ready": true, "started": true, "restartCount": 1,
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "state": {"running": {"startedAt": "2026-12-05T09:00:02Z"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "killed", "startedAt": "2026-12-05T09:00:01Z"}},
            }],
        });
        if let (Some(s), Some(extra)) = (status.as_object_mut(), extra_status.as_object()) {
            s.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "metadata": {
                "name": "orb-1-0", "namespace": "grid", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2026-12-05T09:00:00Z",
                "labels": {"orb.io/request-id": "req-1", "orb.io/managed": "true"},
                "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-100"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {
                "nodeName": "kwok-node-1", "restartPolicy": "Always", "priority": 5,
                "terminationGracePeriodSeconds": 45,
                "containers": [{"name": "orb", "image": "busybox:1.36", "env": [{"name": "X", "value": "1"}]}],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
            },
            "status": status,
        }))
        .unwrap()
    }

    fn examples() -> Vec<Pod> {
        let mut pods = recorded();
        pods.push(reported("Running", json!({})));
        pods.push(reported("Pending", json!({
            "containerStatuses": [{"name": "orb", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}}],
        })));
        pods.push(reported("Failed", json!({
            "reason": "Evicted", "message": "the node was low on memory",
            "containerStatuses": [{"name": "orb", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}}}],
        })));
        pods.push(reported(
            "Failed",
            json!({"reason": "Evicted", "containerStatuses": []}),
        ));
        pods.push(reported("Succeeded", json!({})));
        pods.push(reported("Unknown", json!({})));
        pods.push(reported("Running", json!({
            "initContainerStatuses": [{"name": "fetch", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}}}],
        })));
        let mut disrupted = reported("Running", json!({}));
        if let Some(cs) = disrupted
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
        {
            cs.push(PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("PreemptionByScheduler".into()),
                message: Some("preempted".into()),
                ..Default::default()
            });
        }
        pods.push(disrupted);
        let mut deleting = reported("Running", json!({}));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        deleting.metadata.deletion_grace_period_seconds = Some(30);
        pods.push(deleting);
        pods.push(Pod::default());
        pods
    }

    /// Everything the pod readers derive from a pod, through [`PodRead`].
    fn readings(pod: &impl PodRead) -> String {
        let now: Timestamp = "2026-12-05T10:00:00Z".parse().unwrap();
        format!(
            "{:?}",
            (
                ProviderApi::ALL
                    .iter()
                    .map(|kind| observe_pod(pod, *kind, "res"))
                    .collect::<Vec<_>>(),
                pending_reason(pod),
                pod_age(pod, now),
                // A `Kept` keeps its labels out of its metadata; both read them as tags.
                ObjectMeta {
                    labels: None,
                    ..pod.meta().clone()
                },
                pod.tags(),
                (pod.node_name(), pod.restart_policy()),
                pod.termination_grace_period_seconds(),
                (pod.phase(), pod.status_reason(), pod.status_message()),
                (pod.pod_ip(), pod.host_ip()),
                pod.conditions().collect::<Vec<_>>(),
                pod.containers(false).collect::<Vec<_>>(),
                pod.containers(true).collect::<Vec<_>>(),
            )
        )
    }

    /// What the callers of [`Kept::to_pod`] (the orphan GC, release ranking) read of a `Pod`.
    fn pod_readings(pod: &Pod) -> String {
        let spec = pod.spec.as_ref();
        format!(
            "{}{:?}",
            readings(pod),
            (
                PodRank::of(pod),
                spec.map(|s| (
                    &s.node_name,
                    &s.restart_policy,
                    s.termination_grace_period_seconds,
                    s.priority
                )),
            )
        )
    }

    #[test]
    fn a_kept_pod_reads_as_the_original() {
        for mut pod in examples() {
            let kept = Kept::from(pod.clone());
            pod.metadata.managed_fields = None;
            let name = pod.metadata.name.clone().unwrap_or_default();
            assert_eq!(readings(&kept), readings(&pod), "{name}");
            assert_eq!(pod_readings(&kept.to_pod()), pod_readings(&pod), "{name}");
        }
    }

    #[test]
    fn reads_of_a_kept_pod_share_its_tags_and_provider_data() {
        for pod in examples() {
            let kept = Kept::from(pod);
            let first = observe_pod(&kept, ProviderApi::Pod, "res");
            let again = observe_pod(&kept, ProviderApi::Deployment, "res");
            assert!(Shared::ptr_eq(&first.tags, &again.tags), "{}", kept.name());
            assert!(
                Shared::ptr_eq(&first.provider_data, &again.provider_data),
                "{}",
                kept.name()
            );
            // A copy of the pod (a fresh value) derives its own, equal.
            let copy = kept.clone();
            assert_eq!(copy, kept);
            assert_eq!(observe_pod(&copy, ProviderApi::Pod, "res"), first);
        }
    }

    /// A watch cache hands out one observation per pod version: asked again as the same
    /// machine, a kept pod gives the very observation it gave before; asked as another kind or
    /// resource it observes afresh. Each equals what `observe_pod` makes of the original.
    #[test]
    fn a_kept_pod_is_observed_once_as_each_machine() {
        for pod in examples() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let kept = Kept::from(pod.clone());
            let first = kept.observation(ProviderApi::Pod, "res");
            assert_eq!(*first, observe_pod(&pod, ProviderApi::Pod, "res"), "{name}");
            let again = kept.observation(ProviderApi::Pod, "res");
            assert!(Shared::ptr_eq(&first, &again), "{name}: not made again");
            for (kind, resource) in [(ProviderApi::StatefulSet, "res"), (ProviderApi::Pod, "sts")] {
                let other = kept.observation(kind, resource);
                assert_eq!(*other, observe_pod(&pod, kind, resource), "{name}");
                assert!(!Shared::ptr_eq(&first, &other), "{name}");
            }
            // A pod read from the apiserver (not kept) observes every time.
            assert_eq!(pod.observation(ProviderApi::Pod, "res"), first, "{name}");
        }
    }

    #[test]
    fn kept_decodes_as_the_kept_original() {
        for pod in examples() {
            let json = serde_json::to_string(&pod).unwrap();
            let decoded: Kept = serde_json::from_str(&json).unwrap();
            let name = pod.metadata.name.clone().unwrap_or_default();
            assert_eq!(decoded, Kept::from(pod), "{name}");
        }
        // The apiserver writes `null` for some unset fields; they read as unset.
        let decoded: Kept = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": null, "managedFields": null},
            "spec": null,
            "status": {"phase": "Pending", "conditions": null, "containerStatuses": [
                {"name": "c", "restartCount": 0, "state": {"running": null, "waiting": {"reason": null}}},
            ]},
        }))
        .unwrap();
        assert_eq!(decoded.name(), "p");
        assert_eq!(decoded.phase(), Some("Pending"));
        let c = decoded.containers(false).next().unwrap();
        assert_eq!(c.state.waiting, Some((None, None)));
        assert!(decoded.spec.is_none());
    }

    #[test]
    fn what_no_reader_uses_is_dropped() {
        let rebuilt = Kept::from(reported("Running", json!({}))).to_pod();
        assert!(rebuilt.metadata.managed_fields.is_none());
        let spec = rebuilt.spec.unwrap();
        assert!(spec.containers.is_empty() && spec.volumes.is_none());
        let status = rebuilt.status.unwrap();
        assert!(
            status.host_ips.is_none() && status.pod_ips.is_none() && status.start_time.is_none()
        );
        let c = &status.container_statuses.unwrap()[0];
        assert_eq!((c.image.as_str(), c.image_id.as_str()), ("", ""));
        assert!(c.container_id.is_none() && c.volume_mounts.is_none());
        let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (
                last.exit_code,
                last.reason.as_deref(),
                last.message.as_deref()
            ),
            (137, Some("OOMKilled"), None)
        );
    }
}
