//! The reference broker's REST shapes that `orb serve` answers beside its own routes (the
//! trailing-slash collections with envelopes and paging, batch status, cancel by DELETE,
//! `/info`, `/openapi.json`), and the error envelope and request id every reply carries.
//! Through the router on a real SQLite store; the provider cannot be built, as in serve.rs.

mod serve_support;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use serde_json::{Value, json};
use serve_support::{DONE, Env, FAILED, NOBODY, assert_problem, split};

fn ids(list: &Value, key: &str, field: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not a list: {list}"))
        .iter()
        .map(|t| t[field].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn templates_come_in_the_reference_envelope_a_page_at_a_time() {
    let env = Env::new().await;
    env.seed().await;
    let (code, body) = env.get("/api/v1/templates/").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        ids(&body, "templates", "template_id"),
        ["worker", "gpu", "broken"]
    );
    assert_eq!(body["total_count"], 3);
    assert_eq!(body["next_cursor"], Value::Null);
    assert_eq!(body["success"], true);
    let worker = &body["templates"][0];
    assert_eq!(worker["image_id"], "busybox:1.36");
    assert_eq!(worker["max_instances"], 3);
    assert_eq!(worker["available_number"], 0, "{worker}");
    assert_eq!(worker["provider_api"], "Pod");
    assert_eq!(worker["provider_name"], "kube");
    assert_eq!(worker["provider_type"], "offline");
    assert_eq!(worker["tags"], json!({"team": "hpc"}));
    assert_eq!(worker["machine_types"], Value::Null);

    let (_, first) = env.get("/api/v1/templates/?limit=2").await;
    assert_eq!(ids(&first, "templates", "template_id"), ["worker", "gpu"]);
    assert_eq!(first["total_count"], 3);
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let (_, second) = env
        .get(&format!("/api/v1/templates/?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(ids(&second, "templates", "template_id"), ["broken"]);
    assert_eq!(second["next_cursor"], Value::Null);

    let (_, jobs) = env.get("/api/v1/templates/?provider_api=job").await;
    assert_eq!(ids(&jobs, "templates", "template_id"), ["gpu"]);
    let (_, found) = env.get("/api/v1/templates/?q=ork").await;
    assert_eq!(ids(&found, "templates", "template_id"), ["worker"]);

    let got = env.get("/api/v1/templates/?limit=0").await;
    assert_problem(&got, 400, "invalid-limit", "1 to 1000");
    let got = env.get("/api/v1/templates/?cursor=next").await;
    assert_problem(&got, 400, "invalid-cursor", "next_cursor");
}

#[tokio::test]
async fn requests_and_machines_come_in_the_reference_envelope() {
    let env = Env::new().await;
    env.seed().await;
    let (code, all) = env.get("/api/v1/requests/").await;
    assert_eq!(code, StatusCode::OK, "{all}");
    assert_eq!(all["count"], 3);
    assert_eq!(all["total_count"], 3);
    assert_eq!(all["next_cursor"], Value::Null);

    let (_, failed) = env.get("/api/v1/requests/?status=failed").await;
    assert_eq!(ids(&failed, "requests", "request_id"), [FAILED]);
    let item = &failed["requests"][0];
    assert_eq!(item["is_terminal"], true);
    assert_eq!(item["is_failure_like"], true);
    assert_eq!(item["provider_type"], "offline");
    assert!(
        item["message"]
            .as_str()
            .unwrap()
            .contains("cannot be pulled"),
        "{item}"
    );
    let (_, done) = env.get("/api/v1/requests/?status=complete").await;
    let item = &done["requests"][0];
    assert_eq!(item["successful_count"], 2);
    assert_eq!(item["success_rate"], 100.0);
    assert_eq!(item["progress_percent"], 100.0);
    assert_eq!(item["is_failure_like"], false);

    let (_, page) = env.get("/api/v1/requests/?limit=1").await;
    assert_eq!(page["count"], 1);
    assert_eq!(page["total_count"], 3);
    assert_eq!(page["next_cursor"], "1");
    let (_, returns) = env.get("/api/v1/requests/?request_type=return").await;
    assert_eq!(returns["total_count"], 0);
    let got = env.get("/api/v1/requests/?status=running").await;
    assert_problem(&got, 400, "invalid-status", "in_progress");

    let (code, machines) = env.get("/api/v1/machines/").await;
    assert_eq!(code, StatusCode::OK, "{machines}");
    assert_eq!(machines["total_count"], 2, "live and gone: {machines}");
    let (_, running) = env.get("/api/v1/machines/?status=running").await;
    assert_eq!(
        ids(&running, "machines", "machine_id"),
        ["orb-111111111111-0000"]
    );
    let m = &running["machines"][0];
    assert_eq!(m["result"], "succeed");
    assert_eq!(m["private_ip"], "10.0.0.1");
    assert_eq!(m["request_id"], DONE);
    assert!(m["uptime_seconds"].as_f64().unwrap() > 0.0, "{m}");
    let (_, of_done) = env
        .get(&format!("/api/v1/machines/?request_id={DONE}"))
        .await;
    assert_eq!(of_done["total_count"], 2);
    let got = env.get("/api/v1/machines/?status=up").await;
    assert_problem(&got, 400, "invalid-status", "running");
    let got = env.get("/api/v1/machines/?request_id=bad%20id").await;
    assert_problem(&got, 400, "malformed-request-id", "\"bad id\"");
}

#[tokio::test]
async fn batch_status_answers_every_id_in_order_and_marks_the_ones_it_cannot() {
    let env = Env::new().await;
    env.seed().await;
    let body = json!({"requestIds": [DONE, NOBODY, "bad id", FAILED], "verbose": true});
    let (code, reply) = env.post("/api/v1/requests/status", &body.to_string()).await;
    assert_eq!(code, StatusCode::OK, "{reply}");
    let list = reply["requests"].as_array().unwrap();
    assert_eq!(list.len(), 4, "{reply}");
    assert_eq!(list[0]["request_id"], DONE);
    assert_eq!(list[0]["status"], "complete");
    assert_eq!(list[0]["machines"].as_array().unwrap().len(), 2);
    assert_eq!(list[0]["machines"][0]["result"], "succeed");
    assert_eq!(list[1]["request_id"], NOBODY);
    assert_eq!(list[1]["error"]["code"], "UNKNOWN_REQUEST");
    assert_eq!(list[2]["request_id"], "bad id");
    assert_eq!(list[2]["error"]["code"], "MALFORMED_REQUEST_ID");
    assert_eq!(list[3]["request_id"], FAILED);
    assert_eq!(list[3]["status"], "failed");

    // The snake_case spelling is accepted too.
    let (code, reply) = env
        .post(
            "/api/v1/requests/status",
            &json!({"request_ids": [FAILED]}).to_string(),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{reply}");
    assert_eq!(reply["requests"][0]["status"], "failed");

    let before = env.request_count().await;
    let got = env
        .post("/api/v1/requests/status", r#"{"requestIds": []}"#)
        .await;
    assert_problem(&got, 422, "request-ids", "give 1 to 1000");
    let many: Vec<String> = (0..1001).map(|_| NOBODY.to_string()).collect();
    let got = env
        .post(
            "/api/v1/requests/status",
            &json!({"requestIds": many}).to_string(),
        )
        .await;
    assert_problem(&got, 422, "request-ids", "split a longer list");
    let got = env
        .post(
            "/api/v1/requests/status",
            &json!({"requestIds": [DONE], "long": true}).to_string(),
        )
        .await;
    assert_problem(&got, 422, "invalid-body", "long");
    assert_eq!(env.request_count().await, before);
}

#[tokio::test]
async fn delete_cancels_like_post_cancel_and_refuses_the_same_way() {
    let env = Env::new().await;
    env.seed().await;
    let got = env.delete(&format!("/api/v1/requests/{NOBODY}")).await;
    assert_problem(&got, 404, "unknown-request", NOBODY);
    let got = env.delete("/api/v1/requests/a%22b?reason=test").await;
    assert_problem(&got, 400, "malformed-request-id", "a\\\"b");
    // A finished request may still have objects, so the provider is asked; without one the
    // refusal says so and nothing changes.
    let got = env
        .delete(&format!(
            "/api/v1/requests/{DONE}?reason=no%20longer%20needed"
        ))
        .await;
    assert_problem(&got, 503, "provider-misconfigured", "");
    // GET of the same path still shows the stored request.
    let (code, shown) = env.get(&format!("/api/v1/requests/{DONE}")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(shown["request"]["status"], "complete");
}

#[tokio::test]
async fn info_and_the_openapi_document_are_where_the_reference_publishes_them() {
    let env = Env::new().await;
    let (code, info) = env.get("/info").await;
    assert_eq!(code, StatusCode::OK, "{info}");
    assert_eq!(info["service"], "orb");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        info["providers"],
        json!([{"name": "kube", "type": "offline"}])
    );
    let (code, here) = env.get("/openapi.json").await;
    assert_eq!(code, StatusCode::OK);
    let (_, there) = env.get("/api/v1/openapi.json").await;
    assert_eq!(here, there);
    for path in [
        "/api/v1/templates/",
        "/api/v1/requests/",
        "/api/v1/machines/",
        "/api/v1/requests/status",
        "/info",
    ] {
        assert!(
            here["paths"].get(path).is_some(),
            "{path} is not documented"
        );
    }
    assert!(
        here["paths"]["/api/v1/requests/{request_id}"]
            .get("delete")
            .is_some(),
        "cancel by DELETE is not documented"
    );
}

#[tokio::test]
async fn every_reply_carries_a_request_id_and_echoes_the_callers() {
    let env = Env::new().await;
    let mut seen = Vec::new();
    for uri in ["/health", "/api/v1/templates/", "/api/v1/no-such-route"] {
        let response = env
            .call(HttpRequest::get(uri).body(Body::empty()).unwrap())
            .await;
        let id = response
            .headers()
            .get("x-request-id")
            .unwrap_or_else(|| panic!("{uri}: no x-request-id"))
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(id.len(), 36, "{uri}: {id} is not a UUID");
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "each call gets its own id");
    let response = env
        .call(
            HttpRequest::get(format!("/api/v1/requests/{NOBODY}"))
                .header("x-request-id", "trace-42")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    let got = split(response).await;
    assert_problem(&got, 404, "unknown-request", NOBODY);
    // A caller's id that is not a sane token is not echoed back; the reply gets its own.
    let response = env
        .call(
            HttpRequest::get("/health")
                .header("x-request-id", "x".repeat(200))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(response.headers()["x-request-id"].len(), 36);
}

#[tokio::test]
async fn machine_requests_take_the_reference_bodies_and_refuse_the_same_way() {
    let env = Env::new().await;
    // camelCase parses: the call gets as far as the provider (which cannot be built here).
    let got = env
        .post(
            "/api/v1/machines/request",
            r#"{"templateId": "worker", "count": 2, "additionalData": {"owner": "sdk"}}"#,
        )
        .await;
    assert_problem(&got, 503, "provider-misconfigured", "\"offline\"");
    let got = env
        .post(
            "/api/v1/machines/request",
            r#"{"templateId": "nope", "machineCount": 1}"#,
        )
        .await;
    assert_problem(&got, 422, "unknown-template", "\"nope\"");
    let got = env
        .post(
            "/api/v1/machines/request",
            r#"{"templateId": "worker", "count": 1, "priority": 5}"#,
        )
        .await;
    assert_problem(&got, 422, "invalid-body", "priority");
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn returns_take_the_reference_bodies_and_reply_with_its_fields_too() {
    let env = Env::new().await;
    let got = env
        .post("/api/v1/machines/return", r#"{"allMachines": true}"#)
        .await;
    assert_problem(&got, 422, "nothing-to-return", "no live machine");
    env.seed().await;
    let before = env.request_count().await;
    let got = env
        .post(
            "/api/v1/machines/return",
            r#"{"allMachines": true, "machineIds": ["orb-111111111111-0001"]}"#,
        )
        .await;
    assert_problem(&got, 422, "return-selector", "allMachines");
    let got = env
        .post(
            "/api/v1/machines/return",
            r#"{"machineIds": ["orb-111111111111-0001"], "providerName": "aws-default"}"#,
        )
        .await;
    assert_problem(&got, 422, "other-provider", "\"kube\"");
    let got = env
        .post(
            "/api/v1/machines/return",
            r#"{"machineIds": ["orb-111111111111-0001"], "providerType": "aws"}"#,
        )
        .await;
    assert_problem(&got, 422, "other-provider", "\"offline\"");
    assert_eq!(env.request_count().await, before, "refusals store nothing");

    // A machine that is already gone: the return completes without the provider.
    let (code, body) = env
        .post(
            "/api/v1/machines/return",
            r#"{"machineIds": ["orb-111111111111-0001"], "force": true, "providerName": "kube"}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let id = body["request_id"].as_str().unwrap();
    assert!(id.starts_with("ret-"), "{body}");
    assert_eq!(body["request"]["request_id"], id);
    assert_eq!(
        body["message"], "every named machine was already gone",
        "{body}"
    );
    let item = &body["requests"][0];
    assert_eq!(item["request_id"], id);
    assert_eq!(item["request_type"], "return");
    assert_eq!(item["is_terminal"], true);
    assert_eq!(item["machines"][0]["machine_id"], "orb-111111111111-0001");
    assert_eq!(item["machines"][0]["result"], "succeed");
    assert_eq!(env.request_count().await, before + 1);
}

/// The `data:` of every frame of an SSE text, and its comments.
fn frames(text: &str) -> (Vec<Value>, Vec<String>) {
    let mut data = Vec::new();
    let mut comments = Vec::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            data.push(serde_json::from_str(d.trim()).unwrap_or(Value::Null));
        } else if let Some(c) = line.strip_prefix(':') {
            comments.push(c.trim().to_string());
        }
    }
    (data, comments)
}

async fn read_stream(env: &Env, uri: &str, within: std::time::Duration) -> String {
    use http_body_util::BodyExt;
    let response = env
        .call(HttpRequest::get(uri).body(Body::empty()).unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    let body = tokio::time::timeout(within, response.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{uri}: the stream did not end within {within:?}"))
        .unwrap()
        .to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn the_stream_sends_status_frames_and_closes_with_an_empty_one() {
    use std::time::{Duration, Instant};
    let env = Env::new().await;
    env.seed().await;
    // Finished: one frame with the status JSON, then the closing `data: {}`.
    let text = read_stream(
        &env,
        &format!("/api/v1/requests/{DONE}/stream"),
        Duration::from_secs(10),
    )
    .await;
    let (data, comments) = frames(&text);
    assert_eq!(data.len(), 2, "{text}");
    assert_eq!(data[0]["requests"][0]["request_id"], DONE);
    assert_eq!(data[0]["requests"][0]["status"], "complete");
    assert_eq!(data[1], json!({}), "{text}");
    assert!(comments.iter().any(|c| c.contains("complete")), "{text}");

    // Still running: a frame every interval until the timeout, then `data: {}`.
    let _creator = env.seed_running().await;
    let started = Instant::now();
    let text = read_stream(
        &env,
        &format!(
            "/api/v1/requests/{}/stream?interval=0.5&timeout=1.6",
            serve_support::RUNNING
        ),
        Duration::from_secs(20),
    )
    .await;
    let took = started.elapsed();
    let (data, comments) = frames(&text);
    assert!(took >= Duration::from_millis(1500), "ended after {took:?}");
    assert!(
        (4..=6).contains(&data.len()),
        "{} frames: {text}",
        data.len()
    );
    assert!(
        data[..data.len() - 1]
            .iter()
            .all(|d| d["requests"][0]["status"] == "in_progress"),
        "{text}"
    );
    assert_eq!(data.last().unwrap(), &json!({}));
    assert!(comments.iter().any(|c| c.contains("timeout")), "{text}");

    for (query, slug) in [
        ("interval=0.1", "invalid-interval"),
        ("interval=61", "invalid-interval"),
        ("timeout=0", "invalid-timeout"),
        ("timeout=3601", "invalid-timeout"),
        ("every=2", "invalid-query"),
    ] {
        let got = env
            .get(&format!("/api/v1/requests/{DONE}/stream?{query}"))
            .await;
        assert_problem(&got, 400, slug, "");
    }
    let got = env.get(&format!("/api/v1/requests/{NOBODY}/stream")).await;
    assert_problem(&got, 404, "unknown-request", NOBODY);
}

#[tokio::test]
async fn status_and_return_wait_when_asked() {
    use std::time::{Duration, Instant};
    let env = Env::new().await;
    let _creator = env.seed_running().await;
    let started = Instant::now();
    let (code, body) = env
        .get(&format!(
            "/api/v1/requests/{}/status?wait=true&timeout=1&verbose=true",
            serve_support::RUNNING
        ))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(900), "{body}");
    assert_eq!(body["requests"][0]["status"], "in_progress");
    let got = env
        .get(&format!("/api/v1/requests/{DONE}/status?timeout=5"))
        .await;
    assert_problem(&got, 400, "timeout-without-wait", "wait=true");
    env.seed().await;
    let got = env
        .post(
            "/api/v1/machines/return?wait=true&timeout=0",
            r#"{"machineIds": ["orb-111111111111-0001"]}"#,
        )
        .await;
    assert_problem(&got, 400, "invalid-timeout", "1 to 600");
    let (code, body) = env
        .post(
            "/api/v1/machines/return?wait=true&timeout=5",
            r#"{"machineIds": ["orb-111111111111-0001"]}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["requests"][0]["is_terminal"], true);
}

#[tokio::test]
async fn me_dashboard_and_providers_describe_the_server() {
    let env = Env::new().await;
    env.seed().await;
    // No token checks on this server: the caller is anonymous and may do everything.
    let (code, me) = env.get("/api/v1/me/").await;
    assert_eq!(code, StatusCode::OK, "{me}");
    assert_eq!(me["username"], "anonymous");
    assert_eq!(me["authenticated"], false);
    assert_eq!(me["roles"], json!(["admin", "operator", "viewer"]));

    let (code, board) = env.get("/api/v1/system/dashboard").await;
    assert_eq!(code, StatusCode::OK, "{board}");
    assert_eq!(board["total_requests"], 3);
    assert_eq!(board["active_requests"], 1);
    assert_eq!(board["requests"]["complete"], 1);
    assert_eq!(board["requests"]["failed"], 1);
    assert_eq!(board["requests"]["in_progress"], 1);
    assert_eq!(board["requests"]["timeout"], 0, "every status is listed");
    assert_eq!(board["total_machines"], 2);
    assert_eq!(board["live_machines"], 1);
    assert_eq!(board["machines"]["running"], 1);
    assert_eq!(board["machines"]["terminated"], 1);

    for path in ["/api/v1/providers/", "/api/v1/providers"] {
        let (code, list) = env.get(path).await;
        assert_eq!(code, StatusCode::OK, "{list}");
        assert_eq!(
            list["providers"],
            json!([{"name": "kube", "type": "offline", "enabled": true, "default": true}])
        );
    }
    // The provider type is one no build knows: its health says so.
    let (code, health) = env.get("/api/v1/providers/health").await;
    assert_eq!(code, StatusCode::OK, "{health}");
    assert_eq!(health["status"], "failing");
    assert!(
        health["providers"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("offline"),
        "{health}"
    );
}

#[tokio::test]
async fn cloud_generation_is_a_domain_error_and_refresh_lists() {
    let env = Env::new().await;
    env.seed().await;
    let got = env.post("/api/v1/templates/generate", "{}").await;
    assert_problem(&got, 501, "not-supported", "cloud images");
    // Nothing changed: the file still has its three templates, and refresh lists them.
    let (code, list) = env.post("/api/v1/templates/refresh", "").await;
    assert_eq!(code, StatusCode::OK, "{list}");
    assert_eq!(
        ids(&list, "templates", "template_id"),
        ["worker", "gpu", "broken"]
    );

    let (code, returns) = env.get("/api/v1/requests/return").await;
    assert_eq!(code, StatusCode::OK, "{returns}");
    assert_eq!(returns["total_count"], 0);
    env.post(
        "/api/v1/machines/return",
        r#"{"machineIds": ["orb-111111111111-0001"]}"#,
    )
    .await;
    let (_, returns) = env.get("/api/v1/requests/return?limit=5").await;
    assert_eq!(returns["total_count"], 1, "{returns}");
    assert_eq!(returns["requests"][0]["request_type"], "return");
    let got = env
        .get("/api/v1/requests/return?request_type=acquire")
        .await;
    assert_problem(&got, 400, "invalid-query", "request_type");
}

#[tokio::test]
async fn one_machine_is_found_by_id_or_host_name_and_read_through_its_request() {
    let env = Env::new().await;
    env.seed().await;
    let (code, one) = env.get("/api/v1/machines/orb-111111111111-0000").await;
    assert_eq!(code, StatusCode::OK, "{one}");
    assert_eq!(one["machines"].as_array().unwrap().len(), 1);
    assert_eq!(one["machines"][0]["status"], "running");
    assert_eq!(one["machines"][0]["request_id"], DONE);
    // Without a provider the refresh cannot ask the cluster: the stored machine comes back.
    let (code, now) = env
        .get("/api/v1/machines/orb-111111111111-0000/status")
        .await;
    assert_eq!(code, StatusCode::OK, "{now}");
    assert_eq!(now["machines"][0]["machine_id"], "orb-111111111111-0000");
    for path in [
        "/api/v1/machines/orb-nope",
        "/api/v1/machines/orb-nope/status",
        "/api/v1/machines/x%27%20OR%201=1",
    ] {
        let got = env.get(path).await;
        assert_problem(&got, 404, "unknown-machine", "GET /api/v1/machines/");
    }
}
