//! The pod watch cache of `orb serve` against the real control plane: it follows creates,
//! updates and deletes, relists after a 410 and at the resync interval, falls back to LIST
//! while its watch has failed past the stale timeout, and status reads
//! served from it equal status reads that LIST.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    Harness, Snapshot, WAIT, acquire, broker_identity, harness, provider_for, snapshot,
    status_input, template, wait_verdict,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::fault_proxy::{Fault, FaultPlan, FaultProxy, RequestMatch};
use kube_fixture::{Check, wait_for};
use orb_core::provider::Provider;
use orb_core::template::ProviderApi;
use orb_k8s::ClusterViews;
use orb_k8s::config::NamespaceScope;
use orb_k8s::daemon::PodCache;
use orb_k8s::daemon::pod_cache::Miss;
use orb_k8s::metrics::K8sMetrics;
use orb_k8s::metrics::ReasonLabels;
use orb_k8s::pod_read::PodRead;
use serde_json::json;
use tokio::sync::watch;

async fn listed(api: &Api<Pod>) -> Snapshot {
    let pods = api
        .list(&ListParams::default().labels("orb.io/managed=true"))
        .await
        .expect("listing managed pods");
    snapshot(&pods.items)
}

/// Waits until the cache holds exactly what a LIST returns for `ns`.
async fn wait_cache_equals_list(cache: &PodCache, api: &Api<Pod>, ns: &str, what: &str) {
    wait_for(what, WAIT, || async {
        let from_list = listed(api).await;
        let from_cache = snapshot(&cache.all_pods(Some(ns)));
        if from_list == from_cache {
            Check::Done(())
        } else {
            Check::NotYet(format!("cache {from_cache:?} vs list {from_list:?}"))
        }
    })
    .await
}

fn managed_pod(name: &str, request: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"orb.io/managed": "true", "orb.io/request-id": request},
        },
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1.36"}],
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .expect("valid pod")
}

fn new_cache(ns: &str, resync: Option<Duration>, metrics: &K8sMetrics) -> Arc<PodCache> {
    Arc::new(PodCache::new(
        "orb.io",
        NamespaceScope::Single(ns.to_string()),
        Duration::from_secs(600),
        resync,
        metrics.clone(),
    ))
}

/// A proxy in front of the cluster that answers the first `times` requests whose path holds
/// `fragment` with 410 Gone, and the match of every pod request of `h`'s namespace.
async fn proxy_answering_gone(
    h: &Harness,
    fragment: &str,
    times: usize,
) -> (FaultProxy, RequestMatch) {
    let proxy = FaultProxy::start(
        &broker_identity(&h.cluster, &h.ns, &json!({}))
            .await
            .as_cluster(),
    )
    .await;
    let pods = RequestMatch::path(&format!("/namespaces/{}/pods?", h.ns.name()));
    proxy.script(
        RequestMatch {
            path_contains: Some(fragment.into()),
            ..pods.clone()
        },
        std::iter::repeat_n(Fault::Gone, times),
    );
    (proxy, pods)
}

fn restarts(metrics: &K8sMetrics, reason: &'static str) -> u64 {
    metrics
        .watch_reconnects
        .get_or_create(&ReasonLabels { reason })
        .get()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_cache_follows_creates_updates_and_deletes() {
    let h = harness("cache-churn", json!({})).await;
    let ns = h.ns.name().to_string();
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    // Present before the cache starts: seen by its first LIST.
    for i in 0..4 {
        api.create(
            &PostParams::default(),
            &managed_pod(&format!("early-{i}"), "req-a"),
        )
        .await
        .expect("creating a pod");
    }
    // Not managed: never cached.
    let mut stranger = managed_pod("stranger", "req-a");
    stranger
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("orb.io/managed");
    api.create(&PostParams::default(), &stranger).await.unwrap();

    let metrics = K8sMetrics::new();
    let cache = new_cache(&ns, None, &metrics);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(h.cluster.client.clone(), stopped));
    wait_cache_equals_list(&cache, &api, &ns, "the first LIST in the cache").await;
    assert_eq!(cache.pods_of(&ns, "req-a").expect("synced").len(), 4);

    // Watched changes: creates in two requests, a label update, deletes.
    for i in 0..6 {
        let request = if i % 2 == 0 { "req-a" } else { "req-b" };
        api.create(
            &PostParams::default(),
            &managed_pod(&format!("late-{i}"), request),
        )
        .await
        .unwrap();
    }
    api.patch(
        "early-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    for name in ["early-1", "late-1"] {
        api.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    wait_cache_equals_list(&cache, &api, &ns, "the watched changes in the cache").await;
    let by_request = |r: &str| {
        let mut names: Vec<String> = cache
            .pods_of(&ns, r)
            .expect("synced")
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        by_request("req-a"),
        [
            "early-0", "early-2", "early-3", "late-0", "late-2", "late-4"
        ]
    );
    assert_eq!(by_request("req-b"), ["late-3", "late-5"]);
    assert!(
        cache
            .all_pods(Some(&ns))
            .iter()
            .all(|p| p.name_any() != "stranger"),
        "a pod without the managed label was cached"
    );
    assert!(cache.serving());
    let _ = stop.send(true);
    task.await.unwrap();
}

/// `periodic_resync_interval_seconds` from the provider config reaches the cache `orb serve`
/// builds ([`PodCache::for_provider`]) and relists at that interval.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_periodic_resync_relists_at_its_interval() {
    let h = harness(
        "cache-resync",
        json!({"periodic_resync_interval_seconds": 1}),
    )
    .await;
    let ns = h.ns.name().to_string();
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    api.create(&PostParams::default(), &managed_pod("p", "req-r"))
        .await
        .unwrap();
    let metrics = h.provider.metrics().clone();
    let cache =
        Arc::new(PodCache::for_provider(&h.provider).expect("watch_enabled defaults to true"));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(h.cluster.client.clone(), stopped));
    wait_for("two periodic resyncs", WAIT, || async {
        let n = restarts(&metrics, "resync");
        if n >= 2 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{n} resyncs"))
        }
    })
    .await;
    wait_cache_equals_list(&cache, &api, &ns, "the cache after resyncs").await;
    let _ = stop.send(true);
    task.await.unwrap();
}

/// Machines of a status report, comparable.
fn machines_json(report: &orb_core::provider::StatusReport) -> Vec<String> {
    report.machines.iter().map(|m| format!("{m:?}")).collect()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn status_from_the_cache_equals_status_from_list() {
    let mut h = harness("cache-status", json!({})).await;
    let ns = h.ns.name().to_string();
    // Same config and namespace; one reads the cache, the other LISTs.
    let listing = provider_for(&h.cluster, &ns, json!({}));
    let cache = new_cache(&ns, None, h.provider.metrics());
    h.provider = h.provider.with_cluster_views(ClusterViews {
        pods: Some(cache.clone()),
        nodes: None,
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(h.cluster.client.clone(), stopped));

    let mut inputs = Vec::new();
    for (api, count) in [(None, 3), (Some(ProviderApi::Deployment), 2)] {
        let t = template(&format!("t-{count}"), api);
        let (id, outcome) = acquire(&h, &t, count).await;
        let input = status_input(&id, &t, count, &outcome);
        wait_verdict(&h, &input, "fulfilled").await;
        inputs.push(input);
    }
    let compare = |what: &'static str| {
        let inputs = inputs.clone();
        let (cached, listing) = (&h.provider, &listing);
        async move {
            wait_for(what, WAIT, || {
                let inputs = inputs.clone();
                async move {
                    let mut seen = BTreeMap::new();
                    for input in &inputs {
                        let a = cached.status(input.clone()).await.expect("cached status");
                        let b = listing.status(input.clone()).await.expect("listed status");
                        let (a, b) = (
                            (format!("{:?}", a.verdict), machines_json(&a)),
                            (format!("{:?}", b.verdict), machines_json(&b)),
                        );
                        if a != b {
                            seen.insert(input.request_id.to_string(), format!("{a:?} vs {b:?}"));
                        }
                    }
                    if seen.is_empty() {
                        Check::Done(())
                    } else {
                        Check::NotYet(format!("{seen:?}"))
                    }
                }
            })
            .await
        }
    };
    compare("the same status from cache and LIST").await;
    // A pod removed behind orb's back shows the same way through both.
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    let victim = api
        .list(&ListParams::default().labels(&format!("orb.io/request-id={}", inputs[0].request_id)))
        .await
        .unwrap()
        .items
        .remove(0);
    api.delete(&victim.name_any(), &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    compare("the same status after a pod was deleted").await;
    let from_cache = h
        .provider
        .metrics()
        .status_reads
        .get_or_create(&ReasonLabels { reason: "cache" })
        .get();
    assert!(from_cache > 0, "no status read was served from the cache");
    let _ = stop.send(true);
    task.await.unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_410_gone_from_the_watch_makes_the_loop_relist_and_resume() {
    let h = harness("cache-gone", json!({})).await;
    let ns = h.ns.name().to_string();
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    for i in 0..3 {
        api.create(
            &PostParams::default(),
            &managed_pod(&format!("p-{i}"), "req-g"),
        )
        .await
        .unwrap();
    }
    // The cache reaches the apiserver through the proxy, which answers the first watch of
    // this namespace with 410 Gone, as for a compacted resourceVersion.
    let (proxy, watches) = proxy_answering_gone(&h, "watch=true", 1).await;
    let metrics = K8sMetrics::new();
    let cache = new_cache(&ns, None, &metrics);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(proxy.client(), stopped));
    wait_cache_equals_list(&cache, &api, &ns, "the cache after the 410").await;
    api.create(&PostParams::default(), &managed_pod("after", "req-g"))
        .await
        .unwrap();
    wait_cache_equals_list(&cache, &api, &ns, "a pod created after the relist").await;
    assert_eq!(restarts(&metrics, "relist"), 1, "one 410, one relist");
    let lists = proxy
        .requests_matching(&watches)
        .iter()
        .filter(|r| !r.path.contains("watch=true"))
        .count();
    assert_eq!(lists, 2, "the first LIST and the one after the 410");
    assert_eq!(proxy.counts().gone, 1);
    let _ = stop.send(true);
    task.await.unwrap();
}

/// A LIST page that fails part way (the second page answered 410 Gone, as for an expired
/// continue token, while the first is still being read) leaves the cache not serving, and
/// the next try lists again from the first page: every pod cached once. Two tries fail, so
/// the check that nothing is served runs well inside the backoff (1 s, then 2 s).
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_list_page_that_fails_makes_the_cache_list_again_from_the_first() {
    use futures::{StreamExt, TryStreamExt};
    let h = harness("cache-page-gone", json!({})).await;
    let ns = h.ns.name().to_string();
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), &ns);
    // More than one of the cache's 500-pod pages; Pending (no node matches), so they hold still.
    let count = 620;
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let mut pod = managed_pod(&format!("p-{i:03}"), &format!("req-{}", i % 7));
                pod.spec.as_mut().unwrap().node_selector =
                    Some(BTreeMap::from([("orb-rs.io/none".into(), "none".into())]));
                api.create(&PostParams::default(), &pod).await
            }
        })
        .buffer_unordered(50)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let (proxy, pods) = proxy_answering_gone(&h, "continue=", 2).await;
    let metrics = K8sMetrics::new();
    let cache = new_cache(&ns, None, &metrics);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(cache.clone().run(proxy.client(), stopped));
    wait_for("the failed LIST counted", WAIT, || async {
        if restarts(&metrics, "error") >= 1 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{:?}", cache.health()))
        }
    })
    .await;
    assert_eq!(
        cache.pods_of(&ns, "req-1"),
        Err(Miss::NotSynced),
        "nothing is served from a LIST that failed part way"
    );
    wait_cache_equals_list(&cache, &api, &ns, "the cache after the second try").await;
    assert_eq!(cache.all_pods(Some(&ns)).len(), count);
    assert_eq!(proxy.counts().gone, 2);
    assert_eq!(
        restarts(&metrics, "error"),
        2,
        "two failed pages, then a whole LIST"
    );
    let seen = proxy.requests_matching(&pods);
    let lists: Vec<_> = seen
        .iter()
        .filter(|r| !r.path.contains("watch=true"))
        .collect();
    let second_pages = lists
        .iter()
        .filter(|r| r.path.contains("continue="))
        .count();
    assert_eq!(
        (lists.len() - second_pages, second_pages),
        (3, 3),
        "the first page three times, the second three times (twice refused): {lists:?}"
    );
    let _ = stop.send(true);
    task.await.unwrap();
}

/// `stale_cache_timeout_seconds` from the provider config decides when the cache `orb serve`
/// builds stops answering.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn reads_fall_back_to_list_while_the_watch_fails_past_the_stale_timeout() {
    let mut h = harness("cache-stale", json!({"stale_cache_timeout_seconds": 1})).await;
    let ns = h.ns.name().to_string();
    let proxy = FaultProxy::start(
        &broker_identity(&h.cluster, &h.ns, &json!({}))
            .await
            .as_cluster(),
    )
    .await;
    let metrics = h.provider.metrics().clone();
    let cache = Arc::new(PodCache::for_provider(&h.provider).expect("the watch is on"));
    assert_eq!(cache.stale_after(), Duration::from_secs(1));
    h.provider = h.provider.with_cluster_views(ClusterViews {
        pods: Some(cache.clone()),
        nodes: None,
    });
    let (stop, stopped) = watch::channel(false);
    // The cache goes through the proxy; the provider's own LISTs do not.
    let task = tokio::spawn(cache.clone().run(proxy.client(), stopped));
    wait_for("the cache's first LIST", WAIT, || async {
        if cache.serving() {
            Check::Done(())
        } else {
            Check::NotYet(format!("{:?}", cache.health()))
        }
    })
    .await;
    let t = template("stale", Some(ProviderApi::Deployment));
    let (id, outcome) = acquire(&h, &t, 2).await;
    let input = status_input(&id, &t, 2, &outcome);
    wait_verdict(&h, &input, "fulfilled").await;
    let reads = |reason: &'static str| {
        metrics
            .status_reads
            .get_or_create(&ReasonLabels { reason })
            .get()
    };
    let cached_before = reads("cache");
    h.provider.status(input.clone()).await.expect("status");
    assert!(
        reads("cache") > cached_before,
        "a healthy cache did not answer: {} LIST reads, cache {:?}",
        reads("list"),
        cache.health(),
    );

    // Every call of the cache fails from now on, and its open watch is cut.
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        only: RequestMatch::path(&format!("/namespaces/{ns}/pods")),
        ..FaultPlan::default()
    });
    assert!(
        proxy.cut_connections() >= 1,
        "the cache had no open watch to cut"
    );
    wait_for("the cache to give up serving", WAIT, || async {
        match cache.pods_of(&ns, &id.to_string()) {
            Err(Miss::Stale { .. }) => Check::Done(()),
            other => Check::NotYet(format!("{:?}", other.map(|p| p.len()))),
        }
    })
    .await;
    let listed_before = reads("list");
    let report = h
        .provider
        .status(input.clone())
        .await
        .expect("status while stale");
    assert_eq!(report.machines.len(), 2, "{report:?}");
    assert!(
        reads("list") > listed_before,
        "a stale cache answered a read"
    );
    assert!(!cache.serving());

    proxy.set_plan(FaultPlan::default());
    wait_for("the cache to serve again", WAIT, || async {
        if cache.serving() {
            Check::Done(())
        } else {
            Check::NotYet(format!("{:?}", cache.health()))
        }
    })
    .await;
    let cached_before = reads("cache");
    h.provider
        .status(input.clone())
        .await
        .expect("status after recovery");
    assert!(
        reads("cache") > cached_before,
        "the recovered cache did not answer"
    );
    let _ = stop.send(true);
    task.await.unwrap();
}
