//! The pod watch cache across a kube-apiserver restart: the watch breaks, the loop resumes,
//! and afterwards status read from the cache equals status read with LIST.
//!
//! This binary holds one test and must stay out of `tests/cluster` (the binary every other
//! orb-k8s cluster test shares): it restarts the shared apiserver (with
//! `tools/control-plane/cp restart kube-apiserver`, the control plane named by
//! `ORB_CP_STATE_DIR` / `ORB_CP_PORT_OFFSET`), and tests in one binary run at the same time.
//! Cargo runs test binaries one after another, so as a binary of its own no other test sees
//! the outage.

#[allow(dead_code)]
#[path = "cluster/common.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{
    WAIT, acquire, harness, provider_for, snapshot, status_input, template, wait_verdict,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use kube_fixture::{Check, wait_for};
use orb_core::provider::Provider;
use orb_k8s::ClusterViews;
use orb_k8s::config::NamespaceScope;
use orb_k8s::daemon::PodCache;
use orb_k8s::metrics::ReasonLabels;
use serde_json::json;
use tokio::sync::watch;

fn restart_apiserver() {
    let cp = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/control-plane/cp");
    let out = std::process::Command::new("bash")
        .arg(&cp)
        .args(["restart", "kube-apiserver"])
        .output()
        .expect("running cp restart");
    assert!(
        out.status.success(),
        "cp restart kube-apiserver failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn after_an_apiserver_restart_the_cache_agrees_with_list() {
    let mut h = harness("cache-restart", json!({})).await;
    let ns = h.ns.name().to_string();
    let listing = provider_for(&h.cluster, &ns, json!({}));
    let metrics = h.provider.metrics().clone();
    let cache = Arc::new(PodCache::new(
        "orb.io",
        NamespaceScope::Single(ns.clone()),
        Duration::from_secs(600),
        None,
        metrics.clone(),
    ));
    h.provider = h.provider.with_cluster_views(ClusterViews {
        pods: Some(cache.clone()),
        nodes: None,
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(h.cluster.client.clone(), stopped));

    // A Deployment: its status reads come from the cache (a Pod-handler request whose
    // recorded pod is missing from the cache would LIST instead).
    let t = template("restart", Some(orb_core::template::ProviderApi::Deployment));
    let (id, outcome) = acquire(&h, &t, 3).await;
    let input = status_input(&id, &t, 3, &outcome);
    wait_verdict(&h, &input, "fulfilled").await;

    tokio::task::spawn_blocking(restart_apiserver)
        .await
        .expect("restart task");

    // Changes after the restart reach the cache through the resumed watch.
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    let victim = outcome_pod(&api, &id.to_string()).await;
    wait_for("deleting a pod after the restart", WAIT, || async {
        match api
            .delete(&victim, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => Check::Done(()),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    wait_for(
        "cache and LIST to agree after the restart",
        WAIT,
        || async {
            let listed = match api
                .list(&ListParams::default().labels("orb.io/managed=true"))
                .await
            {
                Ok(list) => snapshot(&list.items),
                Err(e) => return Check::NotYet(format!("list: {e}")),
            };
            let cached = snapshot(&cache.all_pods(Some(&ns)));
            let (a, b) = match (
                h.provider.status(input.clone()).await,
                listing.status(input.clone()).await,
            ) {
                (Ok(a), Ok(b)) => (a, b),
                (a, b) => {
                    return Check::NotYet(format!("status errors: {:?} / {:?}", a.err(), b.err()));
                }
            };
            let same_status = format!("{:?}{:?}", a.verdict, a.machines)
                == format!("{:?}{:?}", b.verdict, b.machines);
            let victim_gone = cached.iter().all(|(name, _, _)| name != &victim);
            if listed == cached && same_status && victim_gone && !cached.is_empty() {
                Check::Done(())
            } else {
                Check::NotYet(format!(
                    "cache {cached:?} vs list {listed:?}; status equal: {same_status}"
                ))
            }
        },
    )
    .await;
    let broken = ["error", "relist"]
        .into_iter()
        .map(|reason| {
            metrics
                .watch_reconnects
                .get_or_create(&ReasonLabels { reason })
                .get()
        })
        .sum::<u64>();
    assert!(broken >= 1, "the restart did not interrupt the watch");
    assert!(cache.serving(), "the cache is not serving after recovering");
    let _ = stop.send(true);
    task.await.unwrap();
}

async fn outcome_pod(api: &Api<Pod>, request_id: &str) -> String {
    wait_for("a pod of the request after the restart", WAIT, || async {
        match api
            .list(&ListParams::default().labels(&format!("orb.io/request-id={request_id}")))
            .await
        {
            Ok(list) if !list.items.is_empty() => Check::Done(list.items[0].name_any()),
            Ok(_) => Check::NotYet("no pods".into()),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await
}
