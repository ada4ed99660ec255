//! The Server-Sent Events stream of one request and the `/metrics` exposition.

mod serve_support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use http_body_util::BodyExt;
use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use serve_support::{DONE, Env, RUNNING, sse_events as events};

async fn open_stream(env: &Env, id: &str) -> axum::response::Response {
    env.call(
        HttpRequest::get(format!("/api/v1/requests/{id}/events"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_finished_request_streams_one_status_event_and_ends() {
    let env = Env::new().await;
    env.seed().await;
    let response = open_stream(&env, DONE).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
        .await
        .expect("the stream ends after a terminal status")
        .unwrap()
        .to_bytes();
    let got = events(&String::from_utf8_lossy(&body));
    assert_eq!(got.len(), 1, "{got:?}");
    let (name, id, data) = &got[0];
    assert_eq!(name, "status");
    assert_eq!(id, "1");
    assert_eq!(data["request"]["request_id"], DONE);
    assert_eq!(data["request"]["status"], "complete");
    assert_eq!(data["machines"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn each_change_is_one_event_and_the_stream_ends_when_the_request_does() {
    let env = Env::new().await;
    let _creator = env.seed_running().await;
    let response = open_stream(&env, RUNNING).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut text = String::new();
    // The current state comes first.
    while !text.contains("\n\n") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a first event")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    let first = events(&text);
    assert_eq!(first.len(), 1, "{text}");
    assert_eq!(first[0].2["request"]["status"], "in_progress");

    // Let several polls pass unchanged: they must not produce events.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another process fails the request.
    let id = RequestId::parse(RUNNING).unwrap();
    let mut request = env.store.get_request(&id).await.unwrap().unwrap();
    lifecycle::apply(
        &mut request,
        LifecycleEvent::Fail {
            reason: "node pool deleted".into(),
        },
        jiff::Timestamp::now(),
    )
    .unwrap();
    env.store
        .update_request(&mut request, &mut [])
        .await
        .unwrap();

    let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("the stream ends after the terminal event")
        .unwrap()
        .to_bytes();
    text.push_str(&String::from_utf8_lossy(&rest));
    let all = events(&text);
    let statuses: Vec<&str> = all
        .iter()
        .map(|(_, _, d)| d["request"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["in_progress", "failed"], "{text}");
    assert_eq!(all[1].1, "2");
    assert_eq!(all[1].2["request"]["status_message"], "node pool deleted");
}

#[tokio::test]
async fn metrics_are_openmetrics_with_every_documented_family() {
    let env = Env::new().await;
    env.seed().await;
    // One refused acquire (count 0), one refused for want of a provider, one release.
    env.post(
        "/api/v1/machines/request",
        r#"{"template_id": "worker", "count": 0}"#,
    )
    .await;
    env.post(
        "/api/v1/machines/request",
        r#"{"template_id": "gpu", "count": 1}"#,
    )
    .await;
    env.post(
        "/api/v1/machines/return",
        r#"{"machine_ids": ["orb-111111111111-0001"]}"#,
    )
    .await;
    env.get("/api/v1/templates").await;
    env.get(&format!("/api/v1/requests/{DONE}")).await;

    let response = env
        .call(HttpRequest::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    for line in [
        "orb_acquire_total{handler=\"pod\",outcome=\"rejected\"} 1",
        "orb_acquire_total{handler=\"job\",outcome=\"error\"} 1",
        "orb_acquire_duration_seconds_count{handler=\"pod\",outcome=\"rejected\"} 1",
        "orb_release_total{handler=\"pod\",outcome=\"accepted\"} 1",
        "orb_release_duration_seconds_count{handler=\"pod\",outcome=\"accepted\"} 1",
        // DONE is complete and the return just made completed too.
        "orb_requests{status=\"complete\"} 2",
        "orb_requests{status=\"failed\"} 1",
        "orb_requests{status=\"in_progress\"} 1",
        "orb_requests{status=\"cancelled\"} 0",
        "orb_http_requests_total{method=\"GET\",route=\"/api/v1/templates\",code=\"200\"} 1",
        "orb_http_requests_total{method=\"GET\",route=\"/api/v1/requests/{request_id}\",code=\"200\"} 1",
        "orb_http_requests_total{method=\"POST\",route=\"/api/v1/machines/request\",code=\"422\"} 1",
        "orb_http_requests_total{method=\"POST\",route=\"/api/v1/machines/request\",code=\"503\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    for family in [
        "# TYPE orb_http_request_duration_seconds histogram",
        "# TYPE orb_acquire_duration_seconds histogram",
        "# TYPE orb_release_duration_seconds histogram",
        "# TYPE orb_requests gauge",
    ] {
        assert!(text.contains(family), "missing {family:?}");
    }
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
}

#[tokio::test]
async fn a_store_failure_mid_stream_ends_it_with_an_error_event() {
    let env = Env::new().await;
    let _creator = env.seed_running().await;
    let response = open_stream(&env, RUNNING).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut text = String::new();
    while !text.contains("\n\n") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a first event")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    env.store.close().await;
    let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .expect("the stream ends after the error event")
        .unwrap()
        .to_bytes();
    text.push_str(&String::from_utf8_lossy(&rest));
    let all = events(&text);
    assert_eq!(all.len(), 2, "{text}");
    assert_eq!(all[0].0, "status");
    let (name, _, problem) = &all[1];
    assert_eq!(name, "error", "{text}");
    assert_eq!(
        problem["type"], "urn:orb:problem:store-unavailable",
        "{text}"
    );
    assert_eq!(problem["status"], 503);
}
