//! The reference broker's config routes: the configuration the server runs with
//! (`GET /api/v1/config/`), where each value came from (`…/sources`), one value by key
//! (`…/{key}`), and checking a config document (`POST …/validate`). The answers are
//! [`EffectiveConfig`]'s, the same as `orb config show`'s; secrets are masked there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{ApiQuery, NoQuery};
use super::problem::Problem;
use crate::effective_config::{
    ConfigProblem, EffectiveConfig, Setting, SettingSource, check_document, closest_key,
};

/// `GET /api/v1/config/`: the effective configuration.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FullConfig {
    /// `{path, origin, exists}` of config.json.
    #[schema(value_type = Object)]
    pub config_file: Value,
    /// `{path, origin}` of each directory.
    #[schema(value_type = Object)]
    pub config_dir: Value,
    #[schema(value_type = Object)]
    pub work_dir: Value,
    #[schema(value_type = Object)]
    pub log_dir: Value,
    /// The store, its password masked.
    pub storage_url: Option<String>,
    /// `default` or `hostfactory`.
    pub scheduler: String,
    /// config.json as written, secrets masked.
    #[schema(value_type = Object)]
    pub config: Value,
    /// The selected provider: `name`, `type`, its effective `settings`, `warnings` and
    /// `security_opt_outs`; null for a provider without layered settings.
    #[schema(value_type = Object)]
    pub provider: Value,
    /// Every key of `GET /api/v1/config/sources` with its value (only those of `source`
    /// when the query names one).
    #[schema(value_type = Object)]
    pub values: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FullConfigQuery {
    /// Only the `values` that came from this source: `default`, `file`, `env`, `flag` or
    /// `template`.
    pub source: Option<String>,
}

pub(super) fn configured(state: &AppState) -> Result<&Arc<EffectiveConfig>, Problem> {
    state.effective_config().ok_or_else(|| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "config-unavailable",
            "Configuration unavailable",
            "this server was started without its configuration view; `orb config show` on \
             its host shows the configuration",
        )
    })
}

fn wanted_source(raw: Option<&str>) -> Result<Option<SettingSource>, Problem> {
    let Some(raw) = raw else { return Ok(None) };
    SettingSource::ALL
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(raw.trim()))
        .map(Some)
        .ok_or_else(|| {
            Problem::bad_request(
                "invalid-source",
                format!(
                    "source {raw:?} is not a source of configuration values; use one of {}",
                    SettingSource::ALL.map(SettingSource::as_str).join(", ")
                ),
            )
        })
}

fn full(state: &AppState, query: FullConfigQuery) -> Result<Json<FullConfig>, Problem> {
    let effective = configured(state)?;
    let source = wanted_source(query.source.as_deref())?;
    let mut document = effective.show_document(false);
    let mut take = |key: &str| {
        document
            .get_mut(key)
            .map(Value::take)
            .unwrap_or(Value::Null)
    };
    Ok(Json(FullConfig {
        config_file: take("config_file"),
        config_dir: take("config_dir"),
        work_dir: take("work_dir"),
        log_dir: take("log_dir"),
        storage_url: take("storage_url").as_str().map(str::to_string),
        scheduler: take("scheduler").as_str().unwrap_or_default().to_string(),
        config: take("config"),
        provider: take("provider"),
        values: effective
            .settings()
            .into_iter()
            .filter(|s| source.is_none_or(|wanted| s.source == wanted))
            .map(|s| (s.key, s.value))
            .collect(),
    }))
}

/// The configuration this server runs with, as `orb config show` prints it, plus every key's
/// value. Secrets (passwords, tokens, credentials) are masked as `***`.
#[utoipa::path(
    get,
    path = "/api/v1/config/",
    tag = "config",
    operation_id = "get_full_config_api_v1_config__get",
    params(FullConfigQuery),
    responses(
        (status = 200, description = "The effective configuration", body = FullConfig),
        (status = 400, description = "An unknown query parameter or source", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn full_config(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<FullConfigQuery>,
) -> Result<Json<FullConfig>, Problem> {
    full(&state, query)
}

/// `GET /api/v1/config`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/config",
    tag = "config",
    operation_id = "get_full_config",
    params(FullConfigQuery),
    responses(
        (status = 200, description = "The effective configuration", body = FullConfig),
        (status = 400, description = "An unknown query parameter or source", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn full_config_bare(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<FullConfigQuery>,
) -> Result<Json<FullConfig>, Problem> {
    full(&state, query)
}

/// `GET /api/v1/config/sources`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConfigSources {
    /// The sources from weakest to strongest: a later one wins over an earlier one.
    #[schema(example = json!(["default", "file", "env", "flag", "template"]))]
    pub precedence: Vec<&'static str>,
    pub sources: Vec<Setting>,
    pub count: usize,
}

/// Every key of the effective configuration with its value and where it came from (the
/// directories' origins, config.json, `ORB_*` variables, the command line).
#[utoipa::path(
    get,
    path = "/api/v1/config/sources",
    tag = "config",
    operation_id = "get_config_sources_api_v1_config_sources_get",
    responses(
        (status = 200, description = "Each key, its value and its source", body = ConfigSources),
        (status = 400, description = "An unknown query parameter", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn config_sources(
    State(state): State<AppState>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
) -> Result<Json<ConfigSources>, Problem> {
    let sources = configured(&state)?.settings();
    Ok(Json(ConfigSources {
        precedence: SettingSource::ALL.map(SettingSource::as_str).to_vec(),
        count: sources.len(),
        sources,
    }))
}

/// One key of the effective configuration, e.g. `provider.namespace` or
/// `request.default_timeout`.
#[utoipa::path(
    get,
    path = "/api/v1/config/{key}",
    tag = "config",
    operation_id = "get_config_value_api_v1_config__key__get",
    params(("key" = String, Path, description = "A dotted key as GET /api/v1/config/sources lists them, e.g. provider.namespace")),
    responses(
        (status = 200, description = "The value and where it came from", body = Setting),
        (status = 400, description = "An unknown query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn config_value(
    State(state): State<AppState>,
    UrlPath(key): UrlPath<String>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
) -> Result<Json<Setting>, Problem> {
    let settings = configured(&state)?.settings();
    if let Some(found) = settings.iter().find(|s| s.key == key) {
        return Ok(Json(found.clone()));
    }
    let hint = closest_key(&key, &settings)
        .map(|k| format!("did you mean {k:?}? "))
        .unwrap_or_default();
    Err(Problem::not_found(
        "unknown-config-key",
        "Unknown configuration key",
        format!(
            "{key:?} is not a configuration key; {hint}keys are dotted paths such as \
             provider.namespace or request.default_timeout, and GET /api/v1/config/sources \
             lists every one"
        ),
    ))
}

/// `POST /api/v1/config/validate`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConfigValidation {
    /// True when orb would start with this document.
    pub valid: bool,
    /// What was checked: `request body`, or the server's config file when no body was sent.
    pub checked: String,
    /// Every problem, each naming its field and the fix.
    pub problems: Vec<ConfigProblem>,
    pub warnings: Vec<String>,
}

/// What a validate call checks.
enum Checked {
    /// A JSON document and the name it goes by in messages.
    Document(Value, PathBuf),
    /// The server's config file, which does not parse (and why).
    NotJson(PathBuf, String),
}

/// The document to check: the body, or with none the server's config file as it is now.
fn document_to_check(
    state: &AppState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Checked, Problem> {
    if body.iter().all(u8::is_ascii_whitespace) {
        let file = configured(state)?.dirs.config_file.path.clone();
        let text = std::fs::read_to_string(&file).map_err(|e| {
            Problem::unprocessable(
                "unreadable-config",
                "Config file unreadable",
                format!(
                    "no body was sent, so the server's config file {} was to be checked, and it \
                     cannot be read: {e}; send the document to check as the body",
                    file.display()
                ),
            )
        })?;
        return match serde_json::from_str(&text) {
            Ok(value) => Ok(Checked::Document(value, file)),
            // Still a verdict, not a refusal of the call.
            Err(e) => Ok(Checked::NotJson(file.clone(), not_json(&file, &e))),
        };
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.to_ascii_lowercase();
            v.starts_with("application/json") || v.contains("+json")
        });
    if !json {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not-json",
            "Unsupported media type",
            "the request body must be JSON; send the header Content-Type: application/json",
        ));
    }
    let value = serde_json::from_slice(body).map_err(|e| {
        Problem::bad_request(
            "malformed-json",
            format!("the request body is not valid JSON: {e}; send one config.json document"),
        )
    })?;
    Ok(Checked::Document(value, PathBuf::from("request body")))
}

/// Checks a config.json document as `orb serve` checks its config at start, with this
/// server's `ORB_K8S_*` variables over each Kubernetes provider's settings; without a body,
/// the server's config file as it is on disk now. Every problem is listed; nothing is stored,
/// written or changed.
#[utoipa::path(
    post,
    path = "/api/v1/config/validate",
    tag = "config",
    operation_id = "validate_config_api_v1_config_validate_post",
    request_body(content = Object, description = "A config.json document; none: the server's own config file"),
    responses(
        (status = 200, description = "The verdict: valid, or every problem", body = ConfigValidation),
        (status = 400, description = "Malformed JSON, or an unknown query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body that is not JSON", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn validate_config(
    State(state): State<AppState>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<ConfigValidation>, Problem> {
    let (document, label) = match document_to_check(&state, &headers, &body)? {
        Checked::Document(document, label) => (document, label),
        Checked::NotJson(file, message) => {
            return Ok(Json(ConfigValidation {
                valid: false,
                checked: file.display().to_string(),
                problems: vec![ConfigProblem::section("(document)", message)],
                warnings: vec![],
            }));
        }
    };
    let check = check_document(&document, Path::new(&label), &server_env());
    Ok(Json(ConfigValidation {
        valid: check.problems.is_empty(),
        checked: label.display().to_string(),
        problems: check.problems,
        warnings: check.warnings,
    }))
}

/// This server's `ORB_K8S_*` variables, which lie over each Kubernetes provider's settings.
pub(super) fn server_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| k.to_ascii_uppercase().starts_with("ORB_K8S_"))
        .collect()
}

/// Why `file` does not parse, by position only: the parser's words about a string could
/// quote the file, secrets and all.
pub(super) fn not_json(file: &Path, e: &serde_json::Error) -> String {
    format!(
        "{} is not JSON (line {}, column {}); fix the file so it parses as one JSON object",
        file.display(),
        e.line(),
        e.column()
    )
}
