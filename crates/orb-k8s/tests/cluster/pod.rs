//! The Pod handler: N named pods, idempotent retries, partial success, exact release.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireInput, Provider, ProviderError};
use orb_core::template::ProviderApi;
use serde_json::json;

use crate::common::*;

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_acquire_names_n_pods_and_reports_them_running_with_ips() {
    let h = harness("pod-acquire", json!({})).await;
    let t = template("bare", None); // provider_api unset → Pod
    let (req, outcome) = acquire(&h, &t, 3).await;
    let segment = &req.hex_digits()[..20];
    let expected: Vec<String> = (0..3).map(|i| format!("orb-{segment}-{i:04}")).collect();
    assert_eq!(outcome.resource_ids, expected);
    assert_eq!(outcome.machines.len(), 3);
    assert_eq!(outcome.provider_data["pod_names"], json!(expected));

    let report = wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "fulfilled").await;
    assert_eq!(report.fulfilled, 3);
    for m in &report.machines {
        assert_eq!(m.status, MachineStatus::Running, "{m:?}");
        assert!(m.private_ip.is_some(), "{} has no IP", m.machine_id);
        assert!(m.launch_time.is_some());
        assert!(
            m.provider_data["cloud_host_id"]
                .as_str()
                .unwrap()
                .starts_with("kwok-node-")
        );
        assert_eq!(m.tags["orb.io/machine-id"], m.machine_id);
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_release_deletes_exactly_the_named_pods_and_tolerates_gone_ones() {
    let h = harness("pod-release", json!({})).await;
    let t = template("bare", Some(ProviderApi::Pod));
    let (req, outcome) = acquire(&h, &t, 3).await;
    let names = outcome.resource_ids.clone();

    let empty = release(&h, &req, &outcome, "Pod", &[]).await.unwrap();
    assert!(empty.released.is_empty() && empty.failed.is_empty());
    assert_eq!(
        live_pods(&h, &req).await,
        names,
        "an empty release changes nothing"
    );

    let released = release(&h, &req, &outcome, "Pod", &[&names[1]])
        .await
        .unwrap();
    assert_eq!(released.released, vec![names[1].clone()]);
    wait_live_pods(&h, &req, &[names[0].clone(), names[2].clone()]).await;

    // Releasing it again: the 404 means already gone, which is success.
    let again = release(&h, &req, &outcome, "Pod", &[&names[1]])
        .await
        .unwrap();
    assert_eq!(again.released, vec![names[1].clone()]);
    assert!(again.failed.is_empty());
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_acquire_retried_with_the_same_request_id_adopts_its_own_pods() {
    let h = harness("pod-409", json!({})).await;
    let t = template("bare", None);
    let (req, first) = acquire(&h, &t, 2).await;
    let second = h
        .provider
        .acquire(AcquireInput {
            request_id: req.clone(),
            template: t.clone(),
            count: 2,
        })
        .await
        .expect("a retry with the same request id succeeds");
    assert_eq!(second.resource_ids, first.resource_ids);
    assert_eq!(second.provider_data["failed_pod_names"], json!(null));
    assert_eq!(live_pods(&h, &req).await.len(), 2);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_acquire_keeps_partial_success_and_records_the_failed_names() {
    let h = harness("pod-partial", json!({})).await;
    let t = template("bare", None);
    let req = orb_core::ids::RequestId::new_acquire();
    // Someone else's pod already holds the name of our second pod.
    let squatter_name = format!("orb-{}-0001", &req.hex_digits()[..20]);
    let squatter: Pod = serde_json::from_value(json!({
        "metadata": {"name": squatter_name, "labels": {"orb.io/request-id": "req-someone-else"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    pods.create(&PostParams::default(), &squatter)
        .await
        .unwrap();

    let outcome = h
        .provider
        .acquire(AcquireInput {
            request_id: req.clone(),
            template: t.clone(),
            count: 3,
        })
        .await
        .expect("two of three creates succeed");
    assert_eq!(outcome.resource_ids.len(), 2);
    assert_eq!(
        outcome.provider_data["failed_pod_names"],
        json!([squatter_name])
    );
    let reason = outcome.provider_data["create_failures"][&squatter_name]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("belongs to request req-someone-else"),
        "{reason}"
    );
    assert!(
        outcome
            .message
            .as_deref()
            .unwrap()
            .contains("created 2 of 3 pods")
    );

    let report = wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "partial").await;
    assert_eq!((report.fulfilled, report.failed), (2, 1));
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_acquire_where_every_create_fails_returns_the_apiservers_reason() {
    let h = harness("pod-allfail", json!({})).await;
    let mut t = template("bad-resources", None);
    // Requests above limits: the apiserver refuses every pod (422).
    t.resource_requests = Some(orb_core::template::ResourceSpec {
        cpu: Some("2".into()),
        ..Default::default()
    });
    t.resource_limits = Some(orb_core::template::ResourceSpec {
        cpu: Some("1".into()),
        ..Default::default()
    });
    let err = h
        .provider
        .acquire(AcquireInput {
            request_id: orb_core::ids::RequestId::new_acquire(),
            template: t,
            count: 2,
        })
        .await
        .unwrap_err();
    match &err {
        ProviderError::Rejected(text) => {
            assert!(text.contains("422"), "{text}");
            assert!(
                text.contains("must be less than or equal to cpu limit"),
                "{text}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pod_release_never_deletes_a_newer_pod_of_the_same_name() {
    use orb_core::provider::ReleaseInput;
    let h = harness("pod-uid", json!({})).await;
    let t = template("bare", None);
    let (req, outcome) = acquire(&h, &t, 1).await;
    let name = outcome.resource_ids[0].clone();
    // orb remembers an older incarnation of this name (another UID).
    let mut stale = machine_ref(&req, &name, &outcome, "Pod");
    stale.uid = Some("00000000-0000-4000-8000-000000000000".into());
    let released = h
        .provider
        .release(ReleaseInput {
            return_request_id: orb_core::ids::RequestId::new_return(),
            machines: vec![stale],
            templates: Default::default(),
            others: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(
        released.released,
        vec![name.clone()],
        "the remembered pod is gone"
    );
    assert_eq!(
        live_pods(&h, &req).await,
        vec![name.clone()],
        "the current pod stays"
    );

    // With the right UID the pod goes.
    let mut current = machine_ref(&req, &name, &outcome, "Pod");
    current.uid = outcome.machines[0].uid.clone();
    h.provider
        .release(ReleaseInput {
            return_request_id: orb_core::ids::RequestId::new_return(),
            machines: vec![current],
            templates: Default::default(),
            others: Default::default(),
        })
        .await
        .unwrap();
    wait_live_pods(&h, &req, &[]).await;
}
