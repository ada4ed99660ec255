//! The Job handler: parallelism = completions = N, backoffLimit 0, Never; complete when every
//! pod exits 0 (also when the Job was removed after it finished), failed when the Job fails,
//! never for a pod that waits on a reason the kubelet retries; release deletes the Job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_fixture::{Check, wait_for};
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireInput, MachineRef, Provider, ProviderError};
use orb_core::template::{ProviderApi, RestartPolicy};
use orb_core::test_support::status_machines;
use serde_json::json;

use crate::common::*;

/// KWOK stage label that makes a Job pod's container fail.
const KWOK_FAIL_LABEL: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn job_of_two_completes_and_the_request_is_fulfilled() {
    let h = harness("job-ok", json!({})).await;
    let mut t = template("batch", Some(ProviderApi::Job));
    t.command = Some(vec!["sh".into(), "-c".into(), "echo done".into()]);
    let (req, outcome) = acquire(&h, &t, 2).await;
    let name = outcome.resource_ids[0].clone();
    let jobs: Api<Job> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let spec = jobs.get(&name).await.unwrap().spec.unwrap();
    assert_eq!(
        (spec.parallelism, spec.completions, spec.backoff_limit),
        (Some(2), Some(2), Some(0))
    );
    assert_eq!(
        spec.template.spec.unwrap().restart_policy.as_deref(),
        Some("Never")
    );

    let report = wait_verdict(&h, &status_input(&req, &t, 2, &outcome), "fulfilled").await;
    assert_eq!(report.fulfilled, 2);
    assert!(report.message.unwrap().contains("Job complete"));

    // Release deletes the Job whatever ids are named (here: none of its pods).
    let released = release(&h, &req, &outcome, "Job", &["any-id"])
        .await
        .unwrap();
    assert_eq!(released.released, vec!["any-id".to_string()]);
    let job = jobs.get_opt(&name).await.unwrap();
    assert!(
        job.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "Job {name} still live"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn job_with_a_failing_pod_fails_the_request_with_the_reason() {
    let h = harness("job-fail", json!({})).await;
    let mut t = template("batch", Some(ProviderApi::Job));
    t.labels.insert(KWOK_FAIL_LABEL.into(), "true".into());
    let (req, outcome) = acquire(&h, &t, 1).await;
    let report = wait_verdict(&h, &status_input(&req, &t, 1, &outcome), "failed").await;
    let Verdict::Failed { reason } = report.verdict.clone() else {
        unreachable!()
    };
    assert!(reason.starts_with("Job failed: "), "{reason}");
    assert!(
        report.failed >= 1 || reason.contains("BackoffLimitExceeded"),
        "{report:?}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_template_asking_for_on_failure_is_rejected_and_nothing_is_created() {
    let h = harness("job-policy", json!({})).await;
    let mut t = template("batch", Some(ProviderApi::Job));
    t.restart_policy = Some(RestartPolicy::OnFailure);
    let err = h
        .provider
        .acquire(AcquireInput {
            request_id: orb_core::ids::RequestId::new_acquire(),
            template: t,
            count: 1,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Rejected(t) if t.contains("Job pods must use \"Never\"")),
        "{err:?}"
    );
    let jobs: Api<Job> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert!(
        jobs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// A Job pod waiting in `ErrImagePull`, which the kubelet retries while the Job goes on, is a
/// reason shown, not a failure of the request: once the image pulls, the Job completes and so
/// does the request.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_pod_waiting_on_an_image_pull_is_shown_and_the_job_still_completes() {
    let h = harness("job-pull", json!({})).await;
    let mut t = template("batch", Some(ProviderApi::Job));
    t.annotations
        .insert(WAITING_REASON.into(), "ErrImagePull".into());
    let (req, outcome) = acquire(&h, &t, 1).await;
    let input = status_input(&req, &t, 1, &outcome);
    let waiting = wait_for("the pod waiting in ErrImagePull", WAIT, || async {
        match h.provider.status(input.clone()).await {
            Ok(r) if r.machines.iter().any(|m| reason_has(m, "ErrImagePull")) => Check::Done(r),
            Ok(r) => Check::NotYet(format!("{:?}", r.machines)),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    assert_eq!(waiting.verdict, Verdict::InProgress, "{waiting:?}");
    let message = waiting.message.unwrap_or_default();
    assert!(message.contains("ErrImagePull"), "{message}");
    // The image pulls after all.
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let pod = &waiting.machines[0].machine_id;
    let clear = json!({"metadata": {"annotations": {WAITING_REASON: null}}});
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&clear))
        .await
        .unwrap();
    let done = wait_verdict(&h, &input, "fulfilled").await;
    assert!(done.message.unwrap().contains("Job complete"));
}

/// A Job that `ttlSecondsAfterFinished` removed before any status read saw `Complete` leaves
/// no conditions to read; what orb saw of its pods is the evidence. With every pod last seen
/// exited 0 (stored `stopped`), the request is complete; with one last seen running, it is
/// not, and the reason says what was seen and how to keep the evidence.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_removed_after_it_finished_is_complete_when_every_pod_was_seen_exit_0() {
    let h = harness("job-ttl", json!({})).await;
    let mut t = template("batch", Some(ProviderApi::Job));
    t.ttl_seconds_after_finished = Some(0);
    t.annotations
        .insert("pod-complete.stage.kwok.x-k8s.io/delay".into(), "3s".into());
    let (req, outcome) = acquire(&h, &t, 2).await;
    let name = outcome.resource_ids[0].clone();
    let names = wait_for("both pods of the Job", WAIT, || async {
        let names = live_pods(&h, &req).await;
        if names.len() == 2 {
            Check::Done(names)
        } else {
            Check::NotYet(format!("{names:?}"))
        }
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    wait_for("the Job removed once it finished", WAIT, || async {
        match jobs.get_opt(&name).await {
            Ok(None) => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    wait_live_pods(&h, &req, &[]).await;
    let last_seen = |statuses: [MachineStatus; 2]| {
        let mut input = status_input(&req, &t, 2, &outcome);
        input.machines =
            status_machines(names.iter().zip(statuses).map(|(n, status)| MachineRef {
                status,
                ..machine_ref(&req, n, &outcome, "Job")
            }));
        input
    };
    let seen_done = h
        .provider
        .status(last_seen([MachineStatus::Stopped; 2]))
        .await
        .unwrap();
    assert_eq!(seen_done.verdict, Verdict::Fulfilled, "{seen_done:?}");
    assert_eq!(seen_done.fulfilled, 2);
    let seen_running = h
        .provider
        .status(last_seen([MachineStatus::Stopped, MachineStatus::Running]))
        .await
        .unwrap();
    let Verdict::Failed { reason } = &seen_running.verdict else {
        panic!("{seen_running:?}")
    };
    assert!(
        reason.contains("1 of 2") && reason.contains("ttlSecondsAfterFinished"),
        "{reason}"
    );
}

/// A Job that lost a pod outside orb fails (backoffLimit 0) and its controller stops the
/// others: HostFactory, told the request failed, returns none of it, so orb deletes the Job
/// itself rather than leave it with orb's labels for ever.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_that_failed_after_losing_a_pod_is_deleted_by_orb() {
    let h = harness("job-lost", json!({})).await;
    let t = template("batch", Some(ProviderApi::Job));
    let (req, outcome) = acquire(&h, &t, 2).await;
    let name = outcome.resource_ids[0].clone();
    let input = status_input(&req, &t, 2, &outcome);
    let running = wait_for("both Job pods running", WAIT, || async {
        match h.provider.status(input.clone()).await {
            Ok(r)
                if r.machines.len() == 2
                    && r.machines
                        .iter()
                        .all(|m| m.status == MachineStatus::Running) =>
            {
                Check::Done(r)
            }
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    pods.delete(&running.machines[0].machine_id, &Default::default())
        .await
        .unwrap();

    let failed = wait_verdict(&h, &input, "failed").await;
    let message = failed.message.unwrap_or_default();
    assert!(
        message.contains(&format!("deleted the failed Job {name}")),
        "{message}"
    );
    let jobs: Api<Job> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    wait_for("the failed Job gone", WAIT, || async {
        match jobs.get_opt(&name).await {
            Ok(None) => Check::Done(()),
            Ok(Some(j)) if j.metadata.deletion_timestamp.is_some() => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    wait_live_pods(&h, &req, &[]).await;
}

const WAITING_REASON: &str = "kwok.orb-rs.io/waiting-reason";

fn reason_has(m: &orb_core::provider::MachineObservation, word: &str) -> bool {
    m.status_reason.as_deref().is_some_and(|r| r.contains(word))
}
