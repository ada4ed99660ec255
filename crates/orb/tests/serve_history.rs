//! What happened to requests, from the store's history: `…/{id}/timeline` and the
//! broker-wide `GET /api/v1/events/` feed (replay by number, by time and by type, a live
//! feed that starts at the next change, `Last-Event-ID`), and the refusals of bad queries.
//! Through the router on a real SQLite store.

mod serve_support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use http_body_util::BodyExt;
use orb_core::ids::RequestId;
use orb_core::request::RequestStatus;
use serde_json::Value;
use serve_support::{DONE, Env, FAILED, NOBODY, STUCK, assert_problem, sse_events as frames};

/// The whole body of a feed that ends (it is given a `timeout`).
async fn feed(env: &Env, uri: &str, last_event_id: Option<&str>) -> Vec<(String, String, Value)> {
    let mut request = HttpRequest::get(uri);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = env.call(request.body(Body::empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    frames(&String::from_utf8_lossy(&bytes))
}

/// Moves a stored request to `status` (a transition, as the lifecycle stores one).
async fn move_to(env: &Env, id: &str, status: RequestStatus) {
    let id = RequestId::parse(id).unwrap();
    let mut request = env.store.get_request(&id).await.unwrap().unwrap();
    request.status = status;
    request.status_message = Some(format!("moved to {status}"));
    request.last_transition_at = jiff::Timestamp::now();
    env.store
        .update_request(&mut request, &mut [])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_timeline_lists_each_status_change_with_its_time_oldest_first() {
    let env = Env::new().await;
    env.seed().await;
    move_to(&env, STUCK, RequestStatus::Acquiring).await;
    move_to(&env, STUCK, RequestStatus::Cancelled).await;
    let (code, body) = env.get(&format!("/api/v1/requests/{STUCK}/timeline")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["request_id"], STUCK);
    assert_eq!(body["status"], "cancelled");
    assert_eq!(body["is_terminal"], true);
    assert_eq!(body["count"], 3);
    let steps: Vec<(&str, &str, Value)> = body["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
                e["previous_status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("request.created", "in_progress", Value::Null),
            ("request.status_changed", "acquiring", "in_progress".into()),
            ("request.status_changed", "cancelled", "acquiring".into()),
        ]
    );
    assert_eq!(body["timeline"][2]["message"], "moved to cancelled");
    assert!(
        body["timeline"][0]["at"].as_str().unwrap().ends_with('Z'),
        "{body}"
    );

    let (code, body) = env
        .get(&format!("/api/v1/requests/{NOBODY}/timeline"))
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
    let bad = env.get("/api/v1/requests/bad%20id/timeline").await;
    assert_problem(&bad, 400, "malformed-request-id", "bad id");
}

#[tokio::test]
async fn the_feed_replays_by_number_time_and_type_and_resumes_after_last_event_id() {
    let env = Env::new().await;
    env.seed().await;
    let cut = jiff::Timestamp::now();
    move_to(&env, STUCK, RequestStatus::Cancelled).await;
    let all = feed(&env, "/api/v1/events/?since_seq=0&timeout=1", None).await;
    let seen: Vec<(&str, &str)> = all
        .iter()
        .map(|(name, _, data)| (name.as_str(), data["request_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("request.created", DONE),
            ("request.created", FAILED),
            ("request.created", STUCK),
            ("request.status_changed", STUCK),
        ]
    );
    let ids: Vec<i64> = all.iter().map(|(_, id, _)| id.parse().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(
        all.iter()
            .all(|(_, id, data)| data["seq"].as_i64().map(|n| n.to_string()).as_ref() == Some(id)),
        "each frame's id is its event number"
    );
    // After an event number, as a reconnect with Last-Event-ID asks, and the slash-less path.
    let after = feed(&env, "/api/v1/events?timeout=1", Some(&ids[1].to_string())).await;
    let after_ids: Vec<&str> = after.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(after_ids, [ids[2].to_string(), ids[3].to_string()]);
    // One type only.
    let changes = feed(
        &env,
        "/api/v1/events/?since_seq=0&type=request.status_changed&timeout=1",
        None,
    )
    .await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].2["status"], "cancelled");
    assert_eq!(changes[0].2["previous_status"], "in_progress");
    // From a time: nothing that happened before it.
    let recent = feed(
        &env,
        &format!("/api/v1/events/?since={cut}&timeout=1"),
        None,
    )
    .await;
    assert_eq!(recent.len(), 1, "{recent:?}");
}

#[tokio::test]
async fn a_live_feed_starts_at_the_next_change() {
    let env = Env::new().await;
    env.seed().await;
    let app = env.app.clone();
    let reader = tokio::spawn(async move {
        use tower::ServiceExt;
        let response = app
            .oneshot(
                HttpRequest::get("/api/v1/events/?timeout=2")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    });
    // The feed has read the newest number before this change lands.
    tokio::time::sleep(Duration::from_millis(500)).await;
    move_to(&env, STUCK, RequestStatus::Failed).await;
    let live = frames(&reader.await.unwrap());
    assert_eq!(
        live.len(),
        1,
        "only what happened after it started: {live:?}"
    );
    assert_eq!(live[0].0, "request.status_changed");
    assert_eq!(live[0].2["request_id"], STUCK);
    assert_eq!(live[0].2["status"], "failed");
}

#[tokio::test]
async fn bad_feed_queries_are_refused_with_the_fix() {
    let env = Env::new().await;
    let cases = [
        (
            "/api/v1/events/?since=yesterday",
            "invalid-since",
            "RFC 3339",
        ),
        (
            "/api/v1/events/?type=request.deleted",
            "invalid-type",
            "request.status_changed",
        ),
        (
            "/api/v1/events/?since_seq=-4",
            "invalid-since-seq",
            "negative",
        ),
        ("/api/v1/events/?timeout=0", "invalid-timeout", "1 to 86400"),
        ("/api/v1/events/?follow=1", "invalid-query", "follow"),
    ];
    for (uri, slug, needle) in cases {
        let got = env.get(uri).await;
        assert_problem(&got, 400, slug, needle);
    }
    let response = env
        .call(
            HttpRequest::get("/api/v1/events/")
                .header("last-event-id", "abc")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let got = serve_support::split(response).await;
    assert_problem(&got, 400, "invalid-last-event-id", "Last-Event-ID");
}
