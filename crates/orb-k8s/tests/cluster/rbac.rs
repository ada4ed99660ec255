//! The broker runs as ServiceAccount `orb-broker` bound to exactly the Role in docs/rbac.yaml
//! (kube_fixture::identity, the identity every `harness` provider has), not as cluster admin,
//! and completes request → status → return with every handler, the Deployment's eviction path
//! included. A verb the Role lacks is a 403 here, so the documented Role is the one that works.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use orb_core::ids::RequestId;
use orb_core::machine::MachineStatus;
use orb_core::provider::{Provider, StatusInput};
use orb_core::request::RequestType;
use orb_core::template::ProviderApi;
use orb_core::test_support::status_machines;
use serde_json::json;

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn every_handler_works_with_only_the_documented_role() {
    let h = harness("rbac", json!({})).await;
    // The provider's token really is limited: outside its namespace it may not even list pods.
    let client = h.provider.kube_client().await.unwrap();
    match Api::<Pod>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("the ServiceAccount must not read pods in 'default': {other:?}"),
    }

    for api in ProviderApi::ALL {
        let t = template(
            &format!("rbac-{}", api.as_str().to_ascii_lowercase()),
            Some(api),
        );
        let (req, outcome) = acquire(&h, &t, 2).await;
        let input = status_input(&req, &t, 2, &outcome);
        let report = wait_verdict(&h, &input, "fulfilled").await;
        let running = ids_with(&report, MachineStatus::Running);
        let done_kind = if api == ProviderApi::Job {
            MachineStatus::Stopped
        } else {
            MachineStatus::Running
        };
        let delivered = ids_with(&report, done_kind);
        assert_eq!(
            delivered.len(),
            2,
            "{api}: {report:?} (running: {running:?})"
        );

        let victim = delivered.last().unwrap().clone();
        release(&h, &req, &outcome, api.as_str(), &[&victim])
            .await
            .unwrap_or_else(|e| panic!("{api}: release as the ServiceAccount failed: {e}"));
        let mut returned = machine_ref(&req, &victim, &outcome, api.as_str());
        returned.uid = report
            .machines
            .iter()
            .find(|m| m.machine_id == victim)
            .and_then(|m| m.uid.clone());
        let return_input = StatusInput {
            request_id: RequestId::new_return(),
            request_type: RequestType::Return,
            requested_count: 1,
            provider_api: Some(api),
            provider_data: json!(null).into(),
            template: Some(t.clone()),
            machines: status_machines([returned]),
        };
        wait_verdict(&h, &return_input, "fulfilled").await;
    }
}

/// Returning a Running Deployment host while its sibling is Pending: the ReplicaSet would
/// remove the Pending pod on a plain scale-down, so orb evicts the named one (dry run, then
/// for real: `create` on `pods/eviction`). The return must complete under the documented Role.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deployment_return_that_evicts_works_with_only_the_documented_role() {
    let h = harness("rbac-evict", json!({})).await;
    // Room for one pod: the second replica stays Pending for real.
    let node = h.cluster.node_with_room("rbac-evict", 1).await;
    let mut t = template("rbac-evict", Some(ProviderApi::Deployment));
    t.node_selector = Some(serde_json::from_value(node.node_selector()).unwrap());
    t.tolerations = Some(serde_json::from_value(node.tolerations()).unwrap());
    let (req, outcome) = acquire(&h, &t, 2).await;
    let input = status_input(&req, &t, 2, &outcome);
    let (running, pending) =
        kube_fixture::wait_for("one pod Running, one Pending", WAIT, || async {
            match h.provider.status(input.clone()).await {
                Ok(r) => {
                    let running = ids_with(&r, MachineStatus::Running);
                    let pending = ids_with(&r, MachineStatus::Pending);
                    if running.len() == 1 && pending.len() == 1 {
                        kube_fixture::Check::Done((running[0].clone(), pending[0].clone()))
                    } else {
                        kube_fixture::Check::NotYet(format!(
                            "running {running:?}, pending {pending:?}"
                        ))
                    }
                }
                Err(e) => kube_fixture::Check::NotYet(format!("error: {e}")),
            }
        })
        .await;

    let result = release(&h, &req, &outcome, "Deployment", &[&running])
        .await
        .unwrap_or_else(|e| panic!("release as the ServiceAccount failed: {e}"));
    assert!(
        result.failed.is_empty(),
        "the return failed as the ServiceAccount: {:?}",
        result.failed
    );
    assert_eq!(
        result.released,
        vec![running.clone()],
        "{:?}",
        result.message
    );
    assert!(
        result
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("evicted"),
        "the eviction path ran: {:?}",
        result.message
    );
    // The named pod goes and the Pending sibling is never taken for it (the replacement the
    // ReplicaSet makes is scaled away only when that cannot take the sibling instead).
    let live = kube_fixture::wait_for("the named pod gone", WAIT, || async {
        let live = live_pods(&h, &req).await;
        if live.contains(&running) {
            kube_fixture::Check::NotYet(format!("{live:?}"))
        } else {
            kube_fixture::Check::Done(live)
        }
    })
    .await;
    assert!(live.contains(&pending), "{live:?}");
}
