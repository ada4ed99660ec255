//! getReturnRequests reports what the cluster takes, never what orb does itself: a finished
//! pod of a Job that still runs, or a machine orb timed out and removed.

use orb_core::provider::{MachineObservation, REMOVED_BY_ORB, StatusReport};

use super::*;

/// Stores `seen` for the request's machines through one scripted status read.
async fn observe_all(
    f: &Fixture,
    view: &RequestView,
    verdict: Verdict,
    seen: Vec<MachineObservation>,
) {
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Ok(StatusReport {
            verdict,
            fulfilled: 0,
            failed: 0,
            machines: seen.into_iter().map(Into::into).collect(),
            message: None,
            note: None,
        }));
    f.broker.refresh(&view.request.request_id).await.unwrap();
}

fn seen(id: &str, status: MachineStatus) -> MachineObservation {
    let mut o = MachineObservation::new(id, status);
    o.launch_time = Some(test_support::at(0));
    o
}

fn reported(reclaims: &[crate::Reclaim]) -> Vec<&str> {
    reclaims.iter().map(|r| r.machine_id.as_str()).collect()
}

/// Giving back one host of a Job deletes the whole Job, so a pod that exited 0 (or one that
/// waits on an image, while the Job goes on) is not offered to HostFactory while another pod
/// of the Job still runs or waits; once none does, every finished host is. A pod that is gone
/// is reported at once: losing it fails the Job (`backoffLimit: 0`) anyway.
#[tokio::test]
async fn a_finished_pod_of_a_job_that_still_runs_is_not_reported() {
    let f = fixture().await;
    let view = f.broker.request_machines("job", 4).await.unwrap();
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    observe_all(
        &f,
        &view,
        Verdict::Underway,
        vec![
            seen(&ids[0], MachineStatus::Stopped),
            seen(&ids[1], MachineStatus::Failed),
            seen(&ids[2], MachineStatus::Running),
            seen(&ids[3], MachineStatus::Terminated),
        ],
    )
    .await;
    let keys: Vec<MachineKey> = ids.iter().map(|id| MachineKey::id(id.clone())).collect();
    for asked in [&[][..], &keys[..]] {
        let (reclaims, _) = f.broker.reclaims(asked).await.unwrap();
        assert_eq!(
            reported(&reclaims),
            [ids[3].as_str()],
            "only the gone pod while the Job still runs {}",
            ids[2]
        );
    }
    observe_all(
        &f,
        &view,
        Verdict::Fulfilled,
        ids[..3]
            .iter()
            .map(|id| seen(id, MachineStatus::Stopped))
            .collect(),
    )
    .await;
    let (reclaims, _) = f.broker.reclaims(&[]).await.unwrap();
    assert_eq!(
        reported(&reclaims),
        ids,
        "the Job is done: give them all back"
    );
    assert!(reclaims.iter().all(|r| r.grace_period_secs == 0));
}

/// A machine orb timed out and removed itself (`pod_timeout_seconds` with
/// `delete_timed_out_pods`) is orb's own doing: neither while its pod goes nor once it is
/// gone is it offered back as a host the cluster took.
#[tokio::test]
async fn a_machine_orb_timed_out_and_removed_is_never_reported() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    let why = "timed out: pending for more than 300s (pod_timeout_seconds): Unschedulable; \
               deleted by orb (delete_timed_out_pods)";
    let mut timed_out = seen(&ids[1], MachineStatus::Failed);
    timed_out.status_reason = Some(why.into());
    timed_out.provider_data = json!({"timed_out": true, REMOVED_BY_ORB: true}).into();
    observe_all(
        &f,
        &view,
        Verdict::Partial { is_final: true },
        vec![seen(&ids[0], MachineStatus::Running), timed_out],
    )
    .await;
    let mut going = seen(&ids[1], MachineStatus::ShuttingDown);
    going.status_reason = Some("the pod is being deleted".into());
    going.provider_data = json!({"phase": "Pending"}).into();
    let mut gone = seen(&ids[1], MachineStatus::Terminated);
    gone.status_reason = Some("the pod no longer exists".into());
    let named = [MachineKey::id(ids[1].clone())];
    for (step, next) in [
        ("failed", None),
        ("being deleted", Some(going)),
        ("gone", Some(gone)),
    ] {
        if let Some(next) = next {
            let running = seen(&ids[0], MachineStatus::Running);
            observe_all(
                &f,
                &view,
                Verdict::Partial { is_final: true },
                vec![running, next],
            )
            .await;
        }
        for asked in [&[][..], &named[..]] {
            let (reclaims, _) = f.broker.reclaims(asked).await.unwrap();
            assert!(reclaims.is_empty(), "{step}: {reclaims:?}");
        }
    }
    let stored = f
        .broker
        .store
        .find_machines(&[ids[1].clone()])
        .await
        .unwrap();
    assert_eq!(stored[0].status, MachineStatus::Terminated);
    let reason = stored[0].status_reason.as_deref().unwrap();
    assert!(reason.contains("deleted by orb"), "{reason}");
}
