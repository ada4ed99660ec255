//! Persisted configuration: one value of config.json set by its dotted place
//! (`request.default_timeout`, `providers.0.config.namespace`), for `PUT /api/v1/config/{key}`
//! and `orb config set`. The changed document gets the checks `orb serve` makes at start; a
//! change that brings a problem the file did not have is refused and nothing is written, else
//! the file is replaced atomically. A running server keeps the configuration it started with:
//! the reply lists what differs from it, which takes effect at the next start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::AppState;
use super::atomic_file::write_atomically;
use super::config::{configured, server_env};
use super::extract::ApiJson;
use super::problem::Problem;
use super::reload::{ConfigChange, changes, running_document};
use crate::effective_config::{ConfigProblem, EffectiveConfig, check_document, redact_secrets};

/// One config write at a time per server.
static WRITING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A value set in config.json.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueSet {
    pub file: PathBuf,
    /// The document before and after (unmasked: callers mask what they show).
    pub before: Value,
    pub after: Value,
    /// False when the file already had this value (nothing was written).
    pub written: bool,
    /// What the checks warn about in the new document.
    pub warnings: Vec<String>,
}

/// Why a value was not set; nothing was written.
#[derive(Debug, Clone, PartialEq)]
pub enum SetRefusal {
    /// The key is not a place in the document (a list index out of range, a value in the way).
    Key(String),
    /// The file cannot be read or is not a JSON object.
    File(String),
    /// With the value, orb would not start: the problems the change brings.
    WouldNotStart(Vec<ConfigProblem>),
}

impl std::fmt::Display for SetRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Key(why) | Self::File(why) => f.write_str(why),
            Self::WouldNotStart(problems) => write!(
                f,
                "orb would not start with this value, so nothing was written: {}",
                problems
                    .iter()
                    .map(|p| format!("{}: {}", p.field, p.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

/// `value` parsed as JSON when it is JSON (`600`, `true`, `{"a": 1}`), else the text itself.
pub fn value_from_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Sets `key` (dots between the places, list items by position) to `value` in `document`.
/// Missing objects on the way are created; a list item must exist.
pub fn set_in(document: &mut Value, key: &str, value: Value) -> Result<(), SetRefusal> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(SetRefusal::Key(format!(
            "{key:?} is not a key; write the place in config.json with dots, e.g. \
             request.default_timeout or providers.0.config.namespace"
        )));
    }
    let mut place = document;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let here = parts[..i].join(".");
        place = match place {
            Value::Object(map) => {
                if last {
                    map.insert(part.to_string(), value);
                    return Ok(());
                }
                map.entry(part.to_string())
                    .or_insert_with(|| Value::Object(Map::new()))
            }
            Value::Array(items) => {
                let index: usize = part.parse().map_err(|_| {
                    SetRefusal::Key(format!(
                        "{here:?} is a list in config.json; name an item by its position \
                         ({here}.0), not {part:?}"
                    ))
                })?;
                let len = items.len();
                let item = items.get_mut(index).ok_or_else(|| {
                    SetRefusal::Key(format!(
                        "{here:?} has {len} items, so there is no item {index}; positions \
                         start at 0"
                    ))
                })?;
                if last {
                    *item = value;
                    return Ok(());
                }
                item
            }
            other => {
                return Err(SetRefusal::Key(format!(
                    "{here:?} is {other} in config.json, not a section, so it has no {part:?}; \
                     set {here:?} itself"
                )));
            }
        };
    }
    unreachable!("a key has at least one part")
}

/// The value at `key`, if there is one.
pub fn get_in<'a>(document: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.')
        .try_fold(document, |place, part| match place {
            Value::Object(map) => map.get(part),
            Value::Array(items) => items.get(part.parse::<usize>().ok()?),
            _ => None,
        })
}

/// [`get_in`] of the document with its secrets masked.
pub fn shown_in(document: &Value, key: &str) -> Option<Value> {
    let mut masked = document.clone();
    redact_secrets(&mut masked);
    get_in(&masked, key).cloned()
}

/// Sets `key` to `value` in the config file at `file`, checked as at start with the
/// `ORB_K8S_*` variables of `env` over the provider settings.
pub fn set_config_value(
    file: &Path,
    key: &str,
    value: Value,
    env: &BTreeMap<String, String>,
) -> Result<ValueSet, SetRefusal> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        SetRefusal::File(format!(
            "cannot read {}: {e}; `orb init` writes a config file, `--config` names another",
            file.display()
        ))
    })?;
    let before: Value = serde_json::from_str(&text).map_err(|e| {
        SetRefusal::File(format!(
            "{} is not JSON (line {}, column {}); fix it first",
            file.display(),
            e.line(),
            e.column()
        ))
    })?;
    if !before.is_object() {
        return Err(SetRefusal::File(format!(
            "{} is not a JSON object; fix it first",
            file.display()
        )));
    }
    let mut after = before.clone();
    set_in(&mut after, key, value)?;
    let was = check_document(&before, file, env);
    let now = check_document(&after, file, env);
    // A problem the file already had (a provider orb cannot serve, which it starts with
    // anyway) is not this change's; a new one is.
    let brought: Vec<ConfigProblem> = now
        .problems
        .into_iter()
        .filter(|p| !was.problems.contains(p))
        .collect();
    if !brought.is_empty() {
        return Err(SetRefusal::WouldNotStart(brought));
    }
    let written = after != before;
    if written {
        let mut text = serde_json::to_string_pretty(&after).unwrap_or_default();
        text.push('\n');
        write_atomically(file, text.as_bytes()).map_err(|e| {
            SetRefusal::File(format!(
                "cannot write {}: {e}; check that orb may write it",
                file.display()
            ))
        })?;
    }
    Ok(ValueSet {
        file: file.to_path_buf(),
        before,
        after,
        written,
        warnings: now.warnings,
    })
}

/// The body of `PUT /api/v1/config/{key}`, as the reference broker takes it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetValueBody {
    /// The new value: any JSON.
    pub value: Value,
}

/// The reply of `PUT /api/v1/config/{key}` and `POST /api/v1/config/save`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConfigPersisted {
    /// The key set (absent for save).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its value now, secrets masked (absent for save).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Always true: the value is in the config file (every PUT writes it at once).
    pub persisted: bool,
    /// The config file.
    pub path: String,
    /// True when the file now differs from what the server runs with.
    pub restart_required: bool,
    /// Every place where the file differs from what the server runs with (secrets masked);
    /// each takes effect when the server is restarted.
    pub changes: Vec<ConfigChange>,
    pub warnings: Vec<String>,
    /// The same in one sentence.
    pub note: String,
}

fn restart_note(file: &Path, changes: &[ConfigChange]) -> String {
    if changes.is_empty() {
        return format!(
            "{} matches what the server runs with; nothing to restart",
            file.display()
        );
    }
    let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
    format!(
        "written to {}; the server keeps running with the configuration it started with, and \
         {} takes effect when it is restarted (orb server stop, then orb server start; in a \
         cluster, a rollout restart): {}",
        file.display(),
        if changes.len() == 1 {
            "this change"
        } else {
            "these changes"
        },
        keys.join(", ")
    )
}

fn persisted(
    running: &EffectiveConfig,
    on_disk: &Value,
    key: Option<(&str, Option<Value>)>,
    warnings: Vec<String>,
) -> ConfigPersisted {
    let file = &running.dirs.config_file.path;
    let changes = changes(&running_document(running), on_disk);
    ConfigPersisted {
        key: key.as_ref().map(|(k, _)| k.to_string()),
        value: key.and_then(|(_, v)| v),
        persisted: true,
        path: file.display().to_string(),
        restart_required: !changes.is_empty(),
        note: restart_note(file, &changes),
        changes,
        warnings,
    }
}

/// Sets one value of config.json by its place (`request.default_timeout`,
/// `providers.0.config.namespace`) and writes the file atomically, after the checks `orb serve`
/// makes at start: a value it would not start with is refused and nothing is written. The
/// server runs on with what it started with; the reply says what takes a restart.
#[utoipa::path(
    put,
    path = "/api/v1/config/{key}",
    tag = "config",
    operation_id = "set_config_value_api_v1_config__key__put",
    params(("key" = String, Path, description = "The place in config.json, dotted; list items by position: providers.0.config.namespace")),
    request_body(content = SetValueBody, description = "{\"value\": <any JSON>}"),
    responses(
        (status = 200, description = "Written to the config file; what takes a restart", body = ConfigPersisted),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a place in the file, or orb would not start with the value (`error.details.problems`); nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn set_config(
    State(state): State<AppState>,
    UrlPath(key): UrlPath<String>,
    ApiJson(body): ApiJson<SetValueBody>,
) -> Result<Json<ConfigPersisted>, Problem> {
    let running = configured(&state)?.clone();
    let file = running.dirs.config_file.path.clone();
    let _writing = WRITING.lock().await;
    let set = set_config_value(&file, &key, body.value, &server_env()).map_err(refusal)?;
    let shown = shown_in(&set.after, &key);
    Ok(Json(persisted(
        &running,
        &set.after,
        Some((&key, shown)),
        set.warnings,
    )))
}

/// The body of `POST /api/v1/config/save`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveBody {
    /// Where to save; only the server's own config file is accepted.
    pub path: Option<String>,
}

/// The reference broker's "persist the values set": here every `PUT /api/v1/config/{key}` is
/// written at once, so this checks the file as at start and says what differs from what the
/// server runs with. Nothing is written.
#[utoipa::path(
    post,
    path = "/api/v1/config/save",
    tag = "config",
    operation_id = "save_config_api_v1_config_save_post",
    request_body(content = SaveBody, description = "{\"path\": …} (optional; only the config file itself)"),
    responses(
        (status = 200, description = "The file holds every value set; what takes a restart", body = ConfigPersisted),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Another path, or a file orb would not start with (`error.details.problems`)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn save_config(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<ConfigPersisted>, Problem> {
    let running = configured(&state)?.clone();
    let file = running.dirs.config_file.path.clone();
    let body: SaveBody = if body.iter().all(u8::is_ascii_whitespace) {
        SaveBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            Problem::unprocessable(
                "invalid-body",
                "Invalid body",
                format!("the body must be {{\"path\": ...}} or nothing: {e}"),
            )
        })?
    };
    if let Some(other) = body.path
        && Path::new(&other) != file
    {
        return Err(Problem::unprocessable(
            "save-path",
            "Cannot save elsewhere",
            format!(
                "the configuration is saved in the server's config file {} only, not {other:?}; \
                 send no path (copy the file to keep another version)",
                file.display()
            ),
        ));
    }
    let _writing = WRITING.lock().await;
    let on_disk: Value = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| {
            refusal(SetRefusal::File(format!(
                "{} cannot be read as JSON; restore it",
                file.display()
            )))
        })?;
    let check = check_document(&on_disk, &file, &server_env());
    let started_with = check_document(&running_document(&running), &file, &server_env());
    let brought: Vec<ConfigProblem> = check
        .problems
        .into_iter()
        .filter(|p| !started_with.problems.contains(p))
        .collect();
    if !brought.is_empty() {
        return Err(refusal(SetRefusal::WouldNotStart(brought)));
    }
    Ok(Json(persisted(&running, &on_disk, None, check.warnings)))
}

fn refusal(refusal: SetRefusal) -> Problem {
    let problems = match &refusal {
        SetRefusal::WouldNotStart(problems) => problems.clone(),
        _ => vec![],
    };
    let slug = match refusal {
        SetRefusal::Key(_) => "invalid-config-key",
        _ => "config-invalid",
    };
    Problem::unprocessable(slug, "Configuration not written", refusal.to_string()).with_detail(
        "problems",
        serde_json::to_value(&problems).unwrap_or(Value::Null),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn k8s_config() -> Value {
        json!({"providers": [{"name": "kube", "type": "k8s", "config": {"namespace": "batch"}}],
               "request": {"default_timeout": 300}})
    }

    fn file_with(document: &Value) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, document.to_string()).unwrap();
        (dir, path)
    }

    #[test]
    fn places_are_set_by_their_dotted_key_creating_sections_on_the_way() {
        let mut doc = k8s_config();
        set_in(&mut doc, "providers.0.config.namespace", json!("gpu")).unwrap();
        set_in(&mut doc, "logging.level", json!("DEBUG")).unwrap();
        assert_eq!(doc["providers"][0]["config"]["namespace"], "gpu");
        assert_eq!(doc["logging"]["level"], "DEBUG");
    }

    #[test]
    fn a_key_that_is_no_place_is_refused_with_the_fix() {
        let mut doc = k8s_config();
        for (key, needle) in [
            ("providers.3.config", "no item 3"),
            ("providers.first", "by its position"),
            ("request.default_timeout.x", "not a section"),
            ("request..x", "not a key"),
        ] {
            let got = set_in(&mut doc, key, json!(1)).unwrap_err();
            assert!(got.to_string().contains(needle), "{key}: {got}");
        }
        assert_eq!(doc, k8s_config(), "nothing changed");
    }

    #[test]
    fn a_value_orb_would_not_start_with_is_refused_and_the_file_is_untouched() {
        let (_dir, path) = file_with(&k8s_config());
        let before = std::fs::read(&path).unwrap();
        let got = set_config_value(
            &path,
            "providers.0.config.namespace",
            json!("Not_A_Namespace"),
            &BTreeMap::new(),
        )
        .unwrap_err();
        let SetRefusal::WouldNotStart(problems) = &got else {
            panic!("{got:?}")
        };
        assert_eq!(problems[0].field, "provider.namespace", "{problems:?}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn a_good_value_is_written_and_a_problem_the_file_had_does_not_block_it() {
        let aws = json!({"provider": {"providers": [{"name": "aws", "type": "aws"}]}});
        let (_dir, path) = file_with(&aws);
        let set =
            set_config_value(&path, "logging.level", json!("INFO"), &BTreeMap::new()).unwrap();
        assert!(set.written);
        let on_disk: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(on_disk["logging"]["level"], "INFO");
        assert_eq!(on_disk["provider"], aws["provider"]);
    }

    #[test]
    fn values_are_json_when_they_parse_and_text_otherwise() {
        assert_eq!(value_from_text("600"), json!(600));
        assert_eq!(value_from_text("true"), json!(true));
        assert_eq!(value_from_text("batch"), json!("batch"));
    }
}
