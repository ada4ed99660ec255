//! Inbound authentication with real ServiceAccount tokens from the local control plane,
//! checked by the TokenReview verifier. Needs the control plane (`tools/control-plane/cp up`).

use std::sync::Arc;
use std::time::Duration;

use crate::serve_support::{Env, TEMPLATES, assert_problem, offline_entry, split};
use crate::support::accounts::token_for;
use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube_fixture::TestCluster;
use kube_fixture::identity::Managed;
use orb_cli::serve::auth::{Auth, RoleMap};
use orb_cli::serve::token_review::TokenReviewVerifier;

async fn get(
    env: &Env,
    method: &str,
    uri: &str,
    token: &str,
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let response = env
        .call(
            HttpRequest::builder()
                .method(method)
                .uri(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await;
    split(response).await
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn service_account_tokens_are_checked_by_token_review_and_mapped_to_roles() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve-auth").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    let operator = token_for(&accounts, "hf-driver").await;
    let viewer = token_for(&accounts, "dashboard").await;
    let stranger = token_for(&accounts, "stranger").await;

    let operator_key = format!("{}:hf-driver", ns.name());
    let roles = RoleMap::parse(
        [
            (operator_key.as_str(), "operator"),
            ("*:dashboard", "viewer"),
        ],
        None,
    )
    .unwrap();
    // The verifier asks as orb's shipped identity with the inbound auth rule (TokenReview).
    let managed = Managed::Namespaces(vec![ns.name().to_string()]);
    let identity = cluster
        .broker_identity_for(&ns, managed, &["inbound_auth_enabled"])
        .await;
    let verifier = Arc::new(TokenReviewVerifier::new(identity.client.clone(), vec![]));
    let auth = Arc::new(Auth::new(verifier, roles, Duration::from_secs(30)));
    let env = Env::build_with_auth(
        offline_entry(),
        TEMPLATES,
        Duration::from_millis(50),
        Some(auth),
    )
    .await;

    let (code, body) = get(&env, "GET", "/api/v1/requests", &viewer, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let count_zero = r#"{"template_id": "worker", "count": 0}"#;
    let got = get(
        &env,
        "POST",
        "/api/v1/machines/request",
        &viewer,
        count_zero,
    )
    .await;
    assert_problem(
        &got,
        403,
        "forbidden",
        "has role viewer but this call needs operator",
    );
    // The operator passes authentication; the broker then refuses the count.
    let got = get(
        &env,
        "POST",
        "/api/v1/machines/request",
        &operator,
        count_zero,
    )
    .await;
    assert_problem(&got, 422, "count-rejected", "at least 1");
    let got = get(&env, "GET", "/api/v1/requests", &stranger, "").await;
    assert_problem(
        &got,
        403,
        "forbidden",
        &format!("system:serviceaccount:{}:stranger has no role", ns.name()),
    );
    let got = get(&env, "GET", "/api/v1/requests", "not-a-real-token", "").await;
    assert_problem(&got, 401, "unauthenticated", "the token was not accepted");
}
