//! Each kind driven through the provider contract the broker uses: request 3 → 3 running
//! machines with IPs → return one (the tail for a StatefulSet; a Job goes as a whole) → the
//! return completes and the others stay.

use orb_core::machine::MachineStatus;
use orb_core::provider::{Provider, StatusInput};
use orb_core::request::RequestType;
use orb_core::template::ProviderApi;
use orb_core::test_support::status_machines;
use serde_json::json;

use crate::common::*;

async fn request_status_return(api: ProviderApi) {
    let h = harness(
        &format!("e2e-{}", api.as_str().to_ascii_lowercase()),
        json!({}),
    )
    .await;
    let t = template("worker", Some(api));
    let (req, outcome) = acquire(&h, &t, 3).await;
    let acquire_input = status_input(&req, &t, 3, &outcome);
    let report = wait_verdict(&h, &acquire_input, "fulfilled").await;
    let running = ids_with(&report, MachineStatus::Running);
    assert_eq!(running.len(), 3, "{api}: {report:?}");
    assert!(
        report.machines.iter().all(|m| m.private_ip.is_some()),
        "{api}: every host has an IP"
    );

    let victim = running.last().unwrap().clone(); // the highest ordinal for a StatefulSet
    let mut returned = machine_ref(&req, &victim, &outcome, api.as_str());
    returned.uid = report
        .machines
        .iter()
        .find(|m| m.machine_id == victim)
        .unwrap()
        .uid
        .clone();
    release(&h, &req, &outcome, api.as_str(), &[&victim])
        .await
        .unwrap();
    let return_input = StatusInput {
        request_id: orb_core::ids::RequestId::new_return(),
        request_type: RequestType::Return,
        requested_count: 1,
        provider_api: Some(api),
        provider_data: json!(null).into(),
        template: Some(t.clone()),
        machines: status_machines([returned]),
    };
    let done = wait_verdict(&h, &return_input, "fulfilled").await;
    assert_eq!(
        ids_with(&done, MachineStatus::Terminated),
        vec![victim.clone()]
    );

    let after = h.provider.status(acquire_input).await.unwrap();
    let still: Vec<String> = ids_with(&after, MachineStatus::Running);
    let expected: Vec<String> = running.iter().filter(|n| **n != victim).cloned().collect();
    assert_eq!(still, expected, "{api}: the other machines stay");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_request_status_return() {
    request_status_return(ProviderApi::Pod).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_request_status_return() {
    request_status_return(ProviderApi::Deployment).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn statefulset_request_status_return() {
    request_status_return(ProviderApi::StatefulSet).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn job_request_status_and_whole_job_return() {
    let h = harness("e2e-job", json!({})).await;
    let t = template("batch", Some(ProviderApi::Job));
    let (req, outcome) = acquire(&h, &t, 3).await;
    wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "fulfilled").await;
    release(&h, &req, &outcome, "Job", &["anything"])
        .await
        .unwrap();
    wait_live_pods(&h, &req, &[]).await;
}
