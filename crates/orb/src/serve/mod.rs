//! `orb serve`: the broker as a long-running HTTP service. REST under `/api/v1`, probes,
//! `/metrics` and a generated OpenAPI document. Handlers are thin: they parse input, call
//! the same [`Broker`] the command line uses, and turn its answers into JSON or problems.

mod atomic_file;
pub mod auth;
pub mod auth_config;
pub mod background;
mod cluster_checks;
pub mod command;
mod config;
pub mod config_write;
pub mod console;
pub mod daemon;
mod events;
mod extract;
pub mod health;
mod history;
pub mod hostfactory;
mod inspect;
pub mod jwt;
pub mod listener;
mod machines;
pub mod metrics;
pub mod model;
pub mod overview;
mod probes;
pub mod problem;
mod provider_schema;
mod purge;
pub mod reference;
mod reload;
pub mod request_head;
mod requests;
pub mod server;
pub mod socket;
pub mod template_file;
mod template_writes;
mod templates;
pub mod token_review;
pub mod version_gate;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use metrics::Metrics;
use orb_broker::Broker;

use crate::effective_config::EffectiveConfig;
use crate::hostfactory::WrittenMachines;
use crate::template_checks::{TemplateChecker, check_template};

/// Knobs of the HTTP layer (the broker has its own settings).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Seconds `?wait=true` waits when the caller gives no timeout (capped at 600).
    pub default_wait_secs: u64,
    /// How often a waiting call or an event stream re-reads a request.
    pub poll_interval: Duration,
    /// The provider's `template_defaults`, applied by `POST /api/v1/templates/validate`.
    pub template_defaults: Map<String, Value>,
    /// Bearer-token checks on every non-public route; `None` leaves the API open.
    pub auth: Option<Arc<auth::Auth>>,
    /// Serve the web console at `/ui/` (off with `--no-ui`, `--api-only` or
    /// config.json's `serve.ui.enabled: false`).
    pub console: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            default_wait_secs: 300,
            poll_interval: Duration::from_secs(2),
            template_defaults: Map::new(),
            auth: None,
            console: true,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    broker: Arc<Broker>,
    metrics: Metrics,
    options: ServeOptions,
    /// The background side of the server, when it runs on Kubernetes.
    daemon: Option<Arc<dyn health::DaemonHealth>>,
    /// The provider's own template checks (planning and audit), when it has any.
    template_checker: Option<TemplateChecker>,
    /// The Kubernetes provider, for the console's views of pods and rendered bodies.
    kubernetes: Option<Arc<orb_k8s::K8sProvider>>,
    template_source: OnceLock<template_file::TemplateSource>,
    template_file: template_file::TemplateFile,
    /// The configuration the server started with, for `GET /api/v1/config/…`.
    config: OnceLock<Arc<EffectiveConfig>>,
    /// Big requests' machines as getRequestStatus last wrote them.
    written: WrittenMachines,
}

impl AppState {
    pub fn new(broker: Broker, options: ServeOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                broker: Arc::new(broker),
                metrics: Metrics::new(),
                options,
                daemon: None,
                template_checker: None,
                kubernetes: None,
                template_source: OnceLock::new(),
                template_file: Default::default(),
                config: OnceLock::new(),
                written: WrittenMachines::default(),
            }),
        }
    }

    /// A state whose broker runs on `runtime`'s provider (the same object): the provider's
    /// own metrics are exported (none at all with `metrics_enabled=false`), templates get its
    /// checks, and its background tasks show in `/readyz`. The provider itself is kept too,
    /// for the two reads only a Kubernetes provider answers (a machine's pod, a template's
    /// rendered bodies).
    pub fn with_kubernetes(
        broker: Broker,
        options: ServeOptions,
        runtime: Arc<daemon::ClusterRuntime>,
    ) -> Self {
        let provider = runtime.provider().clone();
        let kubernetes = Some(provider.clone());
        Self {
            inner: Arc::new(Inner {
                broker: Arc::new(broker),
                metrics: if provider.config().metrics_enabled {
                    Metrics::with_kubernetes(provider.metrics())
                } else {
                    Metrics::disabled()
                },
                options,
                template_checker: Some(Arc::new(move |template: &orb_core::template::Template| {
                    check_template(Some(&provider), template)
                })),
                daemon: Some(runtime),
                kubernetes,
                template_source: OnceLock::new(),
                template_file: Default::default(),
                config: OnceLock::new(),
                written: WrittenMachines::default(),
            }),
        }
    }

    /// A state with the Kubernetes provider's template checks but no background side:
    /// `orb mcp serve` answers through the same routes without a watch cache, like the CLI.
    pub fn with_checks_of(
        broker: Broker,
        options: ServeOptions,
        provider: Arc<orb_k8s::K8sProvider>,
    ) -> Self {
        let kubernetes = Some(provider.clone());
        Self {
            inner: Arc::new(Inner {
                broker: Arc::new(broker),
                metrics: Metrics::disabled(),
                options,
                template_checker: Some(Arc::new(move |template: &orb_core::template::Template| {
                    check_template(Some(&provider), template)
                })),
                daemon: None,
                kubernetes,
                template_source: OnceLock::new(),
                template_file: Default::default(),
                config: OnceLock::new(),
                written: WrittenMachines::default(),
            }),
        }
    }

    /// The background side, when the server runs one: what the probes ask it.
    pub fn daemon(&self) -> Option<&Arc<dyn health::DaemonHealth>> {
        self.inner.daemon.as_ref()
    }

    /// The Kubernetes provider the server runs on, when it runs on one.
    pub fn kubernetes(&self) -> Option<&Arc<orb_k8s::K8sProvider>> {
        self.inner.kubernetes.as_ref()
    }

    /// The provider's template checks, when it has any (else only the template's own).
    pub fn template_checker(&self) -> Option<&TemplateChecker> {
        self.inner.template_checker.as_ref()
    }

    /// A request view as the API replies it.
    pub fn detail(&self, view: &orb_broker::RequestView) -> model::RequestDetail {
        let broker = self.broker();
        model::RequestDetail::of(view, &broker.settings.provider_type, (broker.clock)())
    }

    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    /// The broker, shared (the HostFactory route runs its operations on it).
    pub fn shared_broker(&self) -> Arc<Broker> {
        self.inner.broker.clone()
    }

    /// What getRequestStatus calls keep of the replies they wrote.
    pub fn written_machines(&self) -> WrittenMachines {
        self.inner.written.clone()
    }

    /// Brings the broker's templates up to date with the template file (when the server
    /// follows one) and says what loading it said. Every call that reads templates runs this
    /// first, so REST and the HostFactory route answer from the same catalog.
    pub fn templates_now(&self) -> template_file::Loaded {
        match self.template_source() {
            Some(source) => self.inner.template_file.sync(source, &self.inner.broker),
            None => template_file::Loaded {
                warnings: self.inner.broker.catalog.current().notes(),
                failure: None,
                missing: None,
            },
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub fn options(&self) -> &ServeOptions {
        &self.inner.options
    }

    /// Makes the HostFactory route re-read the template file on every call, as the direct
    /// path does (without it, the route uses the broker's catalog).
    pub fn reload_templates_from(&self, source: template_file::TemplateSource) {
        let _ = self.inner.template_source.set(source);
    }

    pub fn template_source(&self) -> Option<&template_file::TemplateSource> {
        self.inner.template_source.get()
    }

    /// Makes the next call reload the template file (after the API wrote it).
    pub fn templates_written(&self) {
        self.inner.template_file.forget();
    }

    /// Makes the config routes answer `config` (what the server was started with); without
    /// it they answer 503 `config-unavailable`. Set once; a second call changes nothing.
    pub fn show_config(&self, config: EffectiveConfig) {
        let _ = self.inner.config.set(Arc::new(config));
    }

    pub fn effective_config(&self) -> Option<&Arc<EffectiveConfig>> {
        self.inner.config.get()
    }
}

/// Declares the optional Bearer authentication (`orb serve --auth-token-review`).
struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A Kubernetes token, checked with the TokenReview API, when the server runs \
                         with --auth-token-review; otherwise no authentication. Probes, /metrics and \
                         this document are always open.",
                    ))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    modifiers(&BearerScheme),
    security((), ("bearer" = [])),
    info(
        title = "orb",
        description = "orb's REST API: machine templates, machine requests and returns, request status and events, probes and metrics."
    ),
    tags(
        (name = "templates", description = "Machine templates"),
        (name = "machines", description = "Request and return machines"),
        (name = "requests", description = "Follow and cancel requests"),
        (name = "hostfactory", description = "The five HostFactory operations, answered as their scripts would (used by the scripts through the daemon's Unix socket)"),
        (name = "probes", description = "Liveness, readiness, health and metrics"),
        (name = "config", description = "The configuration the server runs with, where each value came from, and checking a config document"),
        (name = "admin", description = "Administrative operations on the store (admin role)"),
    )
)]
struct ApiDoc;

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(templates::show_template))
        .routes(routes!(templates::validate_templates))
        .routes(routes!(machines::request_machines))
        .routes(routes!(machines::return_machines))
        .routes(routes!(requests::show_request))
        .routes(routes!(requests::request_status))
        .routes(routes!(requests::cancel_request))
        .routes(routes!(events::request_events))
        .routes(routes!(events::request_stream))
        .routes(routes!(history::timeline))
        .routes(routes!(history::events))
        .routes(routes!(history::events_bare))
        .routes(routes!(reference::info))
        .routes(routes!(reference::list_templates))
        .routes(routes!(reference::list_requests))
        .routes(routes!(reference::request_status_batch))
        .routes(routes!(reference::cancel_request))
        .routes(routes!(reference::list_machines))
        .routes(routes!(reference::list_templates_bare))
        .routes(routes!(reference::list_requests_bare))
        .routes(routes!(reference::list_machines_bare))
        .routes(routes!(reference::list_return_requests))
        .routes(routes!(reference::get_machine))
        .routes(routes!(reference::machine_status))
        .routes(routes!(inspect::machine_pod))
        .routes(routes!(inspect::render_template))
        .routes(routes!(purge::purge_machine))
        .routes(routes!(purge::purge_request))
        .routes(routes!(purge::cleanup_database))
        .routes(routes!(reload::reload_config))
        .routes(routes!(template_writes::create_template))
        .routes(routes!(template_writes::update_template))
        .routes(routes!(template_writes::delete_template))
        .routes(routes!(reference::generate_templates))
        .routes(routes!(reference::refresh_templates))
        .routes(routes!(overview::me))
        .routes(routes!(overview::me_bare))
        .routes(routes!(overview::dashboard))
        .routes(routes!(overview::providers))
        .routes(routes!(overview::providers_bare))
        .routes(routes!(overview::providers_health))
        .routes(routes!(provider_schema::all_provider_schemas))
        .routes(routes!(provider_schema::provider_schema))
        .routes(routes!(config::full_config))
        .routes(routes!(config::full_config_bare))
        .routes(routes!(config::config_sources))
        .routes(routes!(config::config_value))
        .routes(routes!(config::validate_config))
        .routes(routes!(config_write::set_config))
        .routes(routes!(config_write::save_config))
        .routes(routes!(hostfactory::hostfactory_call))
        .routes(routes!(probes::livez))
        .routes(routes!(probes::readyz))
        .routes(routes!(probes::health))
        .routes(routes!(probes::metrics))
}

/// The OpenAPI document of every route, as served at `/api/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// [`openapi`] as pretty JSON with a trailing newline: the checked-in `crates/orb/openapi.json`.
pub fn openapi_json() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the OpenAPI document: {e}\"}}"));
    text.push('\n');
    text
}

/// The whole HTTP service.
pub fn router(state: AppState) -> Router {
    let auth = state.options().auth.clone();
    router_with_auth(state, auth)
}

/// The same service without Bearer checks, for the owner-only Unix socket.
pub fn local_router(state: AppState) -> Router {
    router_with_auth(state, None)
}

fn router_with_auth(state: AppState, auth: Option<Arc<auth::Auth>>) -> Router {
    let (routes, api) = api_router().split_for_parts();
    let routes = if state.options().console {
        routes.merge(console::console_routes())
    } else {
        routes
    };
    let document = api.to_pretty_json().unwrap_or_default();
    let routes = routes
        .route(
            "/api/v1/openapi.json",
            get({
                let document = document.clone();
                move || async move { ([(header::CONTENT_TYPE, "application/json")], document) }
            }),
        )
        // Where the reference broker publishes its document.
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], document) }),
        )
        .fallback(not_found);
    // Authentication runs inside the HTTP counter, so refusals are counted too.
    let routes = match auth {
        Some(auth) => routes.layer(middleware::from_fn_with_state(auth, auth::require_token)),
        None => routes,
    };
    // An oversized head is refused before a token is reviewed for it, and counted.
    routes
        .layer(middleware::from_fn(request_head::refuse_oversized_head))
        .layer(middleware::from_fn_with_state(state.clone(), count_http))
        .layer(middleware::map_response(problem_for_plain_errors))
        .layer(middleware::map_response(close_after_event_streams))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_READ_TIMEOUT,
        ))
        .layer(middleware::from_fn(tag_request_id))
        .with_state(state)
}

/// The id a reply carries in `x-request-id` (kept in the request's extensions, not its
/// headers, so the header limits count only what the caller sent).
#[derive(Debug, Clone)]
pub struct RequestIdTag(pub header::HeaderValue);

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The caller's `x-request-id` when it is a sane one (1 to 128 visible ASCII characters),
/// else a new UUID.
fn request_id_for(request: &Request) -> header::HeaderValue {
    request
        .headers()
        .get(REQUEST_ID_HEADER)
        .filter(|v| {
            let b = v.as_bytes();
            (1..=128).contains(&b.len()) && b.iter().all(|c| c.is_ascii_graphic())
        })
        .cloned()
        .unwrap_or_else(|| {
            header::HeaderValue::from_str(&uuid::Uuid::new_v4().to_string())
                .unwrap_or_else(|_| header::HeaderValue::from_static("-"))
        })
}

/// Every reply carries `x-request-id` for correlation: the caller's own when it sent one,
/// else a new UUID (the reference broker's clients log it with errors).
async fn tag_request_id(mut request: Request, next: Next) -> Response {
    let id = request_id_for(&request);
    request.extensions_mut().insert(RequestIdTag(id.clone()));
    let mut response = next.run(request).await;
    response.headers_mut().insert(REQUEST_ID_HEADER, id);
    response
}

/// An event stream holds its connection until it ends; `Connection: close` tells the client
/// not to keep the socket for reuse, so one it abandons (a reloaded console page) is closed at
/// once instead of counting against the six connections a browser opens to one server.
async fn close_after_event_streams(mut response: Response) -> Response {
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if streams {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

/// How long a client may take to send a request body.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Refusals that axum or a layer answered in plain text or with no body at all (405, 413, a
/// path that is not UTF-8, a body that stopped coming) become problem documents like every
/// other refusal of the API; headers such as `Allow` stay.
async fn problem_for_plain_errors(response: Response) -> Response {
    let status = response.status();
    // Only bodies nobody wrote for a client: empty or plain text. JSON (problems, the health
    // report of a failing /readyz) stays as it is.
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let reason = status.canonical_reason().unwrap_or("Error");
    let detail = match status.as_u16() {
        405 => format!(
            "this route does not take that method{}; GET /api/v1/openapi.json lists the routes",
            parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .map(|a| format!(" (it takes {a})"))
                .unwrap_or_default()
        ),
        413 => format!(
            "the request body is too large{}; send fewer items per call",
            if text.is_empty() {
                String::new()
            } else {
                format!(" ({text})")
            }
        ),
        408 => "the request body did not arrive in time; send it whole, promptly".to_string(),
        _ if !text.is_empty() => text,
        _ => reason.to_string(),
    };
    let slug = reason.to_ascii_lowercase().replace(' ', "-");
    let mut problem = problem::Problem::new(status, &slug, reason, detail).into_response();
    for keep in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&keep) {
            problem.headers_mut().insert(keep, value.clone());
        }
    }
    problem
}

async fn not_found(request: Request) -> problem::Problem {
    problem::Problem::not_found(
        "no-such-route",
        "No such route",
        format!(
            "{} {} is not a route of orb's API; GET /api/v1/openapi.json lists them",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Counts each HTTP request by its route template (not its raw path, so ids do not
/// multiply the series).
async fn count_http(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().to_string();
    let request_id = request
        .extensions()
        .get::<RequestIdTag>()
        .and_then(|t| t.0.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let started = Instant::now();
    let response = next.run(request).await.into_response();
    let status = response.status().as_u16();
    state
        .metrics()
        .record_http(&method, &route, status, started.elapsed());
    // Refusals are logged with the id the reply carries, so a caller's report finds them.
    if status >= 500 {
        tracing::warn!(%method, %route, status, %request_id, "request failed");
    } else if status >= 400 {
        tracing::info!(%method, %route, status, %request_id, "request refused");
    }
    response
}
