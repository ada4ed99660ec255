//! Inbound Bearer-token authentication through the router, with a verifier stub standing in
//! for the TokenReview call (the stub is an authenticator, not a Kubernetes API).

mod serve_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use orb_cli::serve::auth::{Auth, Identity, RoleMap, TokenVerifier, VerifyError, VerifyFuture};
use serve_support::{Env, TEMPLATES, assert_problem, offline_entry, split};

/// Knows two tokens; counts how often it is asked.
struct StubVerifier {
    calls: AtomicUsize,
}

impl TokenVerifier for StubVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match token {
                "viewer-token" => Ok(Identity {
                    username: "system:serviceaccount:batch:dashboard".into(),
                    groups: vec![],
                    claimed_role: None,
                }),
                "operator-token" => Ok(Identity {
                    username: "system:serviceaccount:batch:hf-driver".into(),
                    groups: vec![],
                    claimed_role: None,
                }),
                "stranger-token" => Ok(Identity {
                    username: "system:serviceaccount:other:someone".into(),
                    groups: vec![],
                    claimed_role: None,
                }),
                "down" => Err(VerifyError::Unavailable("apiserver unreachable".into())),
                _ => Err(VerifyError::Rejected("token expired".into())),
            }
        })
    }
}

async fn env() -> (Env, Arc<StubVerifier>) {
    let verifier = Arc::new(StubVerifier {
        calls: AtomicUsize::new(0),
    });
    let roles = RoleMap::parse(
        [("batch:hf-driver", "operator"), ("*:dashboard", "viewer")],
        None,
    )
    .unwrap();
    let auth = Arc::new(Auth::new(verifier.clone(), roles, Duration::from_secs(30)));
    let env = Env::build_with_auth(
        offline_entry(),
        TEMPLATES,
        Duration::from_millis(50),
        Some(auth),
    )
    .await;
    (env, verifier)
}

async fn call(
    env: &Env,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, serde_json::Value, Option<String>) {
    let mut request = HttpRequest::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = env
        .call(request.body(Body::from(body.to_string())).unwrap())
        .await;
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .map(|v| v.to_str().unwrap().to_string());
    let (code, value) = split(response).await;
    (code, value, challenge)
}

#[tokio::test]
async fn a_missing_or_bad_token_is_401_with_a_bearer_challenge() {
    let (env, _) = env().await;
    let (code, body, challenge) = call(&env, "GET", "/api/v1/templates", None, "").await;
    assert_problem(
        &(code, body),
        401,
        "unauthenticated",
        "Authorization: Bearer <token>",
    );
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    let basic = env
        .call(
            HttpRequest::get("/api/v1/templates")
                .header(header::AUTHORIZATION, "Basic YWxpY2U6c2VjcmV0")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(basic.headers()[header::WWW_AUTHENTICATE], "Bearer");
    assert_problem(
        &split(basic).await,
        401,
        "unauthenticated",
        "not a Bearer token",
    );
    let (code, body, _) = call(&env, "GET", "/api/v1/templates", Some("expired"), "").await;
    assert_problem(&(code, body), 401, "unauthenticated", "token expired");
}

#[tokio::test]
async fn roles_decide_what_a_caller_may_do() {
    let (env, _) = env().await;
    let (code, _, _) = call(&env, "GET", "/api/v1/templates", Some("viewer-token"), "").await;
    assert_eq!(code, StatusCode::OK);
    let request = r#"{"template_id": "worker", "count": 0}"#;
    let (code, body, _) = call(
        &env,
        "POST",
        "/api/v1/machines/request",
        Some("viewer-token"),
        request,
    )
    .await;
    assert_problem(
        &(code, body),
        403,
        "forbidden",
        "has role viewer but this call needs operator",
    );
    // The operator gets through to the broker, which refuses the count: auth let it pass.
    let (code, body, _) = call(
        &env,
        "POST",
        "/api/v1/machines/request",
        Some("operator-token"),
        request,
    )
    .await;
    assert_problem(&(code, body), 422, "count-rejected", "at least 1");
    let (code, body, _) = call(&env, "GET", "/api/v1/requests", Some("stranger-token"), "").await;
    assert_problem(
        &(code, body),
        403,
        "forbidden",
        "system:serviceaccount:other:someone has no role",
    );
    let (code, body, _) = call(&env, "GET", "/api/v1/requests", Some("down"), "").await;
    assert_problem(
        &(code, body),
        503,
        "auth-unavailable",
        "apiserver unreachable",
    );
}

#[tokio::test]
async fn probes_metrics_and_the_openapi_document_stay_public() {
    let (env, verifier) = env().await;
    for uri in ["/livez", "/health", "/metrics", "/api/v1/openapi.json"] {
        let (code, _, _) = call(&env, "GET", uri, None, "").await;
        assert_eq!(code, StatusCode::OK, "{uri}");
    }
    assert_eq!(verifier.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_verified_token_is_cached_briefly() {
    let (env, verifier) = env().await;
    for _ in 0..3 {
        let (code, _, _) = call(&env, "GET", "/api/v1/machines", Some("viewer-token"), "").await;
        assert_eq!(code, StatusCode::OK);
    }
    assert_eq!(verifier.calls.load(Ordering::SeqCst), 1);
    // Refused tokens are not cached: each attempt is checked again.
    for _ in 0..2 {
        call(&env, "GET", "/api/v1/machines", Some("expired"), "").await;
    }
    assert_eq!(verifier.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_oversized_request_head_is_refused_before_any_token_is_checked() {
    let (env, verifier) = env().await;
    let long_uri = format!("/api/v1/machines?pad={}", "x".repeat(9 * 1024));
    for token in [None, Some("viewer-token")] {
        let (code, body, challenge) = call(&env, "GET", &long_uri, token, "").await;
        assert_problem(
            &(code, body),
            414,
            "uri-too-long",
            "more than the 8192 allowed",
        );
        assert_eq!(challenge, None, "refused for its size, not for a token");
    }
    assert_eq!(
        verifier.calls.load(Ordering::SeqCst),
        0,
        "no TokenReview for a refused head"
    );
}

#[tokio::test]
async fn me_names_the_token_s_user_and_its_roles() {
    let (env, _) = env().await;
    let (code, me, _) = call(&env, "GET", "/api/v1/me/", Some("operator-token"), "").await;
    assert_eq!(code, StatusCode::OK, "{me}");
    assert_eq!(me["username"], "system:serviceaccount:batch:hf-driver");
    assert_eq!(me["roles"], serde_json::json!(["operator", "viewer"]));
    assert_eq!(me["authenticated"], true);
    let (_, me, _) = call(&env, "GET", "/api/v1/me", Some("viewer-token"), "").await;
    assert_eq!(me["roles"], serde_json::json!(["viewer"]));
    let (code, body, _) = call(&env, "GET", "/api/v1/me/", None, "").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
}
