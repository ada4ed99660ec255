//! `auth.type: "bearer"` as the reference broker configures it: JWTs signed with
//! `auth.bearer_token.secret_key`, from config.json through the auth plan `orb serve` builds
//! to the router. Tokens are minted here with the same secret, as the reference's issuer does.

mod serve_support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use clap::Parser;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use orb_cli::serve::auth::Auth;
use orb_cli::serve::auth_config::{self, Scheme};
use serde_json::{Value, json};
use serve_support::{Env, TEMPLATES, assert_problem, offline_entry, split};

const SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

fn serve_args(flags: &[&str]) -> orb_cli::cli::ServeArgs {
    let cli = orb_cli::cli::Cli::try_parse_from(["orb", "serve"].iter().chain(flags)).unwrap();
    match cli.command {
        orb_cli::cli::Command::Serve(args) => args,
        _ => unreachable!(),
    }
}

fn sections(value: Value) -> std::collections::BTreeMap<String, Value> {
    serde_json::from_value(value).unwrap()
}

/// The router with the auth `orb serve` plans for `config` (and `flags`).
async fn env(config: Value, flags: &[&str]) -> Env {
    let plan = auth_config::plan(&serve_args(flags), &sections(config), false)
        .unwrap()
        .expect("auth.type bearer switches auth on");
    let Scheme::Jwt(verifier) = plan.scheme.clone() else {
        panic!("not the JWT scheme: {plan:?}")
    };
    let auth = Arc::new(Auth::new(verifier, plan.roles, Duration::ZERO));
    Env::build_with_auth(
        offline_entry(),
        TEMPLATES,
        Duration::from_millis(50),
        Some(auth),
    )
    .await
}

fn bearer() -> Value {
    json!({"auth": {"type": "bearer", "bearer_token": {"secret_key": SECRET, "algorithm": "HS256"}}})
}

fn mint(claims: Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn in_an_hour() -> i64 {
    jiff::Timestamp::now().as_second() + 3600
}

async fn call(
    env: &Env,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut request = HttpRequest::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    split(
        env.call(request.body(Body::from(body.to_string())).unwrap())
            .await,
    )
    .await
}

#[tokio::test]
async fn a_token_signed_with_the_secret_is_accepted_with_the_role_it_claims() {
    let env = env(bearer(), &[]).await;
    let viewer = mint(
        json!({"sub": "dash", "exp": in_an_hour(), "roles": ["viewer"]}),
        SECRET,
    );
    let user = mint(
        json!({"sub": "driver", "exp": in_an_hour(), "roles": ["user"]}),
        SECRET,
    );
    let (code, body) = call(&env, "GET", "/api/v1/templates/", Some(&viewer), "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    // A viewer may not request machines; the reference's "user" may (orb's operator). The
    // offline provider then refuses with a 503, past the auth check.
    let request = r#"{"templateId": "worker", "count": 1}"#;
    let (code, body) = call(
        &env,
        "POST",
        "/api/v1/machines/request",
        Some(&viewer),
        request,
    )
    .await;
    assert_problem(&(code, body), 403, "forbidden", "needs operator");
    let (code, body) = call(
        &env,
        "POST",
        "/api/v1/machines/request",
        Some(&user),
        request,
    )
    .await;
    assert_ne!(code.as_u16(), 401, "{body}");
    assert_ne!(code.as_u16(), 403, "{body}");
    let (code, me) = call(&env, "GET", "/api/v1/me/", Some(&user), "").await;
    assert_eq!(code, StatusCode::OK, "{me}");
    assert_eq!(me["username"], "driver");
    assert_eq!(me["roles"], json!(["operator", "viewer"]));
}

#[tokio::test]
async fn forged_expired_and_missing_tokens_are_refused_and_change_nothing() {
    let env = env(bearer(), &[]).await;
    let forged = mint(
        json!({"sub": "mallory", "exp": in_an_hour(), "roles": ["admin"]}),
        "somebody-elses-secret-of-32-bytes-xx",
    );
    let expired = mint(
        json!({"sub": "driver", "exp": 1_000_000, "roles": ["user"]}),
        SECRET,
    );
    let request = r#"{"templateId": "worker", "count": 1}"#;
    for (token, needle) in [
        (Some(forged.as_str()), "signature does not match"),
        (Some(expired.as_str()), "expired"),
        (Some("garbage"), "not a JWT"),
        (None, "Authorization: Bearer <token>"),
    ] {
        let got = call(&env, "POST", "/api/v1/machines/request", token, request).await;
        assert_problem(&got, 401, "unauthenticated", needle);
    }
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn the_role_mapping_by_name_overrides_the_claim_and_the_default_covers_the_rest() {
    let config = json!({
        "auth": {"type": "bearer", "bearer_token": {"secret_key": SECRET}},
        "serve": {"auth": {"roles": {"driver": "viewer"}, "default_role": "operator"}},
    });
    let env = env(config, &[]).await;
    let claimed_admin = mint(
        json!({"sub": "driver", "exp": in_an_hour(), "roles": ["admin"]}),
        SECRET,
    );
    let (_, me) = call(&env, "GET", "/api/v1/me/", Some(&claimed_admin), "").await;
    assert_eq!(me["roles"], json!(["viewer"]), "{me}");
    let no_claim = mint(json!({"sub": "someone", "exp": in_an_hour()}), SECRET);
    let (_, me) = call(&env, "GET", "/api/v1/me/", Some(&no_claim), "").await;
    assert_eq!(me["roles"], json!(["operator", "viewer"]), "{me}");
}

#[test]
fn a_bearer_config_orb_cannot_apply_is_refused_with_the_fix() {
    let plan = |config: Value, flags: &[&str]| {
        auth_config::plan(&serve_args(flags), &sections(config), false)
            .unwrap_err()
            .to_string()
    };
    let short = plan(
        json!({"auth": {"type": "bearer", "bearer_token": {"secret_key": "abc"}}}),
        &[],
    );
    assert!(short.contains("3 bytes; use at least 32"), "{short}");
    let missing = plan(json!({"auth": {"type": "bearer"}}), &[]);
    assert!(
        missing.contains("auth.bearer_token.secret_key"),
        "{missing}"
    );
    let both = plan(bearer(), &["--auth-token-review"]);
    assert!(
        both.contains("both on") && both.contains("--auth-token-review"),
        "{both}"
    );
}
