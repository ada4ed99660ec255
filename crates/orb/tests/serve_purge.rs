//! Purging records over REST: `DELETE /api/v1/machines/{id}`, `POST /api/v1/requests/{id}/purge`
//! and `POST /api/v1/admin/database/cleanup`, through the router on a real SQLite store. What
//! may go goes; everything else is a clear refusal after which the store is exactly as before.

mod serve_support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use orb_cli::serve::auth::{Auth, Identity, RoleMap, TokenVerifier, VerifyError, VerifyFuture};
use orb_core::machine::Machine;
use orb_core::request::Request;
use serde_json::Value;
use serve_support::{
    DONE, Env, FAILED, NOBODY, STUCK, TEMPLATES, assert_problem, offline_entry, split,
};

const LIVE: &str = "orb-111111111111-0000";
const DEAD: &str = "orb-111111111111-0001";

fn machine_ids(list: &Value) -> Vec<String> {
    list["machines"]
        .as_array()
        .unwrap_or_else(|| panic!("no machine list: {list}"))
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Everything the store holds, versions included: to show a refusal changed nothing.
async fn everything(env: &Env) -> (Vec<Request>, Vec<Machine>) {
    let requests = env.store.list_requests(&Default::default()).await.unwrap();
    let machines = env.store.list_machines(&Default::default()).await.unwrap();
    (requests, machines)
}

#[tokio::test]
async fn a_dead_machine_is_purged_and_gone_from_the_lists() {
    let env = Env::new().await;
    env.seed().await;
    let (code, body) = env
        .delete(&format!("/api/v1/machines/{DEAD}?purge=true"))
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["purged"], true);
    assert_eq!(body["machine_id"], DEAD);
    assert_eq!(body["machine_ids"], serde_json::json!([DEAD]));

    let (_, list) = env.get("/api/v1/machines/").await;
    assert_eq!(machine_ids(&list), [LIVE]);
    let (_, request) = env.get(&format!("/api/v1/requests/{DONE}")).await;
    assert_eq!(machine_ids(&request), [LIVE], "{request}");
    let got = env.get(&format!("/api/v1/machines/{DEAD}")).await;
    assert_problem(&got, 404, "unknown-machine", DEAD);
    // Purged already: the second call finds nothing. Without `purge` it is a purge too.
    let got = env.delete(&format!("/api/v1/machines/{DEAD}")).await;
    assert_problem(&got, 404, "unknown-machine", DEAD);
}

#[tokio::test]
async fn a_live_machine_is_refused_and_nothing_changes() {
    let env = Env::new().await;
    env.seed().await;
    let before = everything(&env).await;
    let got = env
        .delete(&format!("/api/v1/machines/{LIVE}?purge=true"))
        .await;
    assert_problem(&got, 409, "purge-refused", "return it first");
    assert_problem(&got, 409, "purge-refused", "POST /api/v1/machines/return");
    assert_eq!(got.1["error"]["code"], "PURGE_REFUSED");
    assert_eq!(everything(&env).await, before);

    // purge=false asks for nothing and says how a machine is given back.
    let got = env
        .delete(&format!("/api/v1/machines/{LIVE}?purge=false"))
        .await;
    assert_problem(&got, 400, "purge-not-asked", "POST /api/v1/machines/return");
    let got = env
        .delete(&format!("/api/v1/machines/{DEAD}?purge=yes"))
        .await;
    assert_problem(&got, 400, "invalid-query", "purge");
    let got = env
        .delete(&format!("/api/v1/machines/{DEAD}?force=true"))
        .await;
    assert_problem(&got, 400, "invalid-query", "force");
    assert_eq!(everything(&env).await, before);
}

#[tokio::test]
async fn only_a_finished_request_with_nothing_left_is_purged() {
    let env = Env::new().await;
    env.seed().await;
    let before = everything(&env).await;
    // DONE still has a running machine; STUCK has not finished.
    let got = env
        .post(&format!("/api/v1/requests/{DONE}/purge"), "")
        .await;
    assert_problem(&got, 409, "purge-refused", LIVE);
    let got = env
        .post(&format!("/api/v1/requests/{STUCK}/purge"), "")
        .await;
    assert_problem(&got, 409, "purge-refused", "cancel it");
    let got = env
        .post(&format!("/api/v1/requests/{NOBODY}/purge"), "")
        .await;
    assert_problem(&got, 404, "unknown-request", NOBODY);
    let got = env.post("/api/v1/requests/not%20an%20id/purge", "").await;
    assert_problem(&got, 400, "malformed-request-id", "not an id");
    assert_eq!(everything(&env).await, before);

    let (code, body) = env
        .post(&format!("/api/v1/requests/{FAILED}/purge"), "")
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["request_id"], FAILED);
    assert_eq!(body["purged"], true);
    let got = env.get(&format!("/api/v1/requests/{FAILED}")).await;
    assert_problem(&got, 404, "unknown-request", FAILED);
    assert_eq!(env.request_count().await, 2);

    // Once DONE's last machine is gone too (here: its record says so), DONE goes with both.
    let mut live = env.store.find_machines(&[LIVE.to_string()]).await.unwrap();
    live[0].status = orb_core::machine::MachineStatus::Terminated;
    let mut done = env
        .store
        .get_request(&orb_core::test_support::id(DONE))
        .await
        .unwrap()
        .unwrap();
    env.store
        .update_request(&mut done, &mut live)
        .await
        .unwrap();
    let (code, body) = env
        .post(&format!("/api/v1/requests/{DONE}/purge"), "")
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["machine_ids"].as_array().unwrap().len(), 2, "{body}");
    let (_, list) = env.get("/api/v1/machines/").await;
    assert!(machine_ids(&list).is_empty(), "{list}");
}

#[tokio::test]
async fn a_cleanup_dry_run_counts_and_the_real_one_removes() {
    let env = Env::new().await;
    env.seed().await;
    // Nothing finished a century ago.
    let (code, body) = env
        .post(
            "/api/v1/admin/database/cleanup",
            r#"{"older_than_days": 36500}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["requests_removed"], 0);

    // The reference client's spelling, previewed: FAILED would go, DONE stays (a live
    // machine), STUCK is not finished and not counted.
    let (code, dry) = env
        .post(
            "/api/v1/admin/database/cleanup",
            r#"{"confirm": "true", "olderThanDays": 1, "dryRun": true}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["requests_removed"], 1, "{dry}");
    assert_eq!(dry["machines_removed"], 0, "{dry}");
    assert_eq!(dry["request_ids"], serde_json::json!([FAILED]));
    assert_eq!(dry["requests_kept"], 1, "{dry}");
    assert_eq!(dry["kept"][0]["request_id"], DONE);
    assert!(
        dry["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("return it first"),
        "{dry}"
    );
    assert!(dry["message"].as_str().unwrap().contains("would remove"));
    assert_eq!(env.request_count().await, 3, "a dry run removes nothing");

    let (code, real) = env
        .post(
            "/api/v1/admin/database/cleanup",
            r#"{"older_than_days": 1, "request_statuses": ["failed", "complete"]}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{real}");
    assert_eq!(real["dry_run"], false);
    assert_eq!(real["requests_removed"], 1);
    assert_eq!(real["request_ids"], dry["request_ids"]);
    assert_eq!(env.request_count().await, 2);
    let got = env.get(&format!("/api/v1/requests/{FAILED}")).await;
    assert_problem(&got, 404, "unknown-request", FAILED);
}

#[tokio::test]
async fn a_cleanup_body_that_does_not_say_enough_is_refused_and_changes_nothing() {
    let env = Env::new().await;
    env.seed().await;
    let before = everything(&env).await;
    for (body, status, slug, needle) in [
        ("{}", 422, "invalid-cleanup", "older_than_days"),
        (
            r#"{"older_than_days": 1, "older_than_seconds": 60}"#,
            422,
            "invalid-cleanup",
            "not both",
        ),
        (
            r#"{"older_than_days": 1, "request_statuses": ["in_progress"]}"#,
            422,
            "invalid-cleanup",
            "in_progress is not finished",
        ),
        (
            r#"{"older_than_days": 1, "request_statuses": ["done-ish"]}"#,
            422,
            "invalid-cleanup",
            "done-ish",
        ),
        (
            r#"{"older_than_days": 1, "confirm": "false"}"#,
            422,
            "invalid-cleanup",
            "nothing was removed",
        ),
        (
            r#"{"older_than_days": 1, "include_machines": false}"#,
            422,
            "invalid-cleanup",
            "include_machines",
        ),
        (
            r#"{"older_than_days": 40000}"#,
            422,
            "invalid-cleanup",
            "36525",
        ),
        (
            r#"{"older_than_days": -1}"#,
            422,
            "invalid-body",
            "older_than_days",
        ),
        (r#"{"older_than": 1}"#, 422, "invalid-body", "older_than"),
        ("older than a week", 400, "malformed-json", "not valid JSON"),
    ] {
        let got = env.post("/api/v1/admin/database/cleanup", body).await;
        assert_problem(&got, status, slug, needle);
    }
    assert_eq!(everything(&env).await, before);
}

/// Knows a token per role.
struct RoleTokens;

impl TokenVerifier for RoleTokens {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        let user = match token {
            "viewer" => Some("system:serviceaccount:batch:dashboard"),
            "operator" => Some("system:serviceaccount:batch:hf-driver"),
            "admin" => Some("system:serviceaccount:batch:boss"),
            _ => None,
        };
        Box::pin(async move {
            user.map(|username| Identity {
                username: username.into(),
                groups: vec![],
                claimed_role: None,
            })
            .ok_or_else(|| VerifyError::Rejected("unknown token".into()))
        })
    }
}

async fn call(env: &Env, method: &str, uri: &str, token: &str, body: &str) -> (StatusCode, Value) {
    let request = HttpRequest::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    split(env.call(request).await).await
}

#[tokio::test]
async fn purges_need_an_operator_and_a_cleanup_an_admin() {
    let roles = RoleMap::parse(
        [
            ("batch:dashboard", "viewer"),
            ("batch:hf-driver", "operator"),
            ("batch:boss", "admin"),
        ],
        None,
    )
    .unwrap();
    let auth = Arc::new(Auth::new(
        Arc::new(RoleTokens),
        roles,
        Duration::from_secs(30),
    ));
    let env = Env::build_with_auth(
        offline_entry(),
        TEMPLATES,
        Duration::from_millis(50),
        Some(auth),
    )
    .await;
    env.seed().await;
    let machine = format!("/api/v1/machines/{DEAD}");
    let request = format!("/api/v1/requests/{FAILED}/purge");
    let cleanup = "/api/v1/admin/database/cleanup";
    let body = r#"{"older_than_days": 1, "dry_run": true}"#;

    let got = call(&env, "DELETE", &machine, "viewer", "").await;
    assert_problem(&got, 403, "forbidden", "needs operator");
    let got = call(&env, "POST", &request, "viewer", "").await;
    assert_problem(&got, 403, "forbidden", "needs operator");
    let got = call(&env, "POST", cleanup, "operator", body).await;
    assert_problem(&got, 403, "forbidden", "needs admin");
    assert_eq!(env.request_count().await, 3);

    let (code, got) = call(&env, "DELETE", &machine, "operator", "").await;
    assert_eq!(code, StatusCode::OK, "{got}");
    let (code, got) = call(&env, "POST", &request, "operator", "").await;
    assert_eq!(code, StatusCode::OK, "{got}");
    let (code, got) = call(&env, "POST", cleanup, "admin", body).await;
    assert_eq!(code, StatusCode::OK, "{got}");
    assert_eq!(got["dry_run"], true);
}
