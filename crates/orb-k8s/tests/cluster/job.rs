//! The Job handler: parallelism = completions = N, backoffLimit 0, Never; complete when every
//! pod exits 0, failed with the reason otherwise; release deletes the Job.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use orb_core::lifecycle::Verdict;
use orb_core::provider::{AcquireInput, Provider, ProviderError};
use orb_core::template::{ProviderApi, RestartPolicy};
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
