//! What `orb serve` knows about nodes: their facts (instance type, zone, region, capacity
//! type, CPU, memory, Ready) from a Node watch, and the Karpenter disruptions announced for
//! them from a watch of core/v1 Events about Nodes. Machines on a node carry its facts, and a
//! machine whose node is being disrupted says so in its status and in `getReturnRequests`.
//!
//! Karpenter records its events with client-go's recorder, which writes core/v1 Events and
//! puts those about a cluster-scoped object (a Node) in the `default` namespace, so the events
//! watcher reads core/v1 Events in `default` with `involvedObject.kind=Node` (a Role there is
//! enough; no cluster-wide read of events).
//! Parsing is pure ([`NodeFacts::from_node`], [`disruption_from_event`]); [`NodeIndex`] holds
//! the results; the two `run_*` loops only feed it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use orb_core::provider::MachineObservation;
use serde_json::json;
use tokio::sync::watch;

use crate::metrics::{K8sMetrics, ReasonLabels};

/// How long a disruption event counts after it happened (as in ORB 1.8.5).
pub const DISRUPTION_TTL: Duration = Duration::from_secs(3600);

/// Where Node events live (client-go's recorder files events about cluster-scoped objects
/// under `default`).
pub const NODE_EVENTS_NAMESPACE: &str = "default";

/// The event field selector of the events watch.
pub const NODE_EVENTS_SELECTOR: &str = "involvedObject.kind=Node";

/// How the cloud bills a node: HostFactory's `priceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityType {
    OnDemand,
    Spot,
}

impl CapacityType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => "ondemand",
            Self::Spot => "spot",
        }
    }
}

/// What a node tells about the machines on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub region: Option<String>,
    pub capacity_type: Option<CapacityType>,
    /// `status.capacity.cpu` in millicores.
    pub cpu_millis: Option<u64>,
    /// `status.capacity.memory` in bytes.
    pub memory_bytes: Option<u64>,
    pub ready: bool,
}

/// The first label present among `keys`.
fn first_label<'a>(
    labels: &'a std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| labels.get(*k))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// A capacity-type label and how its values read.
type CapacityRule = (&'static str, fn(&str) -> Option<CapacityType>);

/// The capacity type from the first provider label that names one (Karpenter, EKS, GKE,
/// AKS, then GKE's spot/preemptible booleans). Unrecognised values fall through.
fn capacity_type(labels: &std::collections::BTreeMap<String, String>) -> Option<CapacityType> {
    use CapacityType::{OnDemand, Spot};
    let by_value: [CapacityRule; 4] = [
        ("karpenter.sh/capacity-type", |v| match v {
            "on-demand" | "reserved" => Some(OnDemand),
            "spot" => Some(Spot),
            _ => None,
        }),
        ("eks.amazonaws.com/capacityType", |v| match v {
            "ON_DEMAND" | "CAPACITY_BLOCK" => Some(OnDemand),
            "SPOT" => Some(Spot),
            _ => None,
        }),
        ("cloud.google.com/gke-provisioning", |v| match v {
            "standard" => Some(OnDemand),
            "spot" | "preemptible" => Some(Spot),
            _ => None,
        }),
        ("kubernetes.azure.com/scalesetpriority", |v| match v {
            "regular" => Some(OnDemand),
            "spot" => Some(Spot),
            _ => None,
        }),
    ];
    by_value
        .iter()
        .find_map(|(key, map)| labels.get(*key).and_then(|v| map(v.as_str())))
        .or_else(|| {
            [
                "cloud.google.com/gke-spot",
                "cloud.google.com/gke-preemptible",
            ]
            .iter()
            .any(|k| labels.get(*k).is_some_and(|v| v == "true"))
            .then_some(Spot)
        })
}

/// A Kubernetes quantity (`32`, `500m`, `256Gi`, `1.5G`, `1e3`) scaled by `scale` (1000 for
/// millicores, 1 for bytes), rounded up. None when it does not parse.
pub fn parse_quantity(text: &str, scale: f64) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => 10f64.powi(exp[1..].parse().ok()?),
        _ => return None,
    };
    let value = (number * factor * scale).ceil();
    (value.is_finite() && value >= 0.0).then_some(value as u64)
}

impl NodeFacts {
    pub fn from_node(node: &Node) -> Self {
        let labels = node.labels();
        let status = node.status.as_ref();
        let capacity = status.and_then(|s| s.capacity.as_ref());
        let quantity = |key: &str, scale: f64| {
            capacity
                .and_then(|c| c.get(key))
                .and_then(|q| parse_quantity(&q.0, scale))
        };
        Self {
            name: node.name_any(),
            instance_type: first_label(
                labels,
                &[
                    "node.kubernetes.io/instance-type",
                    "beta.kubernetes.io/instance-type",
                ],
            )
            .map(str::to_string),
            zone: first_label(
                labels,
                &[
                    "topology.kubernetes.io/zone",
                    "failure-domain.beta.kubernetes.io/zone",
                ],
            )
            .map(str::to_string),
            region: first_label(
                labels,
                &[
                    "topology.kubernetes.io/region",
                    "failure-domain.beta.kubernetes.io/region",
                ],
            )
            .map(str::to_string),
            capacity_type: capacity_type(labels),
            cpu_millis: quantity("cpu", 1000.0),
            memory_bytes: quantity("memory", 1.0),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        }
    }

    /// The facts as machines show them (`provider_data.node`, REST `node`).
    pub fn to_value(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "instance_type": self.instance_type,
            "zone": self.zone,
            "region": self.region,
            "capacity_type": self.capacity_type.map(CapacityType::as_str),
            "cpu_millis": self.cpu_millis,
            "memory_bytes": self.memory_bytes,
            "ready": self.ready,
        })
    }
}

/// Why Karpenter is taking a node away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drift,
    Consolidation,
    Expired,
    /// A Karpenter disruption whose method orb does not know; the message says it.
    Other,
}

impl DisruptionReason {
    /// The metric label (a closed set).
    pub fn label(self) -> &'static str {
        match self {
            Self::Underutilized => "underutilized",
            Self::Empty => "empty",
            Self::Drift => "drift",
            Self::Consolidation => "consolidation",
            Self::Expired => "expired",
            Self::Other => "other",
        }
    }

    fn from_method(method: &str) -> Self {
        let lower = method.trim().to_ascii_lowercase();
        let known = [
            ("underutil", Self::Underutilized),
            ("empt", Self::Empty),
            ("drift", Self::Drift),
            ("consolidat", Self::Consolidation),
            ("expir", Self::Expired),
        ];
        // The method leads ("Underutilized/Delete"); a free-form message may name it later.
        known
            .iter()
            .find(|(stem, _)| lower.starts_with(stem))
            .or_else(|| known.iter().find(|(stem, _)| lower.contains(stem)))
            .map_or(Self::Other, |(_, reason)| *reason)
    }
}

/// One Karpenter disruption of a node, from an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disruption {
    pub node: String,
    pub reason: DisruptionReason,
    /// The event's message (e.g. `Disrupting Node: Underutilized/Delete`).
    pub message: String,
    /// When the event last happened.
    pub at: Timestamp,
    /// Identifies one occurrence (event uid and count), so a relist does not count it twice.
    pub key: String,
}

impl Disruption {
    /// The sentence machines on the node show, e.g. "node kwok-node-1 is being disrupted by
    /// Karpenter: Underutilized".
    pub fn describe(&self) -> String {
        let what = match self.reason {
            DisruptionReason::Underutilized => "Underutilized".to_string(),
            DisruptionReason::Empty => "Empty".into(),
            DisruptionReason::Drift => "Drift".into(),
            DisruptionReason::Consolidation => "Consolidation".into(),
            DisruptionReason::Expired => "Expired".into(),
            DisruptionReason::Other => self.message.clone(),
        };
        format!("node {} is being disrupted by Karpenter: {what}", self.node)
    }

    fn expires_at(&self) -> Timestamp {
        self.at + SignedDuration::try_from(DISRUPTION_TTL).unwrap_or(SignedDuration::ZERO)
    }

    pub fn is_live(&self, now: Timestamp) -> bool {
        self.expires_at() > now
    }
}

/// Karpenter event reasons about a node that is *not* being taken away.
const NOT_DISRUPTING: &[&str] = &[
    "DisruptionBlocked",
    "DisruptionLaunching",
    "DisruptionWaitingReadiness",
    "Unconsolidatable",
];

/// Karpenter event reasons that announce a disruption (v1 `DisruptionTerminating`; older
/// releases and ORB's own reading: `Disrupted`).
const DISRUPTING: &[&str] = &["DisruptionTerminating", "Disrupted"];

const DISRUPTING_PREFIX: &str = "Disrupting Node:";

/// The disruption an Event announces, if it is a Karpenter disruption of a Node:
/// - v0: message `Disrupting Node: Underutilized/Delete`, `Disrupting Node: Empty/Delete`;
/// - v1: reason `DisruptionTerminating` (message `Disrupting Node: Underutilized`, `Empty`,
///   `Drifted`), or reason `Disrupted` with the method in the message;
///
/// `Consolidat*` methods become [`DisruptionReason::Consolidation`]. `DisruptionBlocked` and
/// the other "not now" reasons are not disruptions.
pub fn disruption_from_event(event: &Event) -> Option<Disruption> {
    let involved = &event.involved_object;
    if involved.kind.as_deref() != Some("Node") {
        return None;
    }
    let node = involved.name.clone().filter(|n| !n.is_empty())?;
    let reason = event.reason.as_deref().unwrap_or_default();
    if NOT_DISRUPTING.contains(&reason) {
        return None;
    }
    let message = event.message.as_deref().unwrap_or_default().trim();
    let method = match message.strip_prefix(DISRUPTING_PREFIX) {
        Some(rest) => rest.trim(),
        None if DISRUPTING.contains(&reason) => message,
        None => return None,
    };
    let at = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let count = event
        .series
        .as_ref()
        .and_then(|s| s.count)
        .or(event.count)
        .unwrap_or(1);
    Some(Disruption {
        node,
        reason: DisruptionReason::from_method(method),
        message: message.to_string(),
        at,
        key: format!(
            "{}#{count}",
            event.metadata.uid.as_deref().unwrap_or(&event.name_any())
        ),
    })
}

#[derive(Debug, Default)]
struct State {
    nodes: HashMap<String, NodeFacts>,
    /// Node name → its latest disruption.
    disruptions: HashMap<String, Disruption>,
    /// Occurrences already counted (key → when they expire).
    counted: HashMap<String, Timestamp>,
}

/// Node name → facts, and node name → latest live disruption. Shared by the watch loops
/// (writers) and status and reclaim reads.
#[derive(Debug, Default)]
pub struct NodeIndex {
    state: RwLock<State>,
    metrics: K8sMetrics,
}

impl NodeIndex {
    pub fn new(metrics: K8sMetrics) -> Self {
        Self {
            state: RwLock::default(),
            metrics,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn recount(&self, state: &State) {
        self.metrics.nodes.set(state.nodes.len() as i64);
    }

    /// Replaces every node (a fresh LIST).
    pub fn replace_nodes(&self, nodes: impl IntoIterator<Item = NodeFacts>) {
        let mut state = self.write();
        state.nodes = nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
        self.recount(&state);
    }

    pub fn upsert_node(&self, facts: NodeFacts) {
        let mut state = self.write();
        state.nodes.insert(facts.name.clone(), facts);
        self.recount(&state);
    }

    pub fn remove_node(&self, name: &str) {
        let mut state = self.write();
        state.nodes.remove(name);
        self.recount(&state);
    }

    pub fn node(&self, name: &str) -> Option<NodeFacts> {
        self.read().nodes.get(name).cloned()
    }

    pub fn node_count(&self) -> usize {
        self.read().nodes.len()
    }

    /// Records `d` if it is still live at `now` and not older than what the node has; counts
    /// each occurrence once. True when it became the node's disruption.
    pub fn record_disruption(&self, d: Disruption, now: Timestamp) -> bool {
        if !d.is_live(now) {
            return false;
        }
        let mut state = self.write();
        state.counted.retain(|_, expires| *expires > now);
        if state
            .counted
            .insert(d.key.clone(), d.expires_at())
            .is_none()
        {
            self.metrics
                .node_disruptions
                .get_or_create(&ReasonLabels {
                    reason: d.reason.label(),
                })
                .inc();
        }
        state.disruptions.retain(|_, old| old.is_live(now));
        if state
            .disruptions
            .get(&d.node)
            .is_some_and(|old| old.at > d.at)
        {
            return false;
        }
        state.disruptions.insert(d.node.clone(), d);
        true
    }

    /// The node's disruption if one is live at `now`.
    pub fn disruption(&self, node: &str, now: Timestamp) -> Option<Disruption> {
        self.read()
            .disruptions
            .get(node)
            .filter(|d| d.is_live(now))
            .cloned()
    }
}

/// Adds what the index knows of the pod's node to a machine observation: instance type and
/// capacity type (HostFactory's `instanceType`/`priceType`), the facts under
/// `provider_data.node`, and a live disruption in the status reason.
pub fn annotate_observation(
    observation: &mut MachineObservation,
    facts: Option<&NodeFacts>,
    disruption: Option<&Disruption>,
) {
    if let Some(facts) = facts {
        if let Some(instance_type) = &facts.instance_type {
            observation.instance_type = Some(instance_type.clone());
        }
        if let Some(capacity) = facts.capacity_type {
            observation.price_type = Some(capacity.as_str().to_string());
        }
        if let Some(data) = observation.provider_data.as_object_mut() {
            data.insert("node".into(), facts.to_value());
        }
    }
    if let Some(d) = disruption {
        let said = d.describe();
        observation.status_reason = Some(match observation.status_reason.take() {
            Some(reason) if !reason.contains(&said) => format!("{reason}; {said}"),
            Some(reason) => reason,
            None => said,
        });
    }
}

/// True once shutdown was asked for (the watcher backs off on errors by itself).
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow()
}

/// Watches every Node and keeps `index` current until `shutdown` turns true.
/// Needs `get`, `list`, `watch` on `nodes` (cluster-scoped).
pub async fn run_node_watch(
    index: Arc<NodeIndex>,
    client: Client,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Node> = Api::all(client);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: Vec<NodeFacts> = Vec::new();
    while !stopping(&shutdown) {
        let item = tokio::select! {
            _ = shutdown.changed() => return,
            item = stream.next() => item,
        };
        match item {
            None => return,
            Some(Ok(watcher::Event::Init)) => listing.clear(),
            Some(Ok(watcher::Event::InitApply(node))) => listing.push(NodeFacts::from_node(&node)),
            Some(Ok(watcher::Event::InitDone)) => index.replace_nodes(listing.drain(..)),
            Some(Ok(watcher::Event::Apply(node))) => index.upsert_node(NodeFacts::from_node(&node)),
            Some(Ok(watcher::Event::Delete(node))) => index.remove_node(&node.name_any()),
            Some(Err(e)) => tracing::warn!(
                "node watch failed: {e}; retrying with backoff (needs get/list/watch on nodes)"
            ),
        }
    }
}

/// Watches core/v1 Events about Nodes (namespace `default`) and records Karpenter
/// disruptions in `index` until `shutdown` turns true. Needs `get`, `list`, `watch` on
/// `events` (core group) in `default`.
pub async fn run_event_watch(
    index: Arc<NodeIndex>,
    client: Client,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Event> = Api::namespaced(client, NODE_EVENTS_NAMESPACE);
    let config = watcher::Config::default().fields(NODE_EVENTS_SELECTOR);
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    while !stopping(&shutdown) {
        let item = tokio::select! {
            _ = shutdown.changed() => return,
            item = stream.next() => item,
        };
        let event = match item {
            None => return,
            Some(Ok(watcher::Event::InitApply(e) | watcher::Event::Apply(e))) => e,
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                tracing::warn!(
                    "node events watch failed: {e}; retrying with backoff (needs get/list/watch on events in namespace default)"
                );
                continue;
            }
        };
        if let Some(d) = disruption_from_event(&event) {
            let said = d.describe();
            if index.record_disruption(d, Timestamp::now()) {
                tracing::info!("{said}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
