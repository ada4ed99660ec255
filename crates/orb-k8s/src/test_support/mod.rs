//! Test helpers for orb-k8s: a [`Pod`] builder and [`ApiRecorder`], an in-process stand-in for
//! the apiserver that records what a handler sends.
//!
//! Compiled for orb-k8s's own tests and, for other crates, behind the `test-support` feature
//! (switch it on in `[dev-dependencies]` only).

mod recorder;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub use recorder::{ApiRecorder, RecordedCall};

/// A [`Pod`] named `name` with nothing else set: no namespace, labels, spec or status. Each
/// builder method sets what a test relies on.
pub fn pod(name: &str) -> PodBuilder {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    PodBuilder(pod)
}

/// Builds a [`Pod`]; start it with [`pod`].
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the Pod"]
pub struct PodBuilder(Pod);

impl PodBuilder {
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }
    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }
    pub fn resource_version(mut self, version: &str) -> Self {
        self.0.metadata.resource_version = Some(version.into());
        self
    }
    /// `metadata.creationTimestamp`, an RFC 3339 time.
    pub fn created(mut self, rfc3339: &str) -> Self {
        self.0.metadata.creation_timestamp =
            Some(Time(rfc3339.parse().expect("an RFC 3339 creation time")));
        self
    }
    /// Adds one label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }
    /// Adds one annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }
    /// `spec.nodeName`: the pod is scheduled there.
    pub fn node(mut self, node: &str) -> Self {
        self.0.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.into());
        self
    }
    /// `status.phase`: `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub fn phase(mut self, phase: &str) -> Self {
        self.status().phase = Some(phase.into());
        self
    }
    /// A `Ready` condition, `True` or `False`, replacing any earlier one.
    pub fn ready(mut self, ready: bool) -> Self {
        let conditions = self.status().conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        });
        self
    }
    /// Scheduled on `node`, `Running` and Ready: a pod the ReplicaSet ranks last for removal.
    pub fn running_on(self, node: &str) -> Self {
        self.node(node).phase("Running").ready(true)
    }
    /// `status.podIP`.
    pub fn ip(mut self, ip: &str) -> Self {
        self.status().pod_ip = Some(ip.into());
        self
    }
    /// Any other change, for the fields without a method of their own.
    pub fn with(mut self, change: impl FnOnce(&mut Pod)) -> Self {
        change(&mut self.0);
        self
    }
    pub fn build(self) -> Pod {
        self.0
    }

    fn status(&mut self) -> &mut PodStatus {
        self.0.status.get_or_insert_with(PodStatus::default)
    }
}
