//! Behaviour across handlers: pod timeout from creation, cancel, namespace scope.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::ListParams;
use kube_fixture::{Check, wait_for};
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{
    AcquireInput, CancelInput, Provider, ProviderError, StatusMachines, removed_by_orb,
};
use orb_core::template::ProviderApi;
use serde_json::json;

use crate::common::*;

fn unschedulable(id: &str, api: ProviderApi) -> orb_core::template::Template {
    let mut t = template(id, Some(api));
    t.node_selector = Some([("pool".to_string(), "does-not-exist".to_string())].into());
    t
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_unschedulable_pod_times_out_from_creation_and_is_deleted() {
    let h = harness("timeout-pod", json!({"pod_timeout_seconds": 2})).await;
    let t = unschedulable("stuck", ProviderApi::Pod);
    let (req, outcome) = acquire(&h, &t, 1).await;
    let input = status_input(&req, &t, 1, &outcome);
    let report = wait_verdict(&h, &input, "failed").await;
    let m = &report.machines[0];
    assert_eq!(
        m.status,
        MachineStatus::Failed,
        "timed out, and its pod not gone yet"
    );
    let reason = m.status_reason.clone().unwrap();
    assert!(
        reason.contains("timed out") && reason.contains("Unschedulable"),
        "{reason}"
    );
    let Verdict::Failed { reason } = &report.verdict else {
        unreachable!()
    };
    assert!(
        reason.contains("timed out") && reason.contains("Unschedulable"),
        "the request's failure names the cause: {reason}"
    );
    assert_eq!(report.fulfilled, 0, "a timed-out pod is never capacity");
    let reason = m.status_reason.clone().unwrap();
    assert!(
        reason.contains("deleted by orb") && removed_by_orb(&m.provider_data),
        "orb's own deletion, and marked so: {reason}"
    );
    wait_live_pods(&h, &req, &[]).await;
    let mut after = input.clone();
    // The machine as the broker stored it from that read.
    let stored = orb_core::machine::Machine {
        status: MachineStatus::Failed,
        provider_data: m.provider_data.clone(),
        ..orb_core::test_support::machine(&m.machine_id)
            .request_id(req.clone())
            .build()
    };
    after.machines = StatusMachines::new(vec![stored].into(), vec![input.provider_data.clone()]);
    let gone = h.provider.status(after).await.unwrap();
    assert_eq!(
        gone.machines[0].status,
        MachineStatus::Terminated,
        "deleted: gone"
    );
    let gone_reason = gone.machines[0].status_reason.clone().unwrap();
    assert!(!gone_reason.contains("outside orb"), "{gone_reason}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_timed_out_deployment_pod_is_scaled_away_not_recreated() {
    let h = harness("timeout-deploy", json!({"pod_timeout_seconds": 2})).await;
    let t = unschedulable("stuck", ProviderApi::Deployment);
    let (req, outcome) = acquire(&h, &t, 2).await;
    let input = status_input(&req, &t, 2, &outcome);
    let name = outcome.resource_ids[0].clone();
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    // Every pod timed out, so the release path removes the whole Deployment (all its pods
    // named); it never deletes the pods themselves, which the ReplicaSet would recreate.
    wait_for("the Deployment released by the timeout", WAIT, || async {
        let report = h.provider.status(input.clone()).await.unwrap();
        let replicas = deployments
            .get_opt(&name)
            .await
            .unwrap()
            .map(|d| d.spec.replicas);
        if matches!(replicas, None | Some(Some(0))) {
            Check::Done(report)
        } else {
            Check::NotYet(format!("replicas {replicas:?}, {:?}", report.message))
        }
    })
    .await;
    wait_live_pods(&h, &req, &[]).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn timed_out_pods_are_kept_when_delete_timed_out_pods_is_off() {
    let h = harness(
        "timeout-keep",
        json!({"pod_timeout_seconds": 2, "delete_timed_out_pods": false}),
    )
    .await;
    let t = unschedulable("stuck", ProviderApi::Pod);
    let (req, outcome) = acquire(&h, &t, 1).await;
    let report = wait_verdict(&h, &status_input(&req, &t, 1, &outcome), "failed").await;
    assert_eq!(report.machines[0].status, MachineStatus::Failed);
    assert_eq!(
        live_pods(&h, &req).await,
        outcome.resource_ids,
        "kept for inspection"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cancel_deletes_every_kind_labelled_with_the_request() {
    let h = harness("cancel", json!({})).await;
    // One request id used by three handlers, as a mixed leftover would look.
    let req = orb_core::ids::RequestId::new_acquire();
    let mut data = json!(null);
    for (api, id) in [
        (ProviderApi::Pod, "p"),
        (ProviderApi::Job, "j"),
        (ProviderApi::StatefulSet, "s"),
    ] {
        let mut t = template(id, Some(api));
        t.command = Some(vec!["sleep".into(), "3600".into()]);
        let outcome = h
            .provider
            .acquire(AcquireInput {
                request_id: req.clone(),
                template: t,
                count: 1,
            })
            .await
            .unwrap();
        data = outcome.provider_data;
    }
    let outcome = h
        .provider
        .cancel(CancelInput {
            request_id: req.clone(),
            provider_api: None,
            provider_data: data,
        })
        .await
        .unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    let selector = format!("orb.io/request-id={req}");
    let lp = ListParams::default().labels(&selector);
    let c = h.cluster.client.clone();
    let ns = h.ns.name().to_string();
    wait_for("nothing labelled with the request left", WAIT, || {
        let (c, ns, lp) = (c.clone(), ns.clone(), lp.clone());
        async move {
            let live = |items: Vec<kube::api::ObjectMeta>| {
                items
                    .into_iter()
                    .filter(|m| m.deletion_timestamp.is_none())
                    .count()
            };
            let pods = live(
                Api::<Pod>::namespaced(c.clone(), &ns)
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|o| o.metadata)
                    .collect(),
            );
            let jobs = live(
                Api::<Job>::namespaced(c.clone(), &ns)
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|o| o.metadata)
                    .collect(),
            );
            let sets = live(
                Api::<StatefulSet>::namespaced(c.clone(), &ns)
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|o| o.metadata)
                    .collect(),
            );
            let services = live(
                Api::<Service>::namespaced(c.clone(), &ns)
                    .list(&lp)
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|o| o.metadata)
                    .collect(),
            );
            if pods + jobs + sets + services == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!(
                    "pods {pods}, jobs {jobs}, sets {sets}, services {services}"
                ))
            }
        }
    })
    .await;
    assert!(outcome.deleted.len() >= 4, "{:?}", outcome.deleted);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_namespace_outside_the_managed_list_is_refused_before_anything_is_created() {
    let cluster = kube_fixture::TestCluster::connect().await;
    let ns = cluster.namespace("scope").await;
    let other = cluster.namespace("scope-other").await;
    let settings = json!({"namespaces": [ns.name()]});
    let identity = broker_identity(&cluster, &ns, &settings).await;
    let provider = provider_for(&identity.as_cluster(), ns.name(), settings);
    let mut t = template("elsewhere", Some(ProviderApi::Deployment));
    t.namespace = Some(other.name().to_string());
    let err = provider
        .acquire(AcquireInput {
            request_id: orb_core::ids::RequestId::new_acquire(),
            template: t,
            count: 1,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Rejected(m) if m.contains("is not managed by this provider")),
        "{err:?}"
    );
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), other.name());
    assert!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_handler_follows_provider_api_at_request_time() {
    let h = harness("dispatch", json!({})).await;
    let mut t = template("retarget", None);
    let (_, as_pod) = acquire(&h, &t, 1).await;
    assert_eq!(as_pod.provider_data["provider_api"], "Pod");
    t.provider_api = Some(ProviderApi::Deployment);
    let (_, as_deployment) = acquire(&h, &t, 1).await;
    assert_eq!(as_deployment.provider_data["provider_api"], "Deployment");
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert!(
        deployments
            .get_opt(&as_deployment.resource_ids[0])
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn reclaims_report_a_pod_deleted_outside_orb_and_leave_the_others() {
    let h = harness("reclaim", json!({})).await;
    let t = template("bare", None);
    let (req, outcome) = acquire(&h, &t, 2).await;
    wait_verdict(&h, &status_input(&req, &t, 2, &outcome), "fulfilled").await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let gone = outcome.resource_ids[0].clone();
    pods.delete(&gone, &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_live_pods(&h, &req, &outcome.resource_ids[1..]).await;
    let machines = outcome
        .resource_ids
        .iter()
        .map(|id| machine_ref(&req, id, &outcome, "Pod"))
        .collect();
    let notices = h
        .provider
        .reclaims(orb_core::provider::ReclaimQuery { machines })
        .await
        .unwrap();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].machine_id, gone);
    assert_eq!(notices[0].grace_period_secs, 0);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_high_risk_deployment_pod_spec_is_rejected_before_anything_is_created() {
    let h = harness("audit", json!({})).await;
    let mut t = template("risky", Some(ProviderApi::Deployment));
    t.pod_spec_override = Some(json!({
        "hostNetwork": true,
        "containers": [{"name": "orb", "securityContext": {"privileged": true}}]
    }));
    let err = h
        .provider
        .acquire(AcquireInput {
            request_id: orb_core::ids::RequestId::new_acquire(),
            template: t,
            count: 1,
        })
        .await
        .unwrap_err();
    let ProviderError::Rejected(text) = &err else {
        panic!("expected a rejection, got {err:?}")
    };
    assert!(
        text.contains("hostNetwork") && text.contains("privileged"),
        "{text}"
    );
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
