//! A status read whose pods were LISTed while the broker read the machines
//! (`Provider::read_ahead`), through the fault proxy so the LISTs can be counted: the read
//! is used when it holds every pod the read expects, taken again when a machine recorded
//! after it is missing (never called gone), and a read that failed is the status read's
//! answer, not a reason to wait on the apiserver twice.
//!
//! Run: `cargo test -p orb-k8s --test cluster -- --include-ignored read_ahead::`.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube_fixture::fault_proxy::{Fault, RequestMatch};
use kube_fixture::{Check, wait_for};
use orb_core::ids::RequestId;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireOutcome, Provider, StatusInput};
use orb_core::request::RequestType;
use orb_core::template::ProviderApi;
use orb_core::test_support::status_machines;
use orb_k8s::status::GONE_REASON;
use serde_json::json;

use crate::common::*;
use crate::resilience::harness_through;

fn pod_lists() -> RequestMatch {
    RequestMatch {
        path_contains: Some("/pods?".into()),
        methods: vec![http::Method::GET],
    }
}

/// A fulfilled acquire of `count` bare pods, and a status input that expects each of its
/// machines.
async fn fulfilled(h: &Harness, count: u32) -> (RequestId, AcquireOutcome, StatusInput) {
    let t = template("ahead", Some(ProviderApi::Pod));
    let (req, outcome) = acquire(h, &t, count).await;
    let mut input = status_input(&req, &t, count, &outcome);
    wait_verdict(h, &input, "fulfilled").await;
    input.machines = status_machines(
        outcome
            .resource_ids
            .iter()
            .map(|name| machine_ref(&req, name, &outcome, "Pod")),
    );
    (req, outcome, input)
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_read_ahead_holding_every_expected_pod_answers_with_one_list() {
    let (h, proxy) = harness_through("ahead-used", json!({})).await;
    let (req, outcome, input) = fulfilled(&h, 3).await;

    let before = proxy.requests_matching(&pod_lists()).len();
    let ahead = h
        .provider
        .read_ahead(&req, RequestType::Acquire, &outcome.provider_data)
        .expect("an acquire's status read is read ahead when no watch cache answers")
        .await;
    let report = h.provider.status_after(input, Some(ahead)).await.unwrap();
    assert_eq!(report.verdict, Verdict::Fulfilled, "{report:?}");
    assert_eq!(
        ids_with(&report, MachineStatus::Running),
        outcome.resource_ids
    );
    assert_eq!(
        proxy.requests_matching(&pod_lists()).len() - before,
        1,
        "the status read used the LIST read ahead and took no other"
    );
    // A return's status read spans requests and is not read ahead.
    assert!(
        h.provider
            .read_ahead(&req, RequestType::Return, &outcome.provider_data)
            .is_none()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_machine_recorded_after_the_read_ahead_is_listed_again_not_called_gone() {
    let (h, proxy) = harness_through("ahead-late", json!({})).await;
    let (req, outcome, mut input) = fulfilled(&h, 2).await;

    let before = proxy.requests_matching(&pod_lists()).len();
    let ahead = h
        .provider
        .read_ahead(&req, RequestType::Acquire, &outcome.provider_data)
        .unwrap()
        .await;
    // Another process creates a pod of the request and records it as a machine, after the
    // LIST above and before this status read's machine rows were read.
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let mut late: Pod = serde_json::from_value(json!({
        "metadata": {"name": "late", "labels": {"orb.io/managed": "true", "orb.io/request-id": req.to_string()}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}],
            "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0},
    }))
    .unwrap();
    late = pods.create(&PostParams::default(), &late).await.unwrap();
    assert!(late.metadata.uid.is_some());
    input.machines = status_machines(
        outcome
            .resource_ids
            .iter()
            .map(String::as_str)
            .chain(["late"])
            .map(|name| machine_ref(&req, name, &outcome, "Pod")),
    );
    let report = h.provider.status_after(input, Some(ahead)).await.unwrap();
    let late = report
        .machines
        .iter()
        .find(|m| m.machine_id == "late")
        .expect("the late machine is reported");
    assert_ne!(
        late.status_reason.as_deref(),
        Some(GONE_REASON),
        "a pod created after the read ahead is not gone: {late:?}"
    );
    assert_ne!(late.status, MachineStatus::Terminated, "{late:?}");
    assert_eq!(
        proxy.requests_matching(&pod_lists()).len() - before,
        2,
        "the read ahead missed a recorded machine, so the pods were LISTed again"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_read_ahead_that_failed_is_the_status_reads_answer() {
    let (h, proxy) = harness_through(
        "ahead-failed",
        json!({"max_retries": 2, "retry_base_delay": 0.05, "retry_max_delay": 0.2}),
    )
    .await;
    let (req, outcome, input) = fulfilled(&h, 2).await;

    // Every pod LIST fails with a server error (more than the retries).
    proxy.script(pod_lists(), [Fault::ServerError; 20]);
    let ahead = h
        .provider
        .read_ahead(&req, RequestType::Acquire, &outcome.provider_data)
        .unwrap()
        .await;
    let tried = proxy.requests_matching(&pod_lists()).len();
    let report = h
        .provider
        .status_after(input.clone(), Some(ahead))
        .await
        .unwrap();
    assert_eq!(report.verdict, Verdict::InProgress, "{report:?}");
    let message = report.message.unwrap_or_default();
    assert!(
        message.contains("did not answer") && message.contains("next status read asks again"),
        "the failed read is reported as the status read's: {message}"
    );
    assert_eq!(
        proxy.requests_matching(&pod_lists()).len(),
        tried,
        "the status read did not LIST again after the read ahead had failed"
    );
    // Once the apiserver answers, the next read is whole again.
    proxy.script(pod_lists(), []);
    wait_for("the status read answers again", WAIT, || async {
        let ahead = h
            .provider
            .read_ahead(&req, RequestType::Acquire, &outcome.provider_data)
            .unwrap()
            .await;
        match h.provider.status_after(input.clone(), Some(ahead)).await {
            Ok(report) if report.verdict == Verdict::Fulfilled => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
}
