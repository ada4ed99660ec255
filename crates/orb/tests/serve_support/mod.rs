//! A router on a real SQLite store in a tempdir, with the provider arrangement the CLI tests
//! use: a provider type no build knows ("offline"), so every call that would need the
//! cluster fails as it would with a broken provider, and nothing else depends on one.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request as HttpRequest, Response, StatusCode, header};
use http_body_util::BodyExt;
use jiff::Timestamp;
use orb_broker::{Broker, BrokerSettings, ProviderHandle};
use orb_cli::context::load_catalog_from;
use orb_cli::provider_factory::{ProviderContext, build_provider};
use orb_cli::serve::{AppState, ServeOptions, router};
use orb_core::config::ProviderEntry;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::test_support;
use orb_store::{RequestFilter, Store};
use serde_json::{Value, json};
use tower::ServiceExt;

pub const TEMPLATES: &str = r#"{"scheduler_type": "hostfactory", "templates": [
  {"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36", "instanceTags": "team=hpc",
   "resourceRequests": {"cpu": "2", "memory": "4Gi"}},
  {"templateId": "gpu", "maxNumber": -1, "imageId": "cuda:12", "providerApi": "Job"},
  {"templateId": "broken", "maxNumber": 2, "namespace": "Bad_Namespace"}
]}"#;

pub const DONE: &str = "req-11111111-1111-4111-8111-111111111111";
pub const FAILED: &str = "req-22222222-2222-4222-8222-222222222222";
pub const STUCK: &str = "req-33333333-3333-4333-8333-333333333333";
pub const RUNNING: &str = "req-44444444-4444-4444-8444-444444444444";
pub const NOBODY: &str = "req-00000000-0000-4000-8000-000000000000";

pub struct Env {
    pub root: tempfile::TempDir,
    pub store: Store,
    pub app: Router,
    /// The state behind `app` (`orb mcp serve` builds its router from one too).
    pub state: AppState,
    template_file: PathBuf,
}

/// The provider entry the CLI tests use: a type no build knows.
pub fn offline_entry() -> ProviderEntry {
    ProviderEntry {
        name: "kube".into(),
        provider_type: "offline".into(),
        enabled: true,
        default: true,
        config: json!({"namespace": "batch"}),
        template_defaults: Default::default(),
    }
}

impl Env {
    pub async fn new() -> Self {
        Self::build(offline_entry(), TEMPLATES, Duration::from_millis(50)).await
    }

    /// A router over `entry`'s provider (built lazily, as `orb serve` does) and the
    /// template file `templates`.
    pub async fn build(entry: ProviderEntry, templates: &str, poll: Duration) -> Self {
        Self::build_with_auth(entry, templates, poll, None).await
    }

    pub async fn build_with_auth(
        entry: ProviderEntry,
        templates: &str,
        poll: Duration,
        auth: Option<Arc<orb_cli::serve::auth::Auth>>,
    ) -> Self {
        let root = tempfile::tempdir().unwrap();
        let config_dir = root.path().join("config");
        std::fs::create_dir_all(&config_dir).unwrap();
        // Named as the provider's template file is looked up, so the server follows it.
        let template_file = config_dir.join(
            &orb_core::template::file::template_file_candidates(&entry.name, &entry.provider_type)
                [0],
        );
        std::fs::write(&template_file, templates).unwrap();
        let catalog = load_catalog_from(&template_file, &entry).unwrap();
        let store = Store::open_sqlite_file(&root.path().join("work/orb.db"))
            .await
            .unwrap();
        let context = ProviderContext {
            config_dir,
            work_dir: root.path().join("work"),
        };
        let provider_entry = entry.clone();
        let broker = Broker {
            store: store.clone(),
            provider: ProviderHandle::lazy(move || build_provider(&provider_entry, &context)),
            settings: BrokerSettings {
                provider_name: entry.name.clone(),
                provider_type: entry.provider_type.clone(),
                grace_secs: 30,
                max_machines_per_request: 5,
                default_max_machines: 10,
            },
            catalog: orb_broker::catalog::CatalogCell::new(catalog),
            clock: Arc::new(Timestamp::now),
            refreshed: Default::default(),
        };
        let options = ServeOptions {
            default_wait_secs: 1,
            poll_interval: poll,
            template_defaults: Default::default(),
            auth,
            console: true,
        };
        let state = AppState::new(broker, options);
        // As `orb serve` does: every call that reads templates follows the file.
        state.reload_templates_from(orb_cli::serve::template_file::TemplateSource {
            config_dir: root.path().join("config"),
            entry,
        });
        let app = router(state.clone());
        Self {
            root,
            store,
            app,
            state,
            template_file,
        }
    }

    /// Writes `config` as the server's config.json and captures it for the config routes,
    /// as `orb serve` does at start (through `--config`, so the test's own HOME and
    /// directories are not consulted for the file). Returns the file's path.
    pub fn show_config(&self, config: &Value) -> PathBuf {
        use clap::Parser;
        let file = self.root.path().join("config/config.json");
        std::fs::write(&file, serde_json::to_string_pretty(config).unwrap()).unwrap();
        let path = file.to_str().unwrap();
        let cli = orb_cli::cli::Cli::try_parse_from(["orb", "--config", path, "serve"]).unwrap();
        let session = orb_cli::session::Session::new(cli.global);
        self.state.show_config(
            orb_cli::effective_config::EffectiveConfig::capture(&session, None).unwrap(),
        );
        file
    }

    /// The template file the server follows.
    pub fn template_file(&self) -> PathBuf {
        self.template_file.clone()
    }

    pub fn db(&self) -> PathBuf {
        self.root.path().join("work/orb.db")
    }

    pub async fn call(&self, request: HttpRequest<Body>) -> Response<Body> {
        self.app.clone().oneshot(request).await.unwrap()
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, Value) {
        let response = self
            .call(HttpRequest::get(uri).body(Body::empty()).unwrap())
            .await;
        split(response).await
    }

    pub async fn post(&self, uri: &str, body: &str) -> (StatusCode, Value) {
        let response = self
            .call(
                HttpRequest::post(uri)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap(),
            )
            .await;
        split(response).await
    }

    pub async fn delete(&self, uri: &str) -> (StatusCode, Value) {
        let response = self
            .call(HttpRequest::delete(uri).body(Body::empty()).unwrap())
            .await;
        split(response).await
    }

    pub async fn request_count(&self) -> usize {
        self.store
            .list_requests(&RequestFilter::default())
            .await
            .unwrap()
            .len()
    }

    /// DONE (complete, one running and one terminated machine), FAILED, and STUCK (in
    /// progress with its deadline long past, so any read settles it as timed out).
    pub async fn seed(&self) {
        let mut done = acquire(DONE, RequestStatus::Complete, 2);
        done.fulfilled_count = 2;
        let mut machines = vec![
            machine(&done, "orb-111111111111-0000", MachineStatus::Running),
            machine(&done, "orb-111111111111-0001", MachineStatus::Terminated),
        ];
        self.store
            .insert_request(&mut done, &mut machines)
            .await
            .unwrap();
        let mut failed = acquire(FAILED, RequestStatus::Failed, 1);
        failed.status_message = Some("image registry.invalid/x:1 cannot be pulled".into());
        self.store
            .insert_request(&mut failed, &mut [])
            .await
            .unwrap();
        let mut stuck = acquire(STUCK, RequestStatus::InProgress, 3);
        self.store
            .insert_request(&mut stuck, &mut [])
            .await
            .unwrap();
    }

    /// RUNNING: in progress with a deadline an hour ahead, so reads leave it running.
    /// An acquire another live process is still creating: nothing recorded yet, and the
    /// returned claim (hold it) tells every reader not to resume it.
    pub async fn seed_running(&self) -> orb_store::Claim {
        let mut running = acquire(RUNNING, RequestStatus::InProgress, 1);
        running.deadline_at = Some(Timestamp::now() + jiff::SignedDuration::from_hours(1));
        let claim = self
            .store
            .try_claim(&running.request_id)
            .await
            .unwrap()
            .expect("nobody else holds the new request's claim");
        self.store
            .insert_request(&mut running, &mut [])
            .await
            .unwrap();
        claim
    }
}

pub async fn split(response: Response<Body>) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

pub fn at(secs: i64) -> Timestamp {
    test_support::at(secs)
}

pub fn acquire(id: &str, status: RequestStatus, wanted: u32) -> Request {
    test_support::request(RequestType::Acquire)
        .id(id)
        .provider("kube", "offline")
        .count(wanted)
        .status(status)
        .kind(orb_core::ProviderApi::Pod)
        .started(at(0))
        .deadline(at(300))
        .build()
}

pub fn machine(request: &Request, name: &str, status: MachineStatus) -> Machine {
    test_support::machine(name)
        .request_id(request.request_id.clone())
        .resource(name)
        .status(status)
        .ip("10.0.0.1")
        .launched(at(20))
        .provider_data(json!({}))
        .created(at(1))
        .updated(at(20))
        .build()
}

/// A problem document: the status, its `type`, and a detail containing `needle`.
pub fn assert_problem(got: &(StatusCode, Value), status: u16, slug: &str, needle: &str) {
    let (code, body) = got;
    assert_eq!(code.as_u16(), status, "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert_eq!(body["type"], format!("urn:orb:problem:{slug}"), "{body}");
    assert!(
        body["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(needle),
        "detail {detail:?} should contain {needle:?}"
    );
    // The reference broker's envelope rides along: its code is the slug in upper snake case.
    assert_eq!(
        body["error"]["code"],
        slug.to_ascii_uppercase().replace('-', "_"),
        "{body}"
    );
    assert_eq!(body["error"]["message"], detail, "{body}");
    assert_eq!(body["error"]["details"]["status"], status, "{body}");
}

/// `(event name, id, JSON data)` of every complete Server-Sent Event in `text`.
pub fn sse_events(text: &str) -> Vec<(String, String, Value)> {
    text.split("\n\n")
        .filter(|block| block.contains("data:"))
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(|v| v.trim_start().to_string())
                    .unwrap_or_default()
            };
            let data = serde_json::from_str(&field("data")).unwrap_or(Value::Null);
            (field("event"), field("id"), data)
        })
        .collect()
}
