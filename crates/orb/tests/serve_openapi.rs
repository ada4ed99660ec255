//! The checked-in OpenAPI document (crates/orb/openapi.json) must match what the handlers
//! generate, and the server must serve exactly that document.

mod serve_support;

use axum::http::StatusCode;
use serve_support::Env;

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
const REGENERATE: &str = "ORB_UPDATE_OPENAPI=1 cargo test -p orb --test serve_openapi";

#[test]
fn the_checked_in_openapi_document_matches_the_handlers() {
    let generated = orb_cli::serve::openapi_json();
    if std::env::var_os("ORB_UPDATE_OPENAPI").is_some() {
        std::fs::write(CHECKED_IN, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/orb/openapi.json is out of date with the REST handlers; regenerate it with\n  {REGENERATE}\nand commit the result"
    );
}

#[tokio::test]
async fn the_server_serves_the_generated_document() {
    let env = Env::new().await;
    let (code, served) = env.get("/api/v1/openapi.json").await;
    assert_eq!(code, StatusCode::OK);
    let generated: serde_json::Value =
        serde_json::from_str(&orb_cli::serve::openapi_json()).unwrap();
    assert_eq!(served, generated);
    for route in [
        "/api/v1/templates",
        "/api/v1/templates/{template_id}",
        "/api/v1/templates/validate",
        "/api/v1/machines",
        "/api/v1/machines/request",
        "/api/v1/machines/return",
        "/api/v1/requests",
        "/api/v1/requests/{request_id}",
        "/api/v1/requests/{request_id}/status",
        "/api/v1/requests/{request_id}/cancel",
        "/api/v1/requests/{request_id}/events",
        "/livez",
        "/readyz",
        "/health",
        "/metrics",
    ] {
        assert!(
            served["paths"].get(route).is_some(),
            "{route} is not documented"
        );
    }
    assert!(served["components"]["schemas"].get("Problem").is_some());
}
