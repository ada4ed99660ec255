//! One translator from a pod to a machine, used by every path (acquire, status, return,
//! reclaims). Pure: a pod object in, a [`MachineObservation`] out.
//!
//! Rules, first match wins:
//! - being deleted → `shutting-down`;
//! - a fatal waiting reason now (`CrashLoopBackOff` included) in any container or init
//!   container → `failed` with the reason. `failed` means failed now: past restarts, however
//!   many and however they ended, never fail a pod;
//! - phase Running and Ready → `running`; Running but not Ready → `pending`, "not ready: …"
//!   (a pod alone cannot say whether it was ever Ready: the status read, which knows what was
//!   stored, keeps a machine that ran `running`, see [`crate::fulfilment::PodTimeoutPolicy`];
//!   a pod not Ready only because its node went NotReady or Unknown says so);
//!   Pending → `pending`;
//! - Succeeded → `stopped` for Pod and Job (the host exited but its pod is still there, so
//!   a return or cancel still has something to remove; `terminated` always means gone),
//!   `running` for Deployment/StatefulSet (their controller replaces the pod, the host stays);
//! - Failed → `failed`; Unknown → `unknown`.

use jiff::Timestamp;
use orb_core::machine::MachineStatus;
use orb_core::provider::MachineObservation;

use orb_core::ProviderApi;

use crate::pod_read::{ContainerRead, PodRead};

/// Waiting reasons a pod does not recover from without a change to its spec.
pub const FATAL_WAITING_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
];

fn all_container_statuses(
    pod: &impl PodRead,
) -> impl Iterator<Item = (&'static str, ContainerRead<'_>)> {
    let main = pod.containers(false).map(|c| ("container", c));
    let init = pod.containers(true).map(|c| ("init container", c));
    main.chain(init)
}

fn fatal_waiting(pod: &impl PodRead) -> Option<String> {
    all_container_statuses(pod).find_map(|(what, c)| {
        let (reason, message) = c.state.waiting?;
        let reason = reason?;
        FATAL_WAITING_REASONS.contains(&reason).then(|| {
            let detail = message.unwrap_or("");
            format!("{reason}: {what} {} {detail}", c.name)
                .trim_end()
                .to_string()
        })
    })
}

/// Why a pod is not running: the main container's terminated or waiting reason, else the
/// `PodScheduled=False` reason (e.g. `Unschedulable: 0/3 nodes are available…`).
pub fn pending_reason(pod: &impl PodRead) -> Option<String> {
    let container = pod.containers(false).find_map(|c| {
        if let Some((reason, _)) = c.state.terminated {
            return reason.map(str::to_string);
        }
        c.state
            .waiting
            .and_then(|(reason, _)| reason.map(str::to_string))
    });
    container.or_else(|| {
        pod.conditions().find_map(|c| {
            (c.type_ == "PodScheduled" && c.status == "False").then(|| {
                match (c.reason, c.message) {
                    (Some(r), Some(m)) => format!("{r}: {m}"),
                    (Some(r), None) => r.to_string(),
                    (None, Some(m)) => m.to_string(),
                    (None, None) => "not scheduled".into(),
                }
            })
        })
    })
}

/// The node lifecycle controller marks the pods of a node that went NotReady or Unknown not
/// Ready without a reason and leaves their containers ready; the kubelet never does that (it
/// gives a reason such as `ContainersNotReady` or `ReadinessGatesNotReady`).
fn node_not_ready(pod: &impl PodRead) -> bool {
    pod.condition_true("ContainersReady")
        && pod.conditions().any(|c| {
            c.type_ == "Ready" && c.status == "False" && c.reason.is_none_or(str::is_empty)
        })
}

/// Why a pod in phase Running is not Ready: what [`pending_reason`] finds, else its node not
/// being ready, else the Ready condition's reason, and the main container's restarts when it
/// has restarted (a crash loop between two crashes reads like this).
fn not_ready_reason(pod: &impl PodRead) -> String {
    let node = || {
        node_not_ready(pod).then(|| {
            let name = pod.node_name().unwrap_or("unknown");
            format!("NodeNotReady: its node {name} is not ready")
        })
    };
    let why = pending_reason(pod).or_else(node).or_else(|| {
        pod.conditions()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| match (c.reason, c.message) {
                (Some(r), Some(m)) => Some(format!("{r}: {m}")),
                (r, m) => r.or(m).map(str::to_string),
            })
    });
    let restarts = pod.containers(false).find_map(|c| {
        let (reason, exit) = c.last_state.terminated?;
        let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
        (c.restart_count > 0).then(|| {
            format!(
                "container {} restarted {} times, last exit code {exit}{reason}",
                c.name, c.restart_count
            )
        })
    });
    let parts: Vec<String> = why.into_iter().chain(restarts).collect();
    if parts.is_empty() {
        "not ready: the pod reports no reason".into()
    } else {
        format!("not ready: {}", parts.join("; "))
    }
}

fn failed_reason(pod: &impl PodRead) -> String {
    let terminated = pod.containers(false).find_map(|c| {
        let (reason, exit_code) = c.state.terminated?;
        Some(format!(
            "{}: container {} exited with code {exit_code}",
            reason.unwrap_or("Error"),
            c.name,
        ))
    });
    terminated
        .or_else(|| match (pod.status_reason(), pod.status_message()) {
            (Some(r), Some(m)) => Some(format!("{r}: {m}")),
            (Some(r), None) => Some(r.to_string()),
            (None, Some(m)) => Some(m.to_string()),
            (None, None) => None,
        })
        .unwrap_or_else(|| "pod failed".into())
}

/// The machine status of `pod`, with the reason when it is not plainly running.
pub fn pod_machine_status(
    pod: &impl PodRead,
    kind: ProviderApi,
) -> (MachineStatus, Option<String>) {
    if pod.meta().deletion_timestamp.is_some() {
        return (
            MachineStatus::ShuttingDown,
            Some("pod is being deleted".into()),
        );
    }
    let phase = pod.phase().unwrap_or("Pending");
    if matches!(phase, "Pending" | "Running")
        && let Some(reason) = fatal_waiting(pod)
    {
        return (MachineStatus::Failed, Some(reason));
    }
    match phase {
        "Running" if pod.condition_true("Ready") => (MachineStatus::Running, None),
        "Running" => (MachineStatus::Pending, Some(not_ready_reason(pod))),
        "Pending" => (MachineStatus::Pending, pending_reason(pod)),
        "Succeeded" => match kind {
            ProviderApi::Pod | ProviderApi::Job => (
                MachineStatus::Stopped,
                Some("Completed: every container exited 0".into()),
            ),
            ProviderApi::Deployment | ProviderApi::StatefulSet => (
                MachineStatus::Running,
                Some("container exited 0; the controller restarts it".into()),
            ),
        },
        "Failed" => (MachineStatus::Failed, Some(failed_reason(pod))),
        _ => (
            MachineStatus::Unknown,
            Some("the node stopped reporting this pod (phase Unknown)".into()),
        ),
    }
}

/// The full observation of one pod: status, IP, node (as `cloud_host_id` in `provider_data`),
/// creation time as launch time, labels as tags.
pub fn observe_pod(pod: &impl PodRead, kind: ProviderApi, resource_id: &str) -> MachineObservation {
    let (status, reason) = pod_machine_status(pod, kind);
    let mut observation = MachineObservation::new(pod.name(), status);
    observation.status_reason = reason;
    observation.private_ip = pod.pod_ip().map(str::to_string);
    observation.launch_time = pod.created();
    observation.instance_type = Some(["k8s/", kind.as_str()].concat());
    observation.tags = pod.tags();
    observation.resource_id = Some(resource_id.to_string());
    observation.uid = pod.uid().map(str::to_string);
    observation.provider_data = pod.provider_data();
    observation
}

/// How long `pod` has existed at `now` (creation, not start: unscheduled pods never start).
pub fn pod_age(pod: &impl PodRead, now: Timestamp) -> Option<std::time::Duration> {
    let age = now.duration_since(pod.created()?);
    std::time::Duration::try_from(age).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use rstest::rstest;
    use serde_json::{Value, json};

    fn recorded(name: &str) -> Pod {
        let text = match name {
            "image_pull_backoff" => include_str!("../tests/data/pod_image_pull_backoff.json"),
            "init_create_config_error" => {
                include_str!("../tests/data/pod_init_create_config_error.json")
            }
            "crash_looping" => include_str!("../tests/data/pod_crash_looping.json"),
            "unschedulable" => include_str!("../tests/data/pod_unschedulable.json"),
            other => panic!("no recorded pod {other}"),
        };
        serde_json::from_str(text).expect("recorded pod parses")
    }

    /// A pod in `phase` with the given Ready status and extra status fields.
    fn pod(phase: &str, ready: bool, extra_status: Value) -> Pod {
        let mut status = json!({
            "phase": phase,
            "podIP": "10.244.0.7",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        });
        if let (Some(s), Some(extra)) = (status.as_object_mut(), extra_status.as_object()) {
            s.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p-0", "namespace": "ns", "uid": "u-1", "creationTimestamp": "2026-07-14T09:00:00Z",
                         "labels": {"orb.io/request-id": "req-1"}},
            "spec": {"nodeName": "kwok-node-0", "restartPolicy": "Never", "containers": [{"name": "orb", "image": "busybox"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[rstest]
    #[case::image_pull_backoff("image_pull_backoff", "ImagePullBackOff: container orb")]
    #[case::init_container_config_error(
        "init_create_config_error",
        "CreateContainerConfigError: init container fetch-config secret \"grid-credentials\" not found"
    )]
    fn recorded_fatal_pods_are_failed_with_the_reason(#[case] name: &str, #[case] reason: &str) {
        let (status, why) = pod_machine_status(&recorded(name), ProviderApi::Pod);
        assert_eq!(status, MachineStatus::Failed);
        let why = why.unwrap();
        assert!(why.starts_with(reason), "{why}");
    }

    /// A main container that restarted `restarts` times, last ending with `exit` (`reason`),
    /// and now `state`.
    fn restarted(restarts: i32, exit: i32, reason: &str, ready: bool, state: Value) -> Value {
        json!({"containerStatuses": [{"name": "orb", "image": "busybox", "imageID": "", "ready": ready,
            "restartCount": restarts, "state": state,
            "lastState": {"terminated": {"exitCode": exit, "reason": reason}}}]})
    }

    /// `failed` means failed now: past restarts, however many and however they ended, never
    /// make a Running and Ready pod failed.
    #[rstest]
    #[case::one_restart(1, 2, "Error")]
    #[case::two_restarts_exit_1(2, 1, "Error")]
    #[case::oom_killed_five_times(5, 137, "OOMKilled")]
    fn a_ready_pod_that_restarted_is_running(
        #[case] restarts: i32,
        #[case] exit: i32,
        #[case] reason: &str,
        #[values(ProviderApi::Pod, ProviderApi::Deployment, ProviderApi::StatefulSet)]
        kind: ProviderApi,
    ) {
        let running = json!({"running": {"startedAt": "2026-07-14T09:05:00Z"}});
        let p = pod(
            "Running",
            true,
            restarted(restarts, exit, reason, true, running),
        );
        assert_eq!(pod_machine_status(&p, kind), (MachineStatus::Running, None));
    }

    #[test]
    fn a_pod_waiting_in_crash_loop_back_off_now_is_failed() {
        let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}});
        let p = pod("Running", false, restarted(3, 1, "Error", false, waiting));
        let (status, why) = pod_machine_status(&p, ProviderApi::Deployment);
        assert_eq!(status, MachineStatus::Failed);
        assert_eq!(
            why.as_deref(),
            Some("CrashLoopBackOff: container orb back-off 40s")
        );
    }

    /// Between two crashes a crash-looping container runs: it is not failed now, and a
    /// read that cannot know it ever was ready says it is not ready, with its restarts.
    #[test]
    fn a_crash_looping_pod_between_crashes_is_not_ready_not_failed() {
        let (status, why) = pod_machine_status(&recorded("crash_looping"), ProviderApi::Pod);
        assert_eq!(status, MachineStatus::Pending);
        assert_eq!(
            why.as_deref(),
            Some(
                "not ready: ContainersNotReady; container orb restarted 3 times, last exit \
                 code 1 (Error)"
            )
        );
    }

    #[test]
    fn a_running_pod_that_is_not_ready_says_why() {
        let mut p = pod("Running", false, json!({}));
        let ready = &mut p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
        ready.reason = Some("ContainersNotReady".into());
        ready.message = Some("containers with unready status: [orb]".into());
        assert_eq!(
            pod_machine_status(&p, ProviderApi::Pod).1.as_deref(),
            Some("not ready: ContainersNotReady: containers with unready status: [orb]")
        );
    }

    /// As the node lifecycle controller leaves a pod of a node that went NotReady or Unknown:
    /// Ready False without a reason, containers ready.
    #[test]
    fn a_pod_marked_not_ready_for_its_node_says_the_node_is_not_ready() {
        let containers_ready = json!({"type": "ContainersReady", "status": "True"});
        let mut p = pod("Running", false, json!({}));
        let conditions = p.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.push(serde_json::from_value(containers_ready).unwrap());
        let (status, why) = pod_machine_status(&p, ProviderApi::Deployment);
        assert_eq!(status, MachineStatus::Pending);
        assert_eq!(
            why.as_deref(),
            Some("not ready: NodeNotReady: its node kwok-node-0 is not ready")
        );
        // A reason on the Ready condition is the kubelet's: that one is given.
        let ready = &mut p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
        ready.reason = Some("ReadinessGatesNotReady".into());
        assert_eq!(
            pod_machine_status(&p, ProviderApi::Pod).1.as_deref(),
            Some("not ready: ReadinessGatesNotReady")
        );
    }

    #[test]
    fn unschedulable_pods_are_pending_with_the_scheduler_reason() {
        let (status, why) = pod_machine_status(&recorded("unschedulable"), ProviderApi::Pod);
        assert_eq!(status, MachineStatus::Pending);
        assert!(
            why.unwrap()
                .starts_with("Unschedulable: 0/3 nodes are available")
        );
    }

    #[rstest]
    #[case::running_ready("Running", true, ProviderApi::Pod, MachineStatus::Running)]
    #[case::running_not_ready("Running", false, ProviderApi::Pod, MachineStatus::Pending)]
    #[case::pending("Pending", false, ProviderApi::Deployment, MachineStatus::Pending)]
    #[case::succeeded_pod("Succeeded", false, ProviderApi::Pod, MachineStatus::Stopped)]
    #[case::succeeded_job("Succeeded", false, ProviderApi::Job, MachineStatus::Stopped)]
    #[case::succeeded_deployment(
        "Succeeded",
        false,
        ProviderApi::Deployment,
        MachineStatus::Running
    )]
    #[case::succeeded_statefulset(
        "Succeeded",
        false,
        ProviderApi::StatefulSet,
        MachineStatus::Running
    )]
    #[case::failed("Failed", false, ProviderApi::Job, MachineStatus::Failed)]
    #[case::unknown("Unknown", false, ProviderApi::Pod, MachineStatus::Unknown)]
    fn phase_and_kind_give_the_machine_status(
        #[case] phase: &str,
        #[case] ready: bool,
        #[case] kind: ProviderApi,
        #[case] want: MachineStatus,
    ) {
        assert_eq!(
            pod_machine_status(&pod(phase, ready, json!({})), kind).0,
            want
        );
    }

    #[test]
    fn a_pod_being_deleted_is_shutting_down() {
        let mut p = pod("Running", true, json!({}));
        p.metadata.deletion_timestamp = p.metadata.creation_timestamp.clone();
        assert_eq!(
            pod_machine_status(&p, ProviderApi::Pod).0,
            MachineStatus::ShuttingDown
        );
    }

    #[test]
    fn a_failed_job_pod_reports_the_exit() {
        let p = pod(
            "Failed",
            false,
            json!({"containerStatuses": [{"name": "orb", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}),
        );
        let (_, why) = pod_machine_status(&p, ProviderApi::Job);
        assert_eq!(
            why.as_deref(),
            Some("Error: container orb exited with code 3")
        );
    }

    #[test]
    fn observation_carries_ip_node_launch_time_and_labels() {
        let o = observe_pod(
            &recorded("image_pull_backoff"),
            ProviderApi::Pod,
            "orb-fe4cda5c019444bc981b-0000",
        );
        assert_eq!(o.machine_id, "orb-fe4cda5c019444bc981b-0000");
        assert_eq!(o.private_ip.as_deref(), Some("10.244.3.41"));
        assert_eq!(
            o.provider_data["cloud_host_id"],
            "ip-10-0-3-17.ec2.internal"
        );
        assert_eq!(o.launch_time.unwrap().to_string(), "2026-07-14T09:12:03Z");
        assert_eq!(
            o.uid.as_deref(),
            Some("5b1c2a8e-6c1f-4a53-9c52-0d1f0e3b7a11")
        );
        assert_eq!(o.tags["orb.io/provider-api"], "Pod");
        assert_eq!(o.instance_type.as_deref(), Some("k8s/Pod"));
    }
}
