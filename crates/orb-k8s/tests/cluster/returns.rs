//! Returns that take exactly the pods they name, however the ReplicaSet races them.

use std::time::Duration;

use crate::common::*;
use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_fixture::fault_proxy::RequestMatch;
use kube_fixture::{Check, wait_for};
use orb_core::machine::MachineStatus;
use orb_core::template::ProviderApi;
use serde_json::json;

/// Writes pod `name` not Ready, as the kubelet does when its readiness probe fails (KWOK
/// leaves a Running pod's status alone).
async fn make_not_ready(h: &Harness, name: &str) {
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let not_ready = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ReadinessProbeFailed"},
        {"type": "ContainersReady", "status": "False", "reason": "ReadinessProbeFailed"},
    ]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&not_ready))
        .await
        .expect("writing the pod's readiness as the kubelet would");
}

/// A sibling that is Running but not Ready outranks the named pod for the ReplicaSet, so the
/// return evicts. The race made certain: every eviction is held at the proxy for three seconds
/// (its dry run too). Had the return lowered replicas before, the ReplicaSet would remove the
/// not-Ready sibling meanwhile; had it lowered them after, it would remove the sibling instead
/// of the Ready replacement it made for the victim. The return must take the named pod and no
/// other: both siblings stay, and the Deployment keeps its count (the replacement goes with
/// the Deployment when the last host is returned, which the second return shows).
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_evicting_return_never_lets_the_replicaset_take_an_unnamed_pod() {
    let (h, proxy) = crate::resilience::harness_through("ret-evict", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 3).await;
    let name = outcome.resource_ids[0].clone();
    let report = wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "fulfilled").await;
    let all = ids_with(&report, MachineStatus::Running);
    let (victim, mut kept) = (all[0].clone(), all[1..].to_vec());
    kept.sort();
    make_not_ready(&h, &kept[0]).await;

    // Any write to the Deployment (a scale-down) is held until the eviction behind it is held
    // in its place for three seconds: the ReplicaSet gets the lower count first.
    proxy.hold(RequestMatch {
        path_contains: Some(format!("/deployments/{name}")),
        methods: vec![Method::PATCH],
    });
    let done = std::sync::atomic::AtomicBool::new(false);
    let named = [victim.as_str()];
    let release = async {
        let r = release_keeping(&h, &req, &outcome, "Deployment", &named, Some(&kept)).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    };
    let race = async {
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            if proxy.held() > 0 {
                proxy.hold(RequestMatch {
                    path_contains: Some("/eviction".into()),
                    methods: vec![Method::POST],
                });
                tokio::time::sleep(Duration::from_secs(3)).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.lift_hold();
    };
    let (released, ()) = tokio::join!(release, race);
    let released = released.expect("the return");
    assert_eq!(
        released.released,
        vec![victim.clone()],
        "{:?}",
        released.message
    );

    // The victim goes and both siblings stay, for good.
    wait_for("the victim gone", WAIT, || async {
        let live = live_pods(&h, &req).await;
        if live.contains(&victim) {
            Check::NotYet(format!("{live:?}"))
        } else {
            Check::Done(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let live = live_pods(&h, &req).await;
    assert!(
        kept.iter().all(|k| live.contains(k)),
        "the ReplicaSet took a pod nobody named: {live:?}, kept {kept:?}"
    );
    assert_eq!(
        live.len(),
        3,
        "the siblings and the victim's replacement: {live:?}"
    );
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert_eq!(deployments.get(&name).await.unwrap().spec.replicas, Some(3));

    // The last hosts returned, nothing of the request stays.
    let last: Vec<&str> = kept.iter().map(String::as_str).collect();
    release_keeping(&h, &req, &outcome, "Deployment", &last, Some(&[]))
        .await
        .expect("the return of the last hosts");
    wait_live_pods(&h, &req, &[]).await;
    assert!(deployments.get_opt(&name).await.unwrap().is_none());
}
