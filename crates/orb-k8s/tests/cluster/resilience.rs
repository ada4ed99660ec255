//! The retry layer and the circuit breakers against the real local control plane, through
//! kube-fixture's fault-injecting proxy: acquires of every handler under mixed faults end
//! (fulfilled or with an explicit error) without duplicate pods; throttling, server errors
//! and resets are retried, client errors are not; an open breaker stops calls until its
//! half-open probe succeeds.
//!
//! Run: `cargo test -p orb-k8s --test cluster -- --include-ignored resilience::`.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_fixture::fault_proxy::{Fault, FaultPlan, FaultProxy, RequestMatch};
use kube_fixture::{Check, TestCluster, wait_for};
use orb_core::ids::RequestId;
use orb_core::provider::{AcquireInput, Provider, ProviderError};
use orb_core::template::ProviderApi;
use orb_core::test_support::status_machines;
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, FileLayer};
use orb_k8s::metrics::{HandlerLabels, RetryLabels};
use orb_k8s::resilience::BreakerState;
use serde_json::{Value, json};

/// A harness whose provider talks to the apiserver only through `proxy`, with orb's retry
/// layer and breakers set by `settings`.
pub(crate) async fn harness_through(prefix: &str, settings: Value) -> (Harness, FaultProxy) {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    // Admin: the retry tests send ConfigMaps, a kind outside orb's Role, through the provider.
    let proxy = FaultProxy::start(&cluster).await;
    let mut block = serde_json::Map::new();
    block.insert("namespace".into(), json!(ns.name()));
    if let Value::Object(extra) = settings {
        block.extend(extra);
    }
    let resolved = ConfigLayers::new(
        Some(FileLayer {
            path: "test-config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    )
    .resolve(None)
    .expect("test provider config is valid");
    let provider = K8sProvider::with_kube_config(proxy.kube_config(), resolved, "default")
        .expect("provider through the fault proxy");
    (
        Harness {
            cluster,
            ns,
            provider,
        },
        proxy,
    )
}

fn retries(h: &Harness, cause: &'static str) -> u64 {
    h.provider
        .metrics()
        .api_retries
        .get_or_create(&RetryLabels { cause })
        .get()
}

fn breaker(h: &Harness, handler: &str) -> BreakerState {
    h.provider
        .circuit_states()
        .into_iter()
        .find(|(name, _)| *name == handler)
        .map(|(_, state)| state)
        .unwrap()
}

/// Acquires `count` machines of `api`; on success waits for the request to be fulfilled
/// through the faulty proxy and checks the cluster (directly) holds exactly `count` pods
/// of the request. Returns the error text when the acquire failed.
async fn acquire_to_the_end(h: &Harness, api: ProviderApi, count: u32) -> Result<(), String> {
    let mut t = template(&format!("t-{}", api.as_str().to_lowercase()), Some(api));
    if api == ProviderApi::Job {
        // Long enough that the Job's pods are still there to be counted when it completes.
        t.command = Some(vec!["sh".into(), "-c".into(), "echo done".into()]);
    }
    let request_id = RequestId::new_acquire();
    let outcome = h
        .provider
        .acquire(AcquireInput {
            request_id: request_id.clone(),
            template: t.clone(),
            count,
        })
        .await
        .map_err(|e| e.to_string())?;
    wait_verdict(
        h,
        &status_input(&request_id, &t, count, &outcome),
        "fulfilled",
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let selector = format!("orb.io/request-id={request_id}");
    wait_for(
        &format!("exactly {count} {} pods of {request_id}", api.as_str()),
        WAIT,
        || async {
            let listed = pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .map(|l| l.items.len());
            match listed {
                Ok(n) if n == count as usize => Check::Done(()),
                Ok(n) if n > count as usize => panic!(
                    "{n} pods carry the label of {request_id} ({}), {count} were requested: a retried create made duplicates",
                    api.as_str()
                ),
                other => Check::NotYet(format!("{other:?}")),
            }
        },
    )
    .await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn acquires_of_every_handler_end_cleanly_under_twenty_percent_faults_and_latency() {
    let (h, proxy) = harness_through(
        "chaos",
        json!({"max_retries": 5, "retry_base_delay": 0.05, "retry_max_delay": 0.5}),
    )
    .await;
    // Every kind of fault at least once, and lost answers on pod creates (the call took
    // effect, the client saw a reset): a retried create must adopt, not duplicate.
    proxy.script(
        RequestMatch {
            path_contains: Some("/pods".into()),
            methods: vec![http::Method::POST],
        },
        [
            Fault::LostAnswer,
            Fault::Throttle,
            Fault::LostAnswer,
            Fault::ServerError,
            Fault::Reset,
        ],
    );
    proxy.set_plan(FaultPlan {
        throttle_rate: 0.05,
        server_error_rate: 0.05,
        reset_rate: 0.05,
        lost_answer_rate: 0.05,
        latency_rate: 0.3,
        latency: Duration::from_millis(200),
        only: RequestMatch::default(),
    });
    let (pod, deployment, statefulset, job) = tokio::join!(
        acquire_to_the_end(&h, ProviderApi::Pod, 5),
        acquire_to_the_end(&h, ProviderApi::Deployment, 5),
        acquire_to_the_end(&h, ProviderApi::StatefulSet, 5),
        acquire_to_the_end(&h, ProviderApi::Job, 5),
    );
    for (api, result) in [
        ("Pod", pod),
        ("Deployment", deployment),
        ("StatefulSet", statefulset),
        ("Job", job),
    ] {
        // An explicit error is an acceptable end; it must say what failed.
        if let Err(text) = result {
            assert!(
                text.contains("failed") || text.contains("circuit breaker"),
                "{api}: the error must say what failed: {text}"
            );
            eprintln!("{api} acquire ended with an error (allowed): {text}");
        }
    }
    let counts = proxy.counts();
    assert!(
        counts.lost_answers >= 2
            && counts.throttled >= 1
            && counts.server_errors >= 1
            && counts.resets >= 1,
        "the proxy must have injected every fault: {counts:?}"
    );
    assert!(
        retries(&h, "throttled") >= 1
            && retries(&h, "server_error") >= 1
            && retries(&h, "transport") >= 3,
        "faults were retried: {counts:?}"
    );
    let retried = retries(&h, "throttled") + retries(&h, "server_error") + retries(&h, "transport");
    eprintln!("faults: {counts:?}; retries: {retried}");
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn throttling_server_errors_and_resets_are_retried_and_retry_after_is_honoured() {
    let (h, proxy) = harness_through(
        "retry",
        json!({"max_retries": 3, "retry_base_delay": 0.05, "retry_max_delay": 5.0}),
    )
    .await;
    let client = h.provider.kube_client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client, h.ns.name());
    let only = RequestMatch::path("/configmaps");
    proxy.script(
        only.clone(),
        [Fault::Throttle, Fault::ServerError, Fault::Reset],
    );
    let started = Instant::now();
    maps.create(&PostParams::default(), &config_map("retried"))
        .await
        .expect("the fourth attempt reaches the apiserver");
    let elapsed = started.elapsed();
    let seen = proxy.requests_matching(&only);
    let faults: Vec<_> = seen.iter().map(|r| r.fault).collect();
    assert_eq!(
        faults,
        vec![
            Some(Fault::Throttle),
            Some(Fault::ServerError),
            Some(Fault::Reset),
            None
        ]
    );
    assert_eq!(seen[3].upstream_status, Some(201));
    // Retry-After: 1 on the 429, then 0.1 s and 0.2 s of backoff.
    assert!(
        elapsed >= Duration::from_millis(1300),
        "the 429's Retry-After (1 s) must be waited for: {elapsed:?}"
    );
    assert_eq!(
        (
            retries(&h, "throttled"),
            retries(&h, "server_error"),
            retries(&h, "transport")
        ),
        (1, 1, 1)
    );

    // At most max_retries: a fifth attempt is never made and the 500 comes back.
    proxy.script(only.clone(), [Fault::ServerError; 4]);
    let before = proxy.requests_matching(&only).len();
    let err = maps
        .create(&PostParams::default(), &config_map("never"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err}"
    );
    assert_eq!(proxy.requests_matching(&only).len() - before, 4);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn client_errors_are_answers_and_are_not_retried() {
    let (h, proxy) = harness_through(
        "noretry",
        json!({"max_retries": 3, "retry_base_delay": 0.05}),
    )
    .await;
    let client = h.provider.kube_client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), h.ns.name());
    let only = RequestMatch::path("/configmaps");
    let count = || proxy.requests_matching(&only).len();

    let before = count();
    let err = maps.get("missing").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err}"
    );
    assert_eq!(count() - before, 1, "404 sent once");

    maps.create(&PostParams::default(), &config_map("taken"))
        .await
        .unwrap();
    let before = count();
    let err = maps
        .create(&PostParams::default(), &config_map("taken"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err}"
    );
    assert_eq!(count() - before, 1, "409 sent once");

    let before = count();
    let err = maps
        .create(&PostParams::default(), &config_map("Not_A_Valid_Name"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err}"
    );
    assert_eq!(count() - before, 1, "422 sent once");

    assert_eq!(
        retries(&h, "throttled") + retries(&h, "server_error") + retries(&h, "transport"),
        0
    );
    assert_eq!(breaker(&h, "pod"), BreakerState::Closed);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn watch_requests_pass_through_the_retry_layer_untouched() {
    let (h, proxy) = harness_through(
        "watchpass",
        json!({"max_retries": 3, "retry_base_delay": 0.05}),
    )
    .await;
    let client = h.provider.kube_client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client, h.ns.name());
    let watches = RequestMatch::path("watch=true");
    proxy.script(watches.clone(), [Fault::ServerError, Fault::ServerError]);
    let err = maps
        .watch(&kube::api::WatchParams::default().timeout(5), "0")
        .await
        .err()
        .expect("the injected 500 comes back to the watch caller");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err}"
    );
    assert_eq!(proxy.requests_matching(&watches).len(), 1, "sent once");
    assert_eq!(retries(&h, "server_error"), 0);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_pod_breaker_opens_fails_fast_and_closes_after_a_good_probe() {
    let (h, proxy) = harness_through(
        "breaker",
        json!({
            "max_retries": 1,
            "retry_base_delay": 0.01,
            "circuit_breaker_failure_threshold": 3,
            "circuit_breaker_reset_timeout": 1,
        }),
    )
    .await;
    let pods_only = RequestMatch::path("/pods");
    proxy.set_plan(FaultPlan {
        server_error_rate: 1.0,
        only: pods_only.clone(),
        ..FaultPlan::default()
    });
    let t = template("bare", None);
    let acquire_once = || {
        h.provider.acquire(AcquireInput {
            request_id: RequestId::new_acquire(),
            template: t.clone(),
            count: 1,
        })
    };
    for attempt in 1..=3 {
        let err = acquire_once().await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Interrupted(text) if text.contains("500")),
            "attempt {attempt}: {err}"
        );
    }
    assert_eq!(breaker(&h, "pod"), BreakerState::Open);
    let gauge = h
        .provider
        .metrics()
        .circuit_state
        .get_or_create(&HandlerLabels { handler: "pod" })
        .get();
    assert_eq!(gauge, 1);
    assert_eq!(breaker(&h, "deployment"), BreakerState::Closed);

    // Open: the call fails at once and never reaches the apiserver.
    let seen = proxy.requests_matching(&pods_only).len();
    let err = acquire_once().await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ProviderError::Interrupted(_)), "{text}");
    assert!(
        text.contains("the Kubernetes API has failed 3 times in a row for pod calls")
            && text.contains("(circuit breaker open); check the apiserver"),
        "{text}"
    );
    assert_eq!(proxy.requests_matching(&pods_only).len(), seen);

    // The apiserver recovers; after the reset timeout one probe goes through and closes it.
    proxy.set_plan(FaultPlan::default());
    wait_for("the pod breaker to turn half-open", WAIT, || async {
        match breaker(&h, "pod") {
            BreakerState::HalfOpen => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    acquire_once().await.expect("the half-open probe succeeds");
    assert_eq!(proxy.requests_matching(&pods_only).len(), seen + 1);
    assert_eq!(breaker(&h, "pod"), BreakerState::Closed);
}

/// A return spanning two acquires while the apiserver does not answer is reported cut off as
/// a whole (`Interrupted`), not as per-machine failures of one request, so the broker keeps
/// the return and runs it again; once the cluster answers, the repeat releases both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_release_of_two_requests_cut_off_by_a_blackout_is_interrupted_then_repeats_cleanly() {
    let (h, proxy) = harness_through(
        "cutoff",
        json!({"max_retries": 1, "retry_base_delay": 0.05, "retry_max_delay": 0.1}),
    )
    .await;
    let t = template("w", Some(ProviderApi::Pod));
    let (a, out_a) = acquire(&h, &t, 1).await;
    let (b, out_b) = acquire(&h, &t, 1).await;
    let input = orb_core::provider::ReleaseInput {
        return_request_id: RequestId::new_return(),
        machines: vec![
            machine_ref(&a, &out_a.resource_ids[0], &out_a, "Pod"),
            machine_ref(&b, &out_b.resource_ids[0], &out_b, "Pod"),
        ],
        templates: Default::default(),
        others: Default::default(),
    };
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    let cut = h.provider.release(input.clone()).await;
    assert!(
        matches!(cut, Err(ProviderError::Interrupted(_))),
        "cut off as a whole: {cut:?}"
    );
    proxy.set_plan(FaultPlan::default());
    // The breaker the blackout opened must let the repeat through once it probes again.
    let done = wait_for("the repeated release", Duration::from_secs(90), || {
        let input = input.clone();
        let h = &h;
        async move {
            match h.provider.release(input).await {
                Ok(outcome) if outcome.failed.is_empty() => Check::Done(outcome),
                other => Check::NotYet(format!("{other:?}")),
            }
        }
    })
    .await;
    let mut released = done.released.clone();
    released.sort();
    let mut want = vec![out_a.resource_ids[0].clone(), out_b.resource_ids[0].clone()];
    want.sort();
    assert_eq!(released, want);
    for id in [&a, &b] {
        wait_live_pods(&h, id, &[]).await;
    }
}

/// Status reads of an acquire and of a return while the apiserver answers nothing: neither
/// is an error nor a verdict, both stay in progress and say in plain words that the cluster
/// did not answer (the same words whichever transport error lies beneath).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn status_reads_in_a_blackout_stay_in_progress_and_say_the_cluster_did_not_answer() {
    let (h, proxy) = harness_through(
        "unread",
        json!({"max_retries": 1, "retry_base_delay": 0.05, "retry_max_delay": 0.1}),
    )
    .await;
    let t = template("w", Some(ProviderApi::Pod));
    let (id, outcome) = acquire(&h, &t, 1).await;
    let acquire_input = status_input(&id, &t, 1, &outcome);
    let mut return_input = acquire_input.clone();
    return_input.request_id = RequestId::new_return();
    return_input.request_type = orb_core::request::RequestType::Return;
    return_input.machines =
        status_machines([machine_ref(&id, &outcome.resource_ids[0], &outcome, "Pod")]);
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    for (what, input) in [("acquire", acquire_input), ("return", return_input)] {
        let report = h
            .provider
            .status(input)
            .await
            .unwrap_or_else(|e| panic!("{what}: a blackout is not an error: {e}"));
        assert!(
            matches!(report.verdict, orb_core::lifecycle::Verdict::InProgress),
            "{what}: {:?}",
            report.verdict
        );
        let message = report.message.unwrap_or_default();
        assert!(
            message.contains("the cluster did not answer") && message.contains("asks again"),
            "{what}: {message}"
        );
    }
    proxy.set_plan(FaultPlan::default());
}
