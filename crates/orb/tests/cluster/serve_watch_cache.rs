//! The real `orb serve` on the local control plane answers status reads from its watch
//! cache, and shows it: `/readyz` has the `watch_cache` check and `/metrics` the provider's
//! `orb_k8s_*` series (cache size, watch events, where status reads came from, pod
//! creations).

use std::time::Duration;

use crate::support::serve_process::{ServedNamespace, Server};
use kube_fixture::{Check, wait_for};
use serde_json::{Value, json};

/// The value of the first sample line of `/metrics` that starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn metrics(server: &Server) -> String {
    match server.call("GET", "/metrics", None) {
        (200, Value::String(text)) => text,
        other => panic!("GET /metrics: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn status_comes_from_the_watch_cache_and_the_metrics_say_so() {
    let served = ServedNamespace::start("serve-cache", json!({})).await;
    let server = &served.server;
    // Pods that exist when the cache's first LIST runs arrive in that LIST, not as watch
    // events; the cache must serve before the request so all three are watch events.
    wait_for(
        "the watch cache to serve",
        Duration::from_secs(30),
        || async {
            match sample(&metrics(server), "orb_k8s_cache_serving ") {
                Some(1.0) => Check::Done(()),
                other => Check::NotYet(format!("orb_k8s_cache_serving {other:?}")),
            }
        },
    )
    .await;

    server.acquire_workers(3).await;

    // The cache holds exactly this namespace's three managed pods.
    let text = wait_for(
        "the cache to hold the 3 pods",
        Duration::from_secs(30),
        || async {
            let text = metrics(server);
            match sample(&text, "orb_k8s_cache_pods ") {
                Some(3.0) => Check::Done(text),
                other => Check::NotYet(format!("orb_k8s_cache_pods {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(sample(&text, "orb_k8s_cache_serving "), Some(1.0), "{text}");
    assert!(
        sample(&text, "orb_k8s_watch_events_total{event=\"added\"}").unwrap_or(0.0) >= 3.0,
        "{text}"
    );
    assert!(
        sample(&text, "orb_k8s_status_reads_total{reason=\"cache\"}").unwrap_or(0.0) >= 1.0,
        "no status read was answered from the cache: {text}"
    );
    assert_eq!(
        sample(&text, "orb_k8s_pod_creations_total{outcome=\"success\"}"),
        Some(3.0),
        "{text}"
    );

    let (code, ready) = server.call("GET", "/readyz", None);
    assert_eq!(code, 200, "{ready}");
    let cache = &ready["checks"]["watch_cache"];
    assert_eq!(cache["status"], "ok", "{ready}");
    assert!(
        cache["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("served from the watch cache (3 pods)"),
        "{ready}"
    );
    served.server.stop();
}

/// `watch_enabled=false`: no watch cache runs, every status read LISTs, and `/readyz`
/// says so; requests still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn watch_enabled_false_runs_no_cache_and_status_still_works() {
    let served = ServedNamespace::start("serve-nowatch", json!({"watch_enabled": false})).await;
    let server = &served.server;
    server.acquire_workers(2).await;
    let text = metrics(server);
    assert_eq!(sample(&text, "orb_k8s_cache_serving "), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, "orb_k8s_status_reads_total{reason=\"cache\"}"),
        None,
        "no read may come from a cache that does not run: {text}"
    );
    let (_, ready) = server.call("GET", "/readyz", None);
    let detail = ready["checks"]["watch_cache"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(detail.starts_with("off (watch_enabled=false)"), "{ready}");
    served.server.stop();
}
