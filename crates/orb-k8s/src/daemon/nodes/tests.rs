use super::*;
use orb_core::machine::MachineStatus;
use rstest::rstest;
use serde_json::{Value, json};

fn node(labels: Value, capacity: Value, ready: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n-1", "labels": labels},
        "status": {
            "capacity": capacity,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }))
    .unwrap()
}

fn labelled(labels: Value) -> NodeFacts {
    NodeFacts::from_node(&node(labels, json!({}), "True"))
}

fn event(kind: &str, reason: &str, message: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": "n-1.17a", "namespace": "default", "uid": "e-1"},
        "involvedObject": {"kind": kind, "name": "kwok-node-1"},
        "reason": reason,
        "message": message,
        "lastTimestamp": "2026-11-30T08:00:00Z",
        "count": 2,
    }))
    .unwrap()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[rstest]
#[case::ga(json!({"node.kubernetes.io/instance-type": "m5.large"}), Some("m5.large"))]
#[case::beta_fallback(json!({"beta.kubernetes.io/instance-type": "m4.xlarge"}), Some("m4.xlarge"))]
#[case::ga_wins(json!({"node.kubernetes.io/instance-type": "m5.large", "beta.kubernetes.io/instance-type": "old"}), Some("m5.large"))]
#[case::none(json!({}), None)]
fn instance_type_from_labels(#[case] labels: Value, #[case] want: Option<&str>) {
    assert_eq!(labelled(labels).instance_type.as_deref(), want);
}

#[rstest]
#[case::topology(json!({"topology.kubernetes.io/zone": "us-east-1a", "topology.kubernetes.io/region": "us-east-1"}), Some("us-east-1a"), Some("us-east-1"))]
#[case::failure_domain(json!({"failure-domain.beta.kubernetes.io/zone": "eu-west-1b", "failure-domain.beta.kubernetes.io/region": "eu-west-1"}), Some("eu-west-1b"), Some("eu-west-1"))]
#[case::topology_wins(json!({"topology.kubernetes.io/zone": "a", "failure-domain.beta.kubernetes.io/zone": "b"}), Some("a"), None)]
#[case::none(json!({}), None, None)]
fn zone_and_region_from_labels(
    #[case] labels: Value,
    #[case] zone: Option<&str>,
    #[case] region: Option<&str>,
) {
    let facts = labelled(labels);
    assert_eq!(facts.zone.as_deref(), zone);
    assert_eq!(facts.region.as_deref(), region);
}

#[rstest]
#[case::karpenter_on_demand(json!({"karpenter.sh/capacity-type": "on-demand"}), Some(CapacityType::OnDemand))]
#[case::karpenter_reserved(json!({"karpenter.sh/capacity-type": "reserved"}), Some(CapacityType::OnDemand))]
#[case::karpenter_spot(json!({"karpenter.sh/capacity-type": "spot"}), Some(CapacityType::Spot))]
#[case::eks_on_demand(json!({"eks.amazonaws.com/capacityType": "ON_DEMAND"}), Some(CapacityType::OnDemand))]
#[case::eks_spot(json!({"eks.amazonaws.com/capacityType": "SPOT"}), Some(CapacityType::Spot))]
#[case::gke_provisioning_standard(json!({"cloud.google.com/gke-provisioning": "standard"}), Some(CapacityType::OnDemand))]
#[case::gke_provisioning_spot(json!({"cloud.google.com/gke-provisioning": "spot"}), Some(CapacityType::Spot))]
#[case::gke_provisioning_preemptible(json!({"cloud.google.com/gke-provisioning": "preemptible"}), Some(CapacityType::Spot))]
#[case::aks_regular(json!({"kubernetes.azure.com/scalesetpriority": "regular"}), Some(CapacityType::OnDemand))]
#[case::aks_spot(json!({"kubernetes.azure.com/scalesetpriority": "spot"}), Some(CapacityType::Spot))]
#[case::gke_spot_bool(json!({"cloud.google.com/gke-spot": "true"}), Some(CapacityType::Spot))]
#[case::gke_preemptible_bool(json!({"cloud.google.com/gke-preemptible": "true"}), Some(CapacityType::Spot))]
#[case::gke_spot_false(json!({"cloud.google.com/gke-spot": "false"}), None)]
#[case::karpenter_first(json!({"karpenter.sh/capacity-type": "on-demand", "eks.amazonaws.com/capacityType": "SPOT"}), Some(CapacityType::OnDemand))]
#[case::unknown_value_falls_through(json!({"karpenter.sh/capacity-type": "weird", "kubernetes.azure.com/scalesetpriority": "spot"}), Some(CapacityType::Spot))]
#[case::none(json!({"type": "kwok"}), None)]
fn capacity_type_first_match(#[case] labels: Value, #[case] want: Option<CapacityType>) {
    assert_eq!(labelled(labels).capacity_type, want);
}

#[rstest]
#[case::whole_cores("32", 1000.0, Some(32_000))]
#[case::millicores("500m", 1000.0, Some(500))]
#[case::fractional_cores("1.5", 1000.0, Some(1500))]
#[case::gibibytes("256Gi", 1.0, Some(274_877_906_944))]
#[case::kibibytes("16318976Ki", 1.0, Some(16_710_631_424))]
#[case::megabytes("128M", 1.0, Some(128_000_000))]
#[case::exponent("1e3", 1.0, Some(1000))]
#[case::garbage("lots", 1.0, None)]
#[case::bad_suffix("3Xi", 1.0, None)]
fn quantities(#[case] text: &str, #[case] scale: f64, #[case] want: Option<u64>) {
    assert_eq!(parse_quantity(text, scale), want);
}

#[test]
fn node_facts_carry_capacity_and_readiness() {
    let ready = NodeFacts::from_node(&node(
        json!({"node.kubernetes.io/instance-type": "kwok.large"}),
        json!({"cpu": "32", "memory": "256Gi", "pods": "250"}),
        "True",
    ));
    assert_eq!(ready.name, "n-1");
    assert_eq!(ready.cpu_millis, Some(32_000));
    assert_eq!(ready.memory_bytes, Some(256 * 1024 * 1024 * 1024));
    assert!(ready.ready);
    let not_ready = NodeFacts::from_node(&node(json!({}), json!({}), "Unknown"));
    assert!(!not_ready.ready);
    assert_eq!(not_ready.cpu_millis, None);
}

#[rstest]
#[case::v0_underutilized(
    "DisruptionTerminating",
    "Disrupting Node: Underutilized/Delete",
    DisruptionReason::Underutilized
)]
#[case::v0_empty(
    "DisruptionTerminating",
    "Disrupting Node: Empty/Delete",
    DisruptionReason::Empty
)]
#[case::v0_message_any_reason("", "Disrupting Node: Empty/Delete", DisruptionReason::Empty)]
#[case::v0_consolidation(
    "DisruptionTerminating",
    "Disrupting Node: Consolidation/Delete",
    DisruptionReason::Consolidation
)]
#[case::v0_consolidating(
    "DisruptionTerminating",
    "Disrupting Node: Consolidating/Replace",
    DisruptionReason::Consolidation
)]
#[case::v1_underutilized(
    "DisruptionTerminating",
    "Disrupting Node: Underutilized",
    DisruptionReason::Underutilized
)]
#[case::v1_drifted(
    "DisruptionTerminating",
    "Disrupting Node: Drifted",
    DisruptionReason::Drift
)]
#[case::v1_drift(
    "DisruptionTerminating",
    "Disrupting Node: Drift/Replace",
    DisruptionReason::Drift
)]
#[case::v1_expired(
    "DisruptionTerminating",
    "Disrupting Node: Expired",
    DisruptionReason::Expired
)]
#[case::disrupted_underutilized("Disrupted", "Underutilized", DisruptionReason::Underutilized)]
#[case::disrupted_empty("Disrupted", "Empty", DisruptionReason::Empty)]
#[case::disrupted_drift("Disrupted", "Drift", DisruptionReason::Drift)]
#[case::disrupted_consolidation(
    "Disrupted",
    "Consolidation/Delete",
    DisruptionReason::Consolidation
)]
#[case::disrupted_free_text(
    "Disrupted",
    "node was consolidated into a cheaper one",
    DisruptionReason::Consolidation
)]
#[case::disrupted_unknown_method("Disrupted", "Interruption: spot notice", DisruptionReason::Other)]
fn karpenter_disruption_events(
    #[case] reason: &str,
    #[case] message: &str,
    #[case] want: DisruptionReason,
) {
    let d = disruption_from_event(&event("Node", reason, message)).expect("a disruption");
    assert_eq!(d.reason, want);
    assert_eq!(d.node, "kwok-node-1");
    assert_eq!(d.message, message);
    assert_eq!(d.at, at("2026-11-30T08:00:00Z"));
    assert_eq!(d.key, "e-1#2");
}

#[rstest]
#[case::blocked(
    "DisruptionBlocked",
    "Cannot disrupt Node: state node is nominated for a pending pod"
)]
#[case::launching("DisruptionLaunching", "Launching NodeClaim: Underutilized")]
#[case::waiting(
    "DisruptionWaitingReadiness",
    "Waiting on readiness to continue disruption"
)]
#[case::unconsolidatable("Unconsolidatable", "Can't replace with a cheaper node")]
#[case::kubelet("NodeNotReady", "Node kwok-node-1 status is now: NodeNotReady")]
fn other_node_events_are_not_disruptions(#[case] reason: &str, #[case] message: &str) {
    assert_eq!(disruption_from_event(&event("Node", reason, message)), None);
}

#[test]
fn events_about_other_kinds_are_ignored() {
    let e = event(
        "Pod",
        "DisruptionTerminating",
        "Disrupting Node: Empty/Delete",
    );
    assert_eq!(disruption_from_event(&e), None);
}

#[test]
fn the_newest_event_time_wins() {
    let mut e = event("Node", "Disrupted", "Empty");
    e.last_timestamp = None;
    e.count = None;
    e.event_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        at("2026-11-30T07:00:00Z"),
    ));
    let d = disruption_from_event(&e).unwrap();
    assert_eq!(d.at, at("2026-11-30T07:00:00Z"));
    assert_eq!(d.key, "e-1#1");
}

fn disruption(node: &str, key: &str, when: &str, reason: DisruptionReason) -> Disruption {
    Disruption {
        node: node.into(),
        reason,
        message: "m".into(),
        at: at(when),
        key: key.into(),
    }
}

#[test]
fn disruptions_live_an_hour_and_count_once() {
    let metrics = K8sMetrics::new();
    let index = NodeIndex::new(metrics.clone());
    let d = disruption(
        "n-1",
        "e-1#1",
        "2026-11-30T08:00:00Z",
        DisruptionReason::Empty,
    );
    let now = at("2026-11-30T08:10:00Z");
    assert!(index.record_disruption(d.clone(), now));
    assert!(
        index.record_disruption(d.clone(), now),
        "a relist re-applies it"
    );
    let counted = |reason| {
        metrics
            .node_disruptions
            .get_or_create(&ReasonLabels { reason })
            .get()
    };
    assert_eq!(counted("empty"), 1, "one occurrence counts once");
    assert_eq!(index.disruption("n-1", now), Some(d.clone()));
    assert_eq!(index.disruption("n-2", now), None);
    assert_eq!(index.disruption("n-1", at("2026-11-30T09:00:01Z")), None);

    let stale = disruption(
        "n-3",
        "e-3#1",
        "2026-11-30T06:00:00Z",
        DisruptionReason::Drift,
    );
    assert!(!index.record_disruption(stale, now), "older than an hour");
    assert_eq!(counted("drift"), 0);
}

#[test]
fn an_older_event_does_not_replace_a_newer_one() {
    let index = NodeIndex::new(K8sMetrics::new());
    let now = at("2026-11-30T08:30:00Z");
    let newer = disruption(
        "n-1",
        "b#1",
        "2026-11-30T08:20:00Z",
        DisruptionReason::Drift,
    );
    let older = disruption(
        "n-1",
        "a#1",
        "2026-11-30T08:00:00Z",
        DisruptionReason::Empty,
    );
    assert!(index.record_disruption(newer.clone(), now));
    assert!(!index.record_disruption(older, now));
    assert_eq!(index.disruption("n-1", now), Some(newer));
}

#[test]
fn nodes_are_replaced_updated_removed_and_counted() {
    let metrics = K8sMetrics::new();
    let index = NodeIndex::new(metrics.clone());
    let facts = |name: &str| NodeFacts {
        name: name.into(),
        ..labelled(json!({}))
    };
    index.replace_nodes([facts("a"), facts("b")]);
    assert_eq!(metrics.nodes.get(), 2);
    index.upsert_node(facts("c"));
    index.remove_node("a");
    assert_eq!(metrics.nodes.get(), 2);
    assert_eq!(index.node("a"), None);
    assert_eq!(index.node("c").unwrap().name, "c");
    index.replace_nodes([facts("z")]);
    assert_eq!(index.node_count(), 1);
}

#[test]
fn observations_get_node_facts_and_the_disruption() {
    let facts = NodeFacts::from_node(&node(
        json!({"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a",
               "karpenter.sh/capacity-type": "spot"}),
        json!({"cpu": "2", "memory": "8Gi"}),
        "True",
    ));
    let mut o = MachineObservation::new("p-0", MachineStatus::Running);
    o.instance_type = Some("k8s/Pod".into());
    o.provider_data = json!({"node_name": "n-1"}).into();
    let d = Disruption {
        node: "n-1".into(),
        ..disruption(
            "n-1",
            "k",
            "2026-11-30T08:00:00Z",
            DisruptionReason::Underutilized,
        )
    };
    annotate_observation(&mut o, Some(&facts), Some(&d));
    assert_eq!(o.instance_type.as_deref(), Some("m5.large"));
    assert_eq!(o.price_type.as_deref(), Some("spot"));
    assert_eq!(o.provider_data["node"]["zone"], "us-east-1a");
    assert_eq!(o.provider_data["node"]["cpu_millis"], 2000);
    assert_eq!(o.provider_data["node"]["memory_bytes"], 8u64 << 30);
    assert_eq!(o.provider_data["node_name"], "n-1");
    assert_eq!(
        o.status_reason.as_deref(),
        Some("node n-1 is being disrupted by Karpenter: Underutilized")
    );

    // A pending reason stays first; applying twice does not repeat the sentence.
    let mut pending = MachineObservation::new("p-1", MachineStatus::Pending);
    pending.status_reason = Some("ContainerCreating".into());
    annotate_observation(&mut pending, None, Some(&d));
    annotate_observation(&mut pending, None, Some(&d));
    assert_eq!(
        pending.status_reason.as_deref(),
        Some("ContainerCreating; node n-1 is being disrupted by Karpenter: Underutilized")
    );
}

#[test]
fn an_unknown_node_changes_nothing() {
    let mut o = MachineObservation::new("p-0", MachineStatus::Running);
    o.instance_type = Some("k8s/Pod".into());
    let before = o.clone();
    annotate_observation(&mut o, None, None);
    assert_eq!(o, before);
}

#[test]
fn other_disruptions_quote_the_event() {
    let d = Disruption {
        message: "Interruption: spot notice".into(),
        ..disruption("n-1", "k", "2026-11-30T08:00:00Z", DisruptionReason::Other)
    };
    assert_eq!(
        d.describe(),
        "node n-1 is being disrupted by Karpenter: Interruption: spot notice"
    );
}
