use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use orb_core::ProviderApi;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{MachineObservation, StatusMachines};
use rstest::rstest;
use serde_json::json;

use super::*;
use crate::machine_state::observe_pod;

fn unscheduled(created: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p-0", "creationTimestamp": created},
        "spec": {"containers": [{"name": "orb", "image": "busybox"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}]}
    }))
    .unwrap()
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn policy(timeout: u64, stored: &StatusMachines) -> PodTimeoutPolicy<'_> {
    PodTimeoutPolicy::new(Duration::from_secs(timeout), stored)
}

#[rstest]
#[case::younger_than_timeout("2026-07-14T10:04:00Z", false)]
#[case::older_than_timeout("2026-07-14T10:05:01Z", true)]
fn timeout_is_measured_from_creation_even_without_a_start_time(
    #[case] now: &str,
    #[case] timed_out: bool,
) {
    let pod = unscheduled("2026-07-14T10:00:00Z");
    let mut observation: Shared<MachineObservation> =
        observe_pod(&pod, ProviderApi::Pod, "p-0").into();
    // The observation a watch cache keeps for the pod, shared with the one being judged.
    let kept = observation.clone();
    let stored = StatusMachines::default();
    assert_eq!(
        policy(300, &stored).apply(&pod, &mut observation, at(now)),
        timed_out
    );
    if timed_out {
        assert_eq!(
            observation.status,
            MachineStatus::Failed,
            "the pod is still there: failed, not gone"
        );
        let reason = observation.status_reason.as_deref().unwrap();
        assert!(reason.contains("Unschedulable: 0/3 nodes"), "{reason}");
        assert_eq!(observation.provider_data["timed_out"], true);
        assert_eq!(
            kept.status,
            MachineStatus::Pending,
            "the kept one is not changed"
        );
    } else {
        assert_eq!(observation.status, MachineStatus::Pending);
        assert!(Shared::ptr_eq(&kept, &observation), "nor copied");
    }
}

#[test]
fn a_running_pod_never_times_out() {
    let pod = unscheduled("2026-07-14T10:00:00Z");
    let mut observation = MachineObservation::new("p-0", MachineStatus::Running).into();
    let stored = StatusMachines::default();
    assert!(!policy(1, &stored).apply(&pod, &mut observation, at("2026-07-15T00:00:00Z")));
}

/// A pod in phase Running, created at 10:00, that is not Ready: started, whatever it did since.
fn started_not_ready(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p-0", "uid": uid, "creationTimestamp": "2026-07-14T10:00:00Z"},
        "spec": {"containers": [{"name": "orb", "image": "busybox"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
            "containerStatuses": [{"name": "orb", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-07-14T10:00:01Z"}}}]}
    }))
    .unwrap()
}

/// What the broker stored of pod p-0 at the last read.
fn stored_as(status: MachineStatus, uid: &str) -> StatusMachines {
    let machine = orb_core::test_support::machine("p-0")
        .uid(uid)
        .status(status)
        .build();
    StatusMachines::new(
        Shared::new(vec![machine]),
        vec![std::sync::Arc::new(serde_json::Value::Null)],
    )
}

/// Pods that started never time out, an hour past the timeout, whatever was stored of
/// them; and one that was running reads `running`, not ready, with the reason.
#[rstest]
#[case::was_running(stored_as(R, "u-1"), R)]
#[case::never_stored(StatusMachines::default(), P)]
#[case::was_pending(stored_as(P, "u-1"), P)]
#[case::an_earlier_incarnation_was_running(stored_as(R, "u-0"), P)]
fn a_started_pod_never_times_out_and_a_machine_that_ran_stays_running(
    #[case] stored: StatusMachines,
    #[case] want: MachineStatus,
    #[values(
        ProviderApi::Pod,
        ProviderApi::Deployment,
        ProviderApi::StatefulSet,
        ProviderApi::Job
    )]
    kind: ProviderApi,
) {
    let pod = started_not_ready("u-1");
    let mut observation: Shared<MachineObservation> = observe_pod(&pod, kind, "p-0").into();
    let kept = observation.clone();
    let timed_out = policy(300, &stored).apply(&pod, &mut observation, at("2026-07-14T11:00:00Z"));
    assert_eq!(
        kept.status, P,
        "{kind}: the watch cache's observation is not changed"
    );
    assert!(!timed_out, "{kind}: a unit that started is never timed out");
    assert_eq!(observation.status, want, "{kind}");
    assert_eq!(
        observation.status_reason.as_deref(),
        Some("not ready: ContainersNotReady"),
        "{kind}"
    );
    assert!(!is_timed_out(&observation));
}

fn machines(statuses: &[MachineStatus]) -> Vec<Shared<MachineObservation>> {
    statuses
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut m = MachineObservation::new(&format!("m-{i}"), *s);
            m.status_reason = Some(format!("reason {i}"));
            m.into()
        })
        .collect()
}

fn state(desired: u32, ready: u32) -> ControllerState {
    ControllerState {
        desired,
        ready,
        ..ControllerState::default()
    }
}

use MachineStatus::{Failed as F, Pending as P, Running as R, Terminated as T};

#[rstest]
#[case::all_running(ProviderApi::Pod, 3, &[R, R, R], None, 0, "fulfilled")]
#[case::some_pending(ProviderApi::Pod, 3, &[R, R, P], None, 0, "in_progress")]
#[case::all_failed(ProviderApi::Pod, 2, &[F, F], None, 0, "failed")]
#[case::running_and_failed(ProviderApi::Pod, 3, &[R, R, F], None, 0, "partial_final")]
#[case::create_failed(ProviderApi::Pod, 3, &[R, R], None, 1, "partial_final")]
#[case::exited_pods_are_not_capacity(ProviderApi::Pod, 2, &[T, T], None, 0, "failed")]
#[case::deployment_ready(ProviderApi::Deployment, 3, &[R, R, R], Some(state(3, 3)), 0, "fulfilled")]
#[case::deployment_replacements_pending(ProviderApi::Deployment, 3, &[R, F, P], Some(state(3, 1)), 0, "in_progress")]
#[case::deployment_pods_not_created_yet(ProviderApi::Deployment, 3, &[R], Some(state(3, 1)), 0, "in_progress")]
#[case::deployment_all_failed(ProviderApi::Deployment, 2, &[F, F], Some(state(2, 0)), 0, "failed")]
#[case::deployment_some_failed(ProviderApi::Deployment, 2, &[R, F], Some(state(2, 1)), 0, "partial_waiting")]
#[case::deployment_gone(ProviderApi::Deployment, 2, &[], None, 0, "failed")]
#[case::statefulset_ready(ProviderApi::StatefulSet, 2, &[R, R], Some(state(2, 2)), 0, "fulfilled")]
#[case::job_all_running_is_underway(ProviderApi::Job, 2, &[R, R], Some(state(2, 2)), 0, "underway")]
#[case::job_one_pending(ProviderApi::Job, 2, &[R, P], Some(state(2, 1)), 0, "in_progress")]
#[case::job_one_done_one_running(ProviderApi::Job, 2, &[T, R], Some(ControllerState { succeeded: 1, ..state(2, 1) }), 0, "underway")]
#[case::job_complete(ProviderApi::Job, 2, &[T, T], Some(ControllerState { complete: true, ..state(2, 0) }), 0, "fulfilled")]
#[case::job_pod_failed_before_the_job_says_so(ProviderApi::Job, 2, &[T, F], Some(state(2, 0)), 0, "in_progress")]
#[case::job_pod_waiting_to_retry_an_image_pull(ProviderApi::Job, 2, &[R, F], Some(state(2, 1)), 0, "in_progress")]
#[case::job_condition_failed(ProviderApi::Job, 2, &[], Some(ControllerState { failure: Some("BackoffLimitExceeded".into()), ..state(2, 0) }), 0, "failed")]
#[case::job_gone(ProviderApi::Job, 2, &[], None, 0, "failed")]
fn acquire_verdicts(
    #[case] kind: ProviderApi,
    #[case] requested: u32,
    #[case] statuses: &[MachineStatus],
    #[case] controller: Option<ControllerState>,
    #[case] create_failures: u32,
    #[case] want: &str,
) {
    let ms = machines(statuses);
    let decision = decide_acquire(&AcquireFacts {
        kind,
        requested,
        machines: &ms,
        controller: controller.as_ref(),
        create_failures,
        create_failure_reason: (create_failures > 0).then_some("quota exceeded"),
    });
    let got = match decision.verdict {
        Verdict::Fulfilled => "fulfilled",
        Verdict::InProgress => "in_progress",
        Verdict::Underway => "underway",
        Verdict::Failed { .. } => "failed",
        Verdict::Partial { is_final: true } => "partial_final",
        Verdict::Partial { is_final: false } => "partial_waiting",
    };
    assert_eq!(got, want, "{decision:?}");
}

#[test]
fn a_failed_verdict_carries_the_first_reason() {
    let ms = machines(&[F, F]);
    let decision = decide_acquire(&AcquireFacts {
        kind: ProviderApi::Pod,
        requested: 2,
        machines: &ms,
        controller: None,
        create_failures: 0,
        create_failure_reason: None,
    });
    assert_eq!(
        decision.verdict,
        Verdict::Failed {
            reason: "m-0: reason 0".into()
        }
    );
    assert_eq!((decision.fulfilled, decision.failed), (0, 2));
}

fn timed_out(mut m: MachineObservation) -> MachineObservation {
    m.status = MachineStatus::Failed;
    m.status_reason = Some("timed out: pending for more than 300s".into());
    m.provider_data = json!({"timed_out": true}).into();
    m
}

/// A Job unit that waited past pod_timeout_seconds never fails the Job: its running pods keep
/// running (deleting the waiting pod would fail the Job and kill them), and the request ends
/// partial, or failed when no unit started at all.
#[rstest]
#[case::some_started(&[R, R], "partial_final", 2)]
#[case::none_started(&[], "failed", 0)]
fn a_timed_out_job_unit_ends_the_request_without_failing_the_job(
    #[case] others: &[MachineStatus],
    #[case] want: &str,
    #[case] fulfilled: u32,
) {
    let mut ms = machines(others);
    ms.push(timed_out(MachineObservation::new("m-late", P)).into());
    let n = ms.len() as u32;
    let decision = decide_acquire(&AcquireFacts {
        kind: ProviderApi::Job,
        requested: n,
        machines: &ms,
        controller: Some(&state(n, n - 1)),
        create_failures: 0,
        create_failure_reason: None,
    });
    let got = match &decision.verdict {
        Verdict::Partial { is_final: true } => "partial_final",
        Verdict::Failed { .. } => "failed",
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(got, want);
    assert_eq!(decision.fulfilled, fulfilled);
    let message = decision.message.unwrap();
    assert!(message.contains("m-late: timed out"), "{message}");
}

/// The deadline counts started units: with every unit of a Job started the verdict is
/// `Underway`, so a Job still running at its deadline is never called complete (only its
/// `Complete` condition does that).
#[test]
fn a_running_job_is_never_fulfilled_before_its_complete_condition() {
    let ms = machines(&[R, R, R]);
    let decision = decide_acquire(&AcquireFacts {
        kind: ProviderApi::Job,
        requested: 3,
        machines: &ms,
        controller: Some(&state(3, 3)),
        create_failures: 0,
        create_failure_reason: None,
    });
    assert_eq!(decision.verdict, Verdict::Underway);
    let mut request = orb_core::test_support::request(orb_core::request::RequestType::Acquire)
        .template("job")
        .provider("k", "k8s")
        .count(3)
        .created(at("2026-07-14T10:00:00Z"))
        .build();
    let start = at("2026-07-14T10:00:00Z");
    orb_core::lifecycle::apply(
        &mut request,
        orb_core::lifecycle::LifecycleEvent::Start { grace_secs: 20 },
        start,
    )
    .unwrap();
    orb_core::lifecycle::apply(
        &mut request,
        orb_core::lifecycle::LifecycleEvent::ProviderVerdict {
            verdict: decision.verdict,
            fulfilled: decision.fulfilled,
            failed: decision.failed,
            message: decision.message,
        },
        at("2026-07-14T10:00:30Z"),
    )
    .unwrap();
    assert_eq!(
        request.status,
        orb_core::request::RequestStatus::InProgress,
        "past the 20 s deadline, the running Job is still in progress"
    );
}

#[rstest]
#[case::all_gone(&[T, T], Verdict::Fulfilled, 2)]
#[case::one_still_there(&[T, R], Verdict::InProgress, 1)]
fn return_verdicts(
    #[case] statuses: &[MachineStatus],
    #[case] want: Verdict,
    #[case] released: u32,
) {
    let decision = decide_return(&machines(statuses));
    assert_eq!(decision.verdict, want);
    assert_eq!(decision.fulfilled, released);
}

#[test]
fn settled_states_are_ready_at_the_requested_count_or_finished() {
    assert!(state(3, 3).is_settled(3));
    assert!(!state(3, 2).is_settled(3));
    assert!(
        !state(2, 2).is_settled(3),
        "another requested count is not settled"
    );
    assert!(
        ControllerState {
            complete: true,
            ..state(2, 0)
        }
        .is_settled(2)
    );
}

/// A Job with every pod ready is still running toward `Complete` (or `Failed`): serving that
/// snapshot from the cache hid the completion for the cache's TTL (seen in the acquire bench
/// as Jobs fulfilled 3 s late).
#[test]
fn a_job_is_settled_only_once_complete_or_failed() {
    let job = |ready: i32, conditions: &[(&str, &str)]| {
        job_state(&Job {
            spec: Some(k8s_openapi::api::batch::v1::JobSpec {
                completions: Some(3),
                parallelism: Some(3),
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::batch::v1::JobStatus {
                ready: Some(ready),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| k8s_openapi::api::batch::v1::JobCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    assert!(!job(3, &[]).is_settled(3), "all ready, not complete");
    assert!(!job(3, &[("SuccessCriteriaMet", "True")]).is_settled(3));
    assert!(job(0, &[("Complete", "True")]).is_settled(3));
    assert!(job(1, &[("Failed", "True")]).is_settled(3));
    assert!(
        state(3, 3).is_settled(3),
        "a Deployment all ready is settled"
    );
}

/// A Job request fails only when the Job does (its `Failed` condition) or its deadline
/// passes: a pod waiting in `ErrImagePull`, which the kubelet retries while the Job goes on,
/// is a reason shown, not a failure.
#[test]
fn a_job_unit_waiting_on_a_transient_reason_is_shown_not_failed() {
    let mut ms = machines(&[R]);
    let mut waiting = MachineObservation::new("m-pull", F);
    waiting.status_reason = Some("ErrImagePull: pull access denied".into());
    ms.push(waiting.into());
    let job = state(2, 1);
    let facts = AcquireFacts {
        kind: ProviderApi::Job,
        requested: 2,
        machines: &ms,
        controller: Some(&job),
        create_failures: 0,
        create_failure_reason: None,
    };
    let decision = decide_acquire(&facts);
    assert_eq!(decision.verdict, Verdict::InProgress);
    let message = decision.message.unwrap();
    assert!(message.contains("m-pull: ErrImagePull"), "{message}");
    let failed = ControllerState {
        failure: Some("BackoffLimitExceeded: Job has reached the specified backoff limit".into()),
        ..job
    };
    let decision = decide_acquire(&AcquireFacts {
        controller: Some(&failed),
        ..facts
    });
    assert!(
        matches!(&decision.verdict, Verdict::Failed { reason } if reason.contains("BackoffLimitExceeded")),
        "the Job's own failure fails it: {decision:?}"
    );
}

/// A Job removed once it finished (`ttlSecondsAfterFinished`) leaves no conditions to read:
/// what orb saw of its pods is the evidence. Every unit seen exit 0 is a complete Job; less
/// is a failure that says what was seen and how to keep the evidence.
#[rstest]
#[case::every_unit_seen_exit_0(2, 2, true)]
#[case::one_unit_last_seen_running(2, 1, false)]
#[case::nothing_seen_finish(2, 0, false)]
fn a_removed_job_is_judged_by_the_exits_orb_saw(
    #[case] requested: u32,
    #[case] seen_exited: u32,
    #[case] complete: bool,
) {
    let ms = machines(&[T, T]);
    let job = removed_job_state(requested, seen_exited);
    let decision = decide_acquire(&AcquireFacts {
        kind: ProviderApi::Job,
        requested,
        machines: &ms,
        controller: Some(&job),
        create_failures: 0,
        create_failure_reason: None,
    });
    match &decision.verdict {
        Verdict::Fulfilled if complete => assert_eq!(decision.fulfilled, requested),
        Verdict::Failed { reason } if !complete => {
            assert!(reason.contains("no longer exists"), "{reason}");
            assert!(
                reason.contains(&format!("{seen_exited} of {requested}")),
                "{reason}"
            );
            assert!(reason.contains("ttlSecondsAfterFinished"), "{reason}");
        }
        other => panic!("complete {complete}: {other:?}"),
    }
}
