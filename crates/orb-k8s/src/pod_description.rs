//! What the console's machine drawer shows of one machine's pod: its phase, node, conditions
//! and the events Kubernetes recorded for it (scheduling failures, image pulls, kills). One
//! GET and one filtered event LIST; [`describe_pod`] turns them into plain data.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::K8sError;
use crate::provider::K8sProvider;

/// One pod condition (`PodScheduled`, `Ready`, …).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub condition_type: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Option<String>,
}

/// One event about the pod, as `kubectl describe pod` lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub count: Option<i32>,
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
}

/// The pod of a machine as the apiserver has it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodDescription {
    pub namespace: String,
    pub pod_name: String,
    /// False when the pod is gone (returned, deleted, or never created); the events of a
    /// deleted pod stay until they expire, so they are still listed.
    pub found: bool,
    pub phase: Option<String>,
    pub node_name: Option<String>,
    pub conditions: Vec<PodCondition>,
    /// Oldest first.
    pub events: Vec<PodEvent>,
}

/// Pure: the description of `pod` (None: gone) and its `events`.
pub fn describe_pod(
    namespace: &str,
    pod_name: &str,
    pod: Option<&Pod>,
    events: &[Event],
) -> PodDescription {
    let status = pod.and_then(|p| p.status.as_ref());
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .map(|all| {
            all.iter()
                .map(|c| PodCondition {
                    condition_type: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut events: Vec<(Option<String>, PodEvent)> = events
        .iter()
        .map(|e| {
            let last_seen = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()));
            (
                last_seen.clone(),
                PodEvent {
                    event_type: e.type_.clone(),
                    reason: e.reason.clone(),
                    message: e.message.clone(),
                    count: e.count,
                    first_seen: e.first_timestamp.as_ref().map(|t| t.0.to_string()),
                    last_seen,
                },
            )
        })
        .collect();
    // RFC 3339 times in UTC sort as text.
    events.sort_by(|a, b| a.0.cmp(&b.0));
    PodDescription {
        namespace: namespace.to_string(),
        pod_name: pod_name.to_string(),
        found: pod.is_some(),
        phase: status.and_then(|s| s.phase.clone()),
        node_name: pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.clone()),
        conditions,
        events: events.into_iter().map(|(_, e)| e).collect(),
    }
}

/// Reads the pod `pod_name` in `namespace` and its events from the apiserver.
pub async fn read_pod_description(
    provider: &K8sProvider,
    namespace: &str,
    pod_name: &str,
) -> Result<PodDescription, K8sError> {
    let client = provider.kube_client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods
        .get_opt(pod_name)
        .await
        .map_err(|e| K8sError::api(format!("get pod {namespace}/{pod_name}"), e))?;
    let events: Api<Event> = Api::namespaced(client, namespace);
    let selector = format!("involvedObject.kind=Pod,involvedObject.name={pod_name}");
    let listed = events
        .list(&ListParams::default().fields(&selector).limit(200))
        .await
        .map_err(|e| K8sError::api(format!("list the events of pod {namespace}/{pod_name}"), e))?;
    Ok(describe_pod(
        namespace,
        pod_name,
        pod.as_ref(),
        &listed.items,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    fn event(reason: &str, last: &str) -> Event {
        Event {
            involved_object: ObjectReference::default(),
            reason: Some(reason.into()),
            type_: Some("Warning".into()),
            message: Some(format!("{reason} happened")),
            count: Some(2),
            last_timestamp: Some(at(last)),
            ..Default::default()
        }
    }

    #[test]
    fn a_pending_pod_shows_its_conditions_and_events_oldest_first() {
        let pod = Pod {
            spec: Some(PodSpec {
                node_name: None,
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some("0/3 nodes are available: 3 Insufficient cpu.".into()),
                    last_transition_time: Some(at("2026-12-04T01:00:00Z")),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let events = [
            event("FailedScheduling", "2026-12-04T01:00:30Z"),
            event("Created", "2026-12-04T01:00:01Z"),
        ];
        let d = describe_pod("grid", "orb-abc-0000", Some(&pod), &events);
        assert!(d.found);
        assert_eq!(d.phase.as_deref(), Some("Pending"));
        assert_eq!(d.node_name, None);
        assert_eq!(d.conditions.len(), 1);
        assert_eq!(d.conditions[0].reason.as_deref(), Some("Unschedulable"));
        let reasons: Vec<_> = d.events.iter().map(|e| e.reason.as_deref()).collect();
        assert_eq!(reasons, [Some("Created"), Some("FailedScheduling")]);
    }

    #[test]
    fn a_gone_pod_keeps_its_events() {
        let d = describe_pod(
            "grid",
            "orb-abc-0001",
            None,
            &[event("Killing", "2026-12-04T01:00:00Z")],
        );
        assert!(!d.found);
        assert!(d.conditions.is_empty());
        assert_eq!(d.events.len(), 1);
        assert_eq!(d.phase, None);
    }
}
