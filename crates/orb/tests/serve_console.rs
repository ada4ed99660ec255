//! The web console's files and the routes it adds, through the router on a real SQLite store
//! (no cluster: the provider cannot be built here, so the Kubernetes-only routes show their
//! refusals). The console in a browser is tested on the control plane (`cluster`,
//! `console::`).

mod serve_support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use orb_cli::serve::auth::{Auth, RoleMap, TokenVerifier, VerifyError, VerifyFuture};
use serve_support::{DONE, Env, TEMPLATES, assert_problem, offline_entry};

async fn raw(env: &Env, uri: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = env
        .call(HttpRequest::get(uri).body(Body::empty()).unwrap())
        .await;
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 4 << 20).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn the_console_files_may_load_nothing_from_elsewhere() {
    let env = Env::new().await;
    let (code, headers, page) = raw(&env, "/ui/").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.contains("app.js") && page.contains("app.css"),
        "{page}"
    );
    let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let (code, headers, text) = raw(&env, path).await;
        assert_eq!(code, StatusCode::OK, "{path}");
        assert!(
            headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with(kind),
            "{path}: {headers:?}"
        );
        assert!(!text.is_empty(), "{path} is empty");
    }
    // `/ui` sends the browser to the page, so relative links resolve under /ui/.
    let (code, headers, _) = raw(&env, "/ui").await;
    assert_eq!(code, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers[header::LOCATION], "/ui/");
    // Anything else under /ui/ is the API's usual 404 problem, not a page.
    let (code, _, body) = raw(&env, "/ui/secrets.json").await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
}

/// Refuses every token: only public routes answer.
struct NobodyVerifier;

impl TokenVerifier for NobodyVerifier {
    fn verify<'a>(&'a self, _token: &'a str) -> VerifyFuture<'a> {
        Box::pin(async { Err(VerifyError::Rejected("no token is valid here".into())) })
    }
}

#[tokio::test]
async fn with_auth_on_the_page_loads_without_a_token_and_the_api_still_asks_for_one() {
    let roles = RoleMap::parse([("*:dashboard", "viewer")], None).unwrap();
    let auth = Arc::new(Auth::new(
        Arc::new(NobodyVerifier),
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
    let (code, _, page) = raw(&env, "/ui/").await;
    assert_eq!(code, StatusCode::OK);
    assert!(page.contains("<html"), "{page}");
    let (code, _, _) = raw(&env, "/ui/app.js").await;
    assert_eq!(code, StatusCode::OK);
    let (code, _, body) = raw(&env, "/api/v1/machines").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn the_pod_and_render_routes_name_what_is_missing() {
    let env = Env::new().await;
    env.seed().await;
    // Unknown things first: the same 404s as the rest of the API.
    let got = env.get("/api/v1/machines/no-such-machine/pod").await;
    assert_problem(&got, 404, "unknown-machine", "no-such-machine");
    let got = env.get("/api/v1/templates/no-such-template/render").await;
    assert_problem(&got, 404, "unknown-template", "no-such-template");
    let got = env.get("/api/v1/templates/worker/render?count=0").await;
    assert_problem(&got, 400, "bad-count", "count=0");
    let got = env.get("/api/v1/templates/worker/render?count=101").await;
    assert_problem(&got, 400, "bad-count", "1 to 100");
    // A known machine and template, but no Kubernetes provider behind this server.
    let (_, machines) = env.get(&format!("/api/v1/requests/{DONE}/status")).await;
    let machine = machines["machines"][0]["machine_id"]
        .as_str()
        .unwrap()
        .to_string();
    let got = env.get(&format!("/api/v1/machines/{machine}/pod")).await;
    assert_problem(&got, 501, "not-kubernetes", "Kubernetes provider");
    let got = env.get("/api/v1/templates/worker/render").await;
    assert_problem(&got, 501, "not-kubernetes", "Kubernetes provider");
}

#[tokio::test]
async fn machine_items_carry_node_and_namespace_fields() {
    let env = Env::new().await;
    env.seed().await;
    let (code, list) = env.get("/api/v1/machines").await;
    assert_eq!(code, StatusCode::OK);
    let first = &list["machines"][0];
    // Present (null for machines the provider never observed), so a client can rely on them.
    let fields = first.as_object().unwrap();
    assert!(fields.contains_key("node_name"), "{first}");
    assert!(fields.contains_key("namespace"), "{first}");
}

#[tokio::test]
async fn event_streams_tell_the_browser_not_to_keep_their_connection() {
    // A browser opens at most six connections to one server; a stream it abandoned on a
    // reload must not hold one of them (the console's next page would wait for it).
    let env = Env::new().await;
    env.seed().await;
    let (code, headers, _) = raw(&env, &format!("/api/v1/requests/{DONE}/events")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CONNECTION], "close");
    // Plain replies keep their connection for reuse.
    let (_, headers, _) = raw(&env, "/api/v1/templates").await;
    assert!(headers.get(header::CONNECTION).is_none(), "{headers:?}");
}
