//! Pods read as protobuf against the real apiserver: the same pods, in every state the
//! simulated nodes can put them in, read the same as from JSON, whole and page by page.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_fixture::{Check, TestCluster, wait_for};
use orb_k8s::kept::Kept;
use orb_k8s::pod_read::PodRead;
use orb_k8s::protobuf_list::{Encoding, KeptPage, list_kept, list_kept_pages, list_metadata};
use serde_json::json;

use crate::common::WAIT;

const FINALIZER: &str = "orb-rs.io/test-hold";

fn pod(name: &str, annotations: serde_json::Value, node_selector: Option<&str>) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"orb-rs.io/list": "yes", "empty": ""},
            "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}],
            "initContainers": [{"name": "init", "image": "busybox:1.36"}],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}]},
    });
    if let Some(pool) = node_selector {
        pod["spec"]["nodeSelector"] = json!({"pool": pool});
    }
    serde_json::from_value(pod).unwrap()
}

/// The pods as JSON, whole as protobuf, page by page, and page by page overlapped.
async fn read_both(api: &Api<Kept>) -> (Vec<Kept>, Vec<Kept>, Vec<Kept>, Vec<Kept>) {
    let params = ListParams::default().labels("orb-rs.io/list=yes");
    let json = api.list(&params).await.unwrap().items;
    let whole = list_kept(api, &params).await.unwrap();
    assert_eq!(
        whole.encoding,
        Encoding::Protobuf,
        "the apiserver answers pods in protobuf"
    );
    let mut paged = Vec::new();
    let mut page_params = params.clone().limit(2);
    loop {
        let page = list_kept(api, &page_params).await.unwrap();
        assert!(page.items.len() <= 2);
        paged.extend(page.items);
        match page.continue_token {
            Some(token) => page_params = page_params.continue_token(&token),
            None => break,
        }
    }
    // The same pages with each next one asked for while the current one arrives.
    let overlapped = overlapped_pages(api, &params.clone().limit(2))
        .await
        .unwrap();
    assert!(overlapped.iter().all(|p| p.items.len() <= 2));
    assert!(
        overlapped[..overlapped.len() - 1]
            .iter()
            .all(|p| p.continue_token.is_some())
            && overlapped.last().unwrap().continue_token.is_none(),
        "every page but the last names a next one"
    );
    let overlapped = overlapped.into_iter().flat_map(|p| p.items).collect();
    (json, whole.items, paged, overlapped)
}

async fn overlapped_pages(
    api: &Api<Kept>,
    params: &ListParams,
) -> Result<Vec<KeptPage>, kube::Error> {
    let mut pages = Vec::new();
    list_kept_pages(api, params, |page| pages.push(page)).await?;
    Ok(pages)
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_protobuf_and_json_lists_read_alike() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("pod-list").await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let owner: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), ns.name());
    let owner = owner
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    // Off the simulated nodes, whose kubelet would drop the finalizer once it is deleted.
    let mut held = pod("held", json!({}), Some("does-not-exist"));
    held.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    held.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid, "controller": false, "blockOwnerDeletion": false,
        }))
        .unwrap(),
    ]);
    let all = [
        pod("running", json!({"note": "", "orb.io/x": "y"}), None),
        pod(
            "image-pull",
            json!({"kwok.orb-rs.io/waiting-reason": "ErrImagePull"}),
            None,
        ),
        pod(
            "crash-loop",
            json!({"kwok.orb-rs.io/crash-loop": "true"}),
            None,
        ),
        pod(
            "failed",
            json!({"kwok.orb-rs.io/fail-after": "1s", "kwok.orb-rs.io/exit-code": "137"}),
            None,
        ),
        pod(
            "succeeded",
            json!({"kwok.orb-rs.io/succeed-after": "1s"}),
            None,
        ),
        pod("unschedulable", json!({}), Some("does-not-exist")),
        held,
    ];

    for p in &all {
        pods.create(&PostParams::default(), p).await.unwrap();
    }
    pods.delete("held", &DeleteParams::default()).await.unwrap();

    let kept: Api<Kept> = Api::namespaced(cluster.client.clone(), ns.name());
    let phase_of = |pods: &[Kept], name: &str| {
        pods.iter()
            .find(|p| p.name() == name)
            .and_then(|p| p.phase().map(str::to_string))
    };
    // Every state reached, then two JSON reads around the protobuf ones that agree, so
    // nothing moved meanwhile.
    let (json, whole, paged, overlapped) =
        wait_for("the pods in their states, read alike", WAIT, || async {
            let (json, whole, paged, overlapped) = read_both(&kept).await;
            let crash_looping = json
                .iter()
                .find(|p| p.name() == "crash-loop")
                .is_some_and(|p| p.containers(false).any(|c| c.restart_count >= 3));
            let settled = phase_of(&json, "failed").as_deref() == Some("Failed")
                && phase_of(&json, "succeeded").as_deref() == Some("Succeeded")
                && phase_of(&json, "running").as_deref() == Some("Running")
                && crash_looping
                && json
                    .iter()
                    .any(|p| p.name() == "held" && p.meta().deletion_timestamp.is_some());
            if !settled {
                return Check::NotYet(format!(
                    "{:?}",
                    json.iter()
                        .map(|p| (p.name(), p.phase()))
                        .collect::<Vec<_>>()
                ));
            }
            let again = kept
                .list(&ListParams::default().labels("orb-rs.io/list=yes"))
                .await
                .unwrap()
                .items;
            if again != json {
                return Check::NotYet("a pod changed between the reads".into());
            }
            Check::Done((json, whole, paged, overlapped))
        })
        .await;
    assert_eq!(json.len(), all.len());
    assert_eq!(whole, json, "protobuf reads as JSON does");
    assert_eq!(paged, json, "page by page too");
    assert_eq!(
        overlapped, json,
        "and page by page with the next asked for while one arrives"
    );
    let failed = whole.iter().find(|p| p.name() == "failed").unwrap();
    assert!(
        failed
            .containers(false)
            .any(|c| c.state.terminated.is_some_and(|(_, code)| code == 137)),
        "the exit code is read: {failed:?}"
    );

    // The metadata of the same pods, as reconciliation LISTs it, reads as the JSON one.
    let url = <Pod as kube::Resource>::url_path(&(), Some(ns.name()));
    let params = ListParams::default().labels("orb-rs.io/list=yes");
    let page = list_metadata(&cluster.client, &url, &params).await.unwrap();
    assert_eq!(page.encoding, Encoding::Protobuf);
    let json: Vec<_> = pods
        .list_metadata(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            let mut meta = p.metadata;
            meta.managed_fields = None;
            meta
        })
        .collect();
    let mut read = page.items;
    read.sort_by(|a, b| a.name.cmp(&b.name));
    let mut json = json;
    json.sort_by(|a, b| a.name.cmp(&b.name));
    // Status updates may move resource versions between the two reads; names, labels,
    // owners, finalizers and deletion do not.
    let strip = |m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.resource_version = None
    };
    read.iter_mut().for_each(strip);
    json.iter_mut().for_each(strip);
    assert_eq!(read, json, "protobuf metadata reads as JSON metadata does");
    assert_eq!(read.len(), all.len());

    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

/// A list of a few megabytes arrives in many pieces, and pods split across pieces; read as
/// it arrives, it reads as its JSON does.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_list_read_as_it_arrives_reads_as_its_json() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("pod-list-many").await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    // Pending off the simulated nodes, so nothing changes between the reads; each with an
    // odd-sized annotation so pods end at every offset of the pieces.
    let count = 400;
    futures::future::try_join_all((0..count).map(|i| {
        let filler = "x".repeat(4_000 + 37 * i);
        let pods = pods.clone();
        async move {
            let p = pod(
                &format!("many-{i:03}"),
                json!({"orb-rs.io/filler": filler}),
                Some("does-not-exist"),
            );
            pods.create(&PostParams::default(), &p).await
        }
    }))
    .await
    .unwrap();
    let kept: Api<Kept> = Api::namespaced(cluster.client.clone(), ns.name());
    let params = ListParams::default().labels("orb-rs.io/list=yes");
    let (json, streamed) = wait_for("the pods read alike", WAIT, || async {
        let json = kept.list(&params).await.unwrap().items;
        let streamed = list_kept(&kept, &params).await.unwrap();
        assert_eq!(streamed.encoding, Encoding::Protobuf);
        let again = kept.list(&params).await.unwrap().items;
        if json.len() != count || again != json {
            return Check::NotYet(format!(
                "{} pods, or a pod changed between the reads",
                json.len()
            ));
        }
        Check::Done((json, streamed.items))
    })
    .await;
    assert_eq!(streamed.len(), count);
    assert_eq!(
        streamed, json,
        "read as it arrives, protobuf reads as JSON does"
    );
}

/// Behind a proxy that passes JSON only, the same calls fall back to JSON and read alike.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn behind_a_json_only_proxy_the_lists_read_json_alike() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("pod-list-json").await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    for (name, annotations) in [
        ("running", json!({})),
        ("crash-loop", json!({"kwok.orb-rs.io/crash-loop": "true"})),
    ] {
        pods.create(&PostParams::default(), &pod(name, annotations, None))
            .await
            .unwrap();
    }
    let proxy = kube_fixture::fault_proxy::FaultProxy::start(&cluster).await;
    proxy.set_json_only(true);
    let direct: Api<Kept> = Api::namespaced(cluster.client.clone(), ns.name());
    let proxied: Api<Kept> = Api::namespaced(proxy.client(), ns.name());
    let params = ListParams::default().labels("orb-rs.io/list=yes");
    let url = <Pod as kube::Resource>::url_path(&(), Some(ns.name()));
    wait_for(
        "both pods read alike through the JSON-only proxy",
        WAIT,
        || async {
            let json = list_kept(&proxied, &params).await.unwrap();
            let protobuf = list_kept(&direct, &params).await.unwrap();
            let json_pages = overlapped_pages(&proxied, &params.clone().limit(1))
                .await
                .unwrap();
            assert_eq!(json.encoding, Encoding::Json, "the proxy passes JSON only");
            assert!(json_pages.iter().all(|p| p.encoding == Encoding::Json));
            let json_pages: Vec<Kept> = json_pages.into_iter().flat_map(|p| p.items).collect();
            assert_eq!(protobuf.encoding, Encoding::Protobuf);
            let restarted = json
                .items
                .iter()
                .any(|p| p.containers(false).any(|c| c.restart_count >= 3));
            if json.items.len() != 2 || !restarted {
                return Check::NotYet(format!("{} pods, crash loop not yet", json.items.len()));
            }
            if json.items != protobuf.items || json_pages != json.items {
                return Check::NotYet("a pod changed between the reads".into());
            }
            let meta_json = list_metadata(&proxy.client(), &url, &params).await.unwrap();
            let meta_protobuf = list_metadata(&cluster.client, &url, &params).await.unwrap();
            assert_eq!(meta_json.encoding, Encoding::Json);
            assert_eq!(meta_protobuf.encoding, Encoding::Protobuf);
            // Resource versions may move between the two reads; nothing else does.
            let settled = |page: orb_k8s::protobuf_list::MetadataPage| {
                let mut items: Vec<_> = page
                    .items
                    .into_iter()
                    .map(|mut m| {
                        m.resource_version = None;
                        m
                    })
                    .collect();
                items.sort_by(|a, b| a.name.cmp(&b.name));
                items
            };
            assert_eq!(settled(meta_json), settled(meta_protobuf));
            Check::Done(())
        },
    )
    .await;
    let seen = proxy.requests();
    assert!(seen.iter().any(|r| r.path.contains("/pods")), "{seen:?}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_refused_protobuf_list_says_why_as_a_json_one_does() {
    let cluster = TestCluster::connect().await;
    let kept: Api<Kept> = Api::namespaced(cluster.client.clone(), "default");
    let params = ListParams::default().labels("not a selector!");
    let from_json = kept.list(&params).await.unwrap_err();
    let from_protobuf = list_kept(&kept, &params).await.unwrap_err();
    let (kube::Error::Api(a), kube::Error::Api(b)) = (&from_json, &from_protobuf) else {
        panic!("{from_json:?} / {from_protobuf:?}");
    };
    assert_eq!(
        (a.code, &a.reason, &a.message),
        (b.code, &b.reason, &b.message)
    );
    assert_eq!(b.code, 400, "{b:?}");
    let from_pages = overlapped_pages(&kept, &params.clone().limit(2))
        .await
        .unwrap_err();
    let kube::Error::Api(c) = &from_pages else {
        panic!("{from_pages:?}");
    };
    assert_eq!((c.code, &c.message), (b.code, &b.message));
}

/// The next page is asked for while the current one is still being read: with every
/// request for a next page held by a proxy, the first page has not been handed on when the
/// second is asked for. Once the hold lifts, every pod is read once, in order.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_next_page_is_asked_for_before_the_current_one_is_handed_on() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("pod-list-overlap").await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    for i in 0..5 {
        let p = pod(&format!("page-{i}"), json!({}), Some("does-not-exist"));
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let proxy = kube_fixture::fault_proxy::FaultProxy::start(&cluster).await;
    proxy.hold(kube_fixture::fault_proxy::RequestMatch::path("continue="));
    let proxied: Api<Kept> = Api::namespaced(proxy.client(), ns.name());
    let params = ListParams::default().labels("orb-rs.io/list=yes").limit(2);
    let handed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<String>>::new()));
    let reading = tokio::spawn({
        let handed = handed.clone();
        async move {
            list_kept_pages(&proxied, &params, |page| {
                let names = page.items.iter().map(|p| p.name().to_string()).collect();
                handed.lock().unwrap().push(names);
            })
            .await
        }
    });
    wait_for("the second page is asked for", WAIT, || async {
        if proxy.held() == 1 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{} requests held", proxy.held()))
        }
    })
    .await;
    assert!(
        handed.lock().unwrap().is_empty(),
        "the first page was handed on before the second was asked for"
    );
    proxy.lift_hold();
    reading.await.unwrap().unwrap();
    let handed = handed.lock().unwrap().clone();
    assert_eq!(
        handed,
        [
            vec!["page-0", "page-1"],
            vec!["page-2", "page-3"],
            vec!["page-4"]
        ]
    );
}
