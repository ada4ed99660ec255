//! `POST /api/v1/admin/reload-config`: re-read config.json as the server would at start,
//! check it, re-read the template file now, and say which settings on disk differ from the
//! ones the server runs with.
//!
//! The reference broker swaps its configuration in place. Here the provider, the store, the
//! watch cache and the background tasks are built from the configuration once, at start, and
//! swapping them under calls in flight would let one request run half on the old settings and
//! half on the new. So a reload applies what is safe to apply between two calls (the template
//! file, followed on every call anyway) and lists every other change by key with its running
//! and its on-disk value: the operator sees exactly what a restart would change, and a file
//! the server could not start with is caught before that restart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::config::{configured, not_json, server_env};
use super::extract::{ApiQuery, NoQuery};
use super::problem::Problem;
use crate::effective_config::{ConfigProblem, EffectiveConfig, check_document, redact_secrets};

/// One setting whose value on disk is not the one the server runs with.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ConfigChange {
    /// The place in config.json, dotted, list items by position: `request.default_timeout`,
    /// `providers.0.config.namespace`.
    #[schema(example = "providers.0.config.namespace")]
    pub key: String,
    /// What the server runs with (absent: not set when it started). Secrets masked. Any
    /// JSON: a number, a string, a list…
    pub running: Option<Value>,
    /// What the file says now (absent: removed from the file). Secrets masked. Any JSON.
    pub on_disk: Option<Value>,
}

/// What re-reading the template file found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplatesReread {
    /// Templates the server now offers.
    pub count: usize,
    /// Warnings and refusals of the templates, or why the file could not be read.
    pub warnings: Vec<String>,
}

/// The reply of `POST /api/v1/admin/reload-config`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConfigReload {
    /// The file that was read.
    pub config_file: String,
    /// The template file, re-read now; its changes are in effect from this reply on.
    pub templates: TemplatesReread,
    /// Every setting that differs between the file and the running server.
    pub changes: Vec<ConfigChange>,
    /// True when `changes` is not empty: they take effect when the server is restarted.
    pub restart_required: bool,
    /// The same in one sentence.
    pub message: String,
}

/// How many changed keys the message names (the list has them all).
const KEYS_NAMED: usize = 5;

/// Re-reads and checks config.json as `orb serve` does at start (with this server's
/// `ORB_K8S_*` variables), re-reads the template file, and lists the settings that differ
/// from the running ones; those take effect at the next restart. A file the server could
/// not start with is refused with every problem, and the server keeps what it runs with.
#[utoipa::path(
    post,
    path = "/api/v1/admin/reload-config",
    tag = "admin",
    operation_id = "reload_config_api_v1_admin_reload_config_post",
    responses(
        (status = 200, description = "The file is valid; the template file was re-read, and every setting that differs from the running one is listed", body = ConfigReload),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The file cannot be read, is not JSON, or the server could not start with it; `error.details.problems` lists every problem. Nothing changed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The server was started without its configuration view", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn reload_config(
    State(state): State<AppState>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
) -> Result<Json<ConfigReload>, Problem> {
    let running = configured(&state)?.clone();
    let file = running.dirs.config_file.path.clone();
    let on_disk = read_document(&file)?;
    let check = check_document(&on_disk, &file, &server_env());
    if !check.problems.is_empty() {
        return Err(refused(&file, check.problems));
    }
    // Only once the file is known to be good: the template file it points at is re-read.
    let loaded = state.templates_now();
    let templates = TemplatesReread {
        count: state.broker().catalog.current().templates.len(),
        warnings: loaded
            .failure
            .map(|f| f.message)
            .into_iter()
            .chain(loaded.warnings)
            .collect(),
    };
    let changes = changes(&running_document(&running), &on_disk);
    let restart_required = !changes.is_empty();
    let message = if restart_required {
        let mut named: Vec<&str> = changes
            .iter()
            .take(KEYS_NAMED)
            .map(|c| c.key.as_str())
            .collect();
        if changes.len() > KEYS_NAMED {
            named.push("…");
        }
        let (settings, differ, take) = if changes.len() == 1 {
            ("setting", "differs", "takes")
        } else {
            ("settings", "differ", "take")
        };
        format!(
            "{} is valid and the template file was re-read ({} templates); {} {settings} \
             {differ} from what the server runs with and {take} effect when it is restarted \
             (orb server stop, then orb server start; in a cluster, a rollout restart): {}",
            file.display(),
            templates.count,
            changes.len(),
            named.join(", ")
        )
    } else {
        format!(
            "{} is valid and matches what the server runs with; the template file was re-read \
             ({} templates)",
            file.display(),
            templates.count
        )
    };
    Ok(Json(ConfigReload {
        config_file: file.display().to_string(),
        templates,
        changes,
        restart_required,
        message,
    }))
}

/// config.json as the server read it at start (an empty document when there was none).
pub(super) fn running_document(running: &EffectiveConfig) -> Value {
    running
        .loaded
        .as_ref()
        .map(|l| l.raw.clone())
        .unwrap_or_else(|| Value::Object(Default::default()))
}

fn read_document(file: &Path) -> Result<Value, Problem> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        refused(
            file,
            vec![ConfigProblem::section(
                "(document)",
                format!(
                    "cannot read {}: {e}; restore the file (orb config show names the one the \
                     server started with)",
                    file.display()
                ),
            )],
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        refused(
            file,
            vec![ConfigProblem::section("(document)", not_json(file, &e))],
        )
    })
}

fn refused(file: &Path, problems: Vec<ConfigProblem>) -> Problem {
    let listed = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect::<Vec<_>>()
        .join("; ");
    Problem::unprocessable(
        "config-invalid",
        "Config file invalid",
        format!(
            "{} could not be reloaded, and the server keeps running with the configuration it \
             started with: {listed}; fix the file and reload again (POST \
             /api/v1/config/validate checks it without reloading)",
            file.display()
        ),
    )
    .with_detail(
        "problems",
        serde_json::to_value(&problems).unwrap_or(Value::Null),
    )
}

/// Every leaf of `document` by its dotted place. Empty objects and lists are leaves too, so
/// adding or emptying a section shows.
fn leaves(document: &Value) -> BTreeMap<String, Value> {
    fn walk(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
        let join = |key: &str| {
            if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            }
        };
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    walk(&join(key), child, out);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for (i, child) in items.iter().enumerate() {
                    walk(&join(&i.to_string()), child, out);
                }
            }
            _ => {
                out.insert(prefix.to_string(), value.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", document, &mut out);
    out
}

/// What is shown for the leaf at `key`: its masked value, or the mask of the secret
/// section holding it.
fn shown(masked: &BTreeMap<String, Value>, key: &str) -> Value {
    let mut place = key;
    loop {
        if let Some(value) = masked.get(place) {
            return value.clone();
        }
        match place.rfind('.') {
            Some(dot) => place = &place[..dot],
            None => return Value::String(crate::effective_config::REDACTED.into()),
        }
    }
}

/// The leaves that differ between the running document and the one on disk, compared
/// unmasked (a changed password is a change) and shown masked.
pub fn changes(running: &Value, on_disk: &Value) -> Vec<ConfigChange> {
    let masked = |document: &Value| {
        let mut document = document.clone();
        redact_secrets(&mut document);
        leaves(&document)
    };
    let (before, after) = (leaves(running), leaves(on_disk));
    let (before_shown, after_shown) = (masked(running), masked(on_disk));
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|key| before.get(*key) != after.get(*key))
        .map(|key| ConfigChange {
            key: key.clone(),
            running: before.contains_key(key).then(|| shown(&before_shown, key)),
            on_disk: after.contains_key(key).then(|| shown(&after_shown, key)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_identical_document_has_no_changes() {
        let doc = json!({"request": {"default_timeout": 300}, "providers": [{"name": "k8s"}]});
        assert!(changes(&doc, &doc).is_empty());
    }

    #[test]
    fn changed_added_and_removed_leaves_are_listed_by_place() {
        let running = json!({
            "request": {"default_timeout": 300},
            "providers": [{"name": "k8s", "config": {"namespace": "batch"}}],
            "old": true
        });
        let on_disk = json!({
            "request": {"default_timeout": 600},
            "providers": [{"name": "k8s", "config": {"namespace": "batch", "labels": {}}}]
        });
        let got = changes(&running, &on_disk);
        assert_eq!(
            got,
            vec![
                ConfigChange {
                    key: "old".into(),
                    running: Some(json!(true)),
                    on_disk: None
                },
                ConfigChange {
                    key: "providers.0.config.labels".into(),
                    running: None,
                    on_disk: Some(json!({}))
                },
                ConfigChange {
                    key: "request.default_timeout".into(),
                    running: Some(json!(300)),
                    on_disk: Some(json!(600))
                },
            ]
        );
    }

    #[test]
    fn a_changed_secret_is_a_change_shown_masked() {
        let running = json!({"serve": {"auth": {"secret": "old-secret-value"}}});
        let on_disk = json!({"serve": {"auth": {"secret": "new-secret-value"}}});
        let got = changes(&running, &on_disk);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].key, "serve.auth.secret");
        let text = serde_json::to_string(&got).unwrap();
        assert!(!text.contains("secret-value"), "{text}");
        assert_eq!(
            got[0].on_disk,
            Some(json!(crate::effective_config::REDACTED))
        );
    }

    #[test]
    fn a_password_in_a_url_is_masked_in_both_values() {
        let running = json!({"storage": {"url": "postgres://orb:hunter2@db/orb"}});
        let on_disk = json!({"storage": {"url": "postgres://orb:swordfish@db/orb"}});
        let text = serde_json::to_string(&changes(&running, &on_disk)).unwrap();
        assert!(text.contains("storage.url"), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains("swordfish"),
            "{text}"
        );
    }
}
