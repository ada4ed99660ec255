//! A paginated LIST of pods as the watch cache reads it (`protobuf_list::list_kept_pages`:
//! each next page asked for as soon as the current one's metadata is in) next to the same
//! pages asked for one after the other (`list_kept` in a loop: the bare paginated LIST), on
//! the local control plane: straight to the apiserver, and through a proxy in the bench's
//! process (kube-fixture's fault proxy: one more hop, as a client outside the cluster has)
//! with no added latency and with a random delay per request (a slower network).
//!
//! The pods are Pending and left to a scheduler that does not exist (`schedulerName`), so
//! kube-scheduler queues none of them (pods it must retry or hold behind a gate cost it up to
//! a core at 50,000, taken from the apiserver on a small machine) and nothing changes between
//! the rounds; each round reads every pod once both ways, in alternating order. Prints a
//! table and one `BENCH_JSON {...}` line; deletes its namespace at the end.
//!
//!   KUBECONFIG=.state/control-plane/admin.kubeconfig cargo bench -p orb-k8s --bench list_pages
//!
//! Environment: BENCH_LIST_PODS (5000), BENCH_LIST_PAGE (500, the cache's page),
//! BENCH_LIST_ROUNDS (7), BENCH_LIST_DELAYS_MS (0,2,10: the mean delay a proxied request gets;
//! each gets a random delay up to twice that).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_fixture::TestCluster;
use kube_fixture::fault_proxy::{FaultPlan, FaultProxy};
use orb_k8s::kept::Kept;
use orb_k8s::protobuf_list::{Encoding, list_kept, list_kept_pages};
use serde_json::json;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

const SELECTOR: &str = "orb-rs.io/bench-list=yes";

/// Every selected pod, one page after the other; gives the time and checks the count.
async fn one_after_the_other(api: &Api<Kept>, params: &ListParams, pods: usize) -> Duration {
    let t0 = Instant::now();
    let mut params = params.clone();
    let mut seen = 0;
    loop {
        let page = list_kept(api, &params).await.expect("listing pods");
        assert_eq!(page.encoding, Encoding::Protobuf);
        seen += page.items.len();
        match page.continue_token {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(seen, pods, "the LIST read {seen} of {pods} pods");
    t0.elapsed()
}

/// Every selected pod, each next page asked for while the current one arrives.
async fn overlapped(api: &Api<Kept>, params: &ListParams, pods: usize) -> Duration {
    let t0 = Instant::now();
    let mut seen = 0;
    list_kept_pages(api, params, |page| {
        assert_eq!(page.encoding, Encoding::Protobuf);
        seen += page.items.len();
    })
    .await
    .expect("listing pods");
    assert_eq!(seen, pods, "the LIST read {seen} of {pods} pods");
    t0.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo test --all-targets` also runs bench binaries; only `cargo bench` (which passes
    // --bench) should create thousands of pods.
    if !std::env::args().any(|a| a == "--bench") {
        println!("list_pages: run with `cargo bench -p orb-k8s --bench list_pages`");
        return;
    }
    let pods = env_num("BENCH_LIST_PODS", 5000).max(1);
    let page = env_num("BENCH_LIST_PAGE", 500).max(1);
    let rounds = env_num("BENCH_LIST_ROUNDS", 7).max(1);
    let delays: Vec<u64> = std::env::var("BENCH_LIST_DELAYS_MS")
        .unwrap_or_else(|_| "0,2,10".into())
        .split(',')
        .map(|d| {
            d.trim()
                .parse()
                .unwrap_or_else(|_| panic!("BENCH_LIST_DELAYS_MS: {d:?} is not a number"))
        })
        .collect();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("bench-list").await;
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let created = Instant::now();
    let indices: Vec<usize> = (0..pods).collect();
    for chunk in indices.chunks(50) {
        futures::future::try_join_all(chunk.iter().map(|i| {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("list-{i:05}"),
                    "labels": {"orb-rs.io/bench-list": "yes", "orb.io/managed": "true",
                        "orb.io/request-id": format!("req-{}", i / 50)}},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                    "schedulerName": "orb-rs-bench-nobody",
                    "terminationGracePeriodSeconds": 0},
            }))
            .unwrap();
            let api = api.clone();
            async move { api.create(&PostParams::default(), &pod).await }
        }))
        .await
        .expect("creating the bench's pods");
    }
    eprintln!(
        "list_pages: {pods} pods created in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let params = ListParams::default().labels(SELECTOR).limit(page as u32);

    // Straight to the apiserver, then through the proxy with each delay.
    let mut rows = Vec::new();
    let mut ways: Vec<(String, Option<u64>)> = vec![("straight to the apiserver".into(), None)];
    ways.extend(delays.iter().map(|d| {
        (
            format!("through a proxy, {d} ms mean delay a request"),
            Some(*d),
        )
    }));
    for (label, delay) in ways {
        let proxy = match delay {
            None => None,
            Some(mean) => {
                let proxy = FaultProxy::start(&cluster).await;
                proxy.set_plan(FaultPlan {
                    latency_rate: if mean > 0 { 1.0 } else { 0.0 },
                    latency: Duration::from_millis(2 * mean),
                    ..FaultPlan::default()
                });
                Some(proxy)
            }
        };
        let client = proxy
            .as_ref()
            .map_or_else(|| cluster.client.clone(), FaultProxy::client);
        let kept: Api<Kept> = Api::namespaced(client, ns.name());
        // A warm-up read both ways (connections, the apiserver's cache).
        one_after_the_other(&kept, &params, pods).await;
        overlapped(&kept, &params, pods).await;
        let (mut seq, mut ovl) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                seq.push(
                    one_after_the_other(&kept, &params, pods)
                        .await
                        .as_secs_f64(),
                );
                ovl.push(overlapped(&kept, &params, pods).await.as_secs_f64());
            } else {
                ovl.push(overlapped(&kept, &params, pods).await.as_secs_f64());
                seq.push(
                    one_after_the_other(&kept, &params, pods)
                        .await
                        .as_secs_f64(),
                );
            }
        }
        let (s, o) = (median(seq.clone()), median(ovl.clone()));
        rows.push(json!({
            "way": label,
            "mean_delay_ms": delay,
            "one_after_the_other_s": s,
            "overlapped_s": o,
            "overlapped_over_one_after_the_other": o / s,
            "one_after_the_other_rounds_s": seq,
            "overlapped_rounds_s": ovl,
        }));
    }
    println!(
        "paginated LIST of {pods} pods, {page} a page, median of {rounds} rounds (protobuf, read into what the cache keeps)"
    );
    println!("| way | one page after the other | next page asked for while one arrives | ratio |");
    println!("|---|---:|---:|---:|");
    for row in &rows {
        println!(
            "| {} | {:.3} s | {:.3} s | {:.2} |",
            row["way"].as_str().unwrap(),
            row["one_after_the_other_s"].as_f64().unwrap(),
            row["overlapped_s"].as_f64().unwrap(),
            row["overlapped_over_one_after_the_other"].as_f64().unwrap(),
        );
    }
    println!(
        "BENCH_JSON {}",
        json!({"pods": pods, "page": page, "rounds": rounds, "ways": rows})
    );
}
