//! `POST /api/v1/templates/`, `PUT` and `DELETE /api/v1/templates/{template_id}`: the
//! reference broker's template writes, on orb's template file. The whole new file is parsed
//! and the written template checked exactly as loading and acquiring it would check it (the
//! operator-only `providerConfig` keys, the template's own problems, and on Kubernetes the
//! rendered bodies with the security audit and native-spec rules). Only then is the file
//! replaced, atomically; a refused write leaves it untouched. With no file yet, the first
//! write creates `<provider name>_templates.json` in the config directory.

use std::path::{Path, PathBuf};

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use orb_core::template::file::parse_template_file;
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::AppState;
use super::atomic_file::write_atomically;
use super::extract::ApiJson;
use super::problem::Problem;
use super::template_file::file_to_write;
use crate::template_checks::check_template;

/// One write at a time per server: each one reads the file, changes it and replaces it.
static WRITING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The reply to a template write, in the reference broker's shape plus orb's `warnings`
/// and `file`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateMutation {
    pub template_id: String,
    /// `created`, `updated` or `deleted`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
    /// Always empty here: a template with problems is refused (422) and nothing is written.
    pub validation_errors: Vec<String>,
    /// What the checks warn about (ignored fields, audit findings in warn mode).
    pub warnings: Vec<String>,
    /// The template file written.
    pub file: String,
}

/// The template file as written: its root (kept: `scheduler_type` and all) and its list.
struct FileDocument {
    path: PathBuf,
    root: Value,
}

impl FileDocument {
    fn read(state: &AppState) -> Result<Self, Problem> {
        let source = state.template_source().ok_or_else(|| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "config-unavailable",
                "No template file",
                "this server follows no template file, so templates cannot be written through it",
            )
        })?;
        let path = file_to_write(source);
        let root = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                file_problem(&path, &format!("is not JSON ({e}); fix or remove it first"))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({"templates": []}),
            Err(e) => return Err(file_problem(&path, &format!("cannot be read: {e}"))),
        };
        let document = Self { path, root };
        document.list()?;
        Ok(document)
    }

    fn list(&self) -> Result<&Vec<Value>, Problem> {
        match &self.root {
            Value::Array(list) => Ok(list),
            Value::Object(o) => match o.get("templates") {
                Some(Value::Array(list)) => Ok(list),
                _ => Err(self.not_a_template_file()),
            },
            _ => Err(self.not_a_template_file()),
        }
    }

    fn list_mut(&mut self) -> &mut Vec<Value> {
        match &mut self.root {
            Value::Array(list) => list,
            Value::Object(o) => match o.get_mut("templates") {
                Some(Value::Array(list)) => list,
                _ => unreachable!("checked by FileDocument::read"),
            },
            _ => unreachable!("checked by FileDocument::read"),
        }
    }

    fn not_a_template_file(&self) -> Problem {
        file_problem(
            &self.path,
            "is not a template file ({\"templates\": [...]}); fix it first",
        )
    }

    /// Where the template `id` is in the list.
    fn position(&self, id: &str) -> Result<Option<usize>, Problem> {
        Ok(self
            .list()?
            .iter()
            .position(|t| entry_id(t).as_deref() == Some(id)))
    }

    fn unknown(&self, id: &str) -> Problem {
        let known: Vec<String> = self
            .list()
            .map(|l| l.iter().filter_map(entry_id).collect())
            .unwrap_or_default();
        Problem::not_found(
            "unknown-template",
            "Unknown template",
            format!(
                "no template {id:?} in {}; known: {}",
                self.path.display(),
                if known.is_empty() {
                    "none (POST /api/v1/templates/ creates one)".to_string()
                } else {
                    known.join(", ")
                }
            ),
        )
    }
}

fn file_problem(path: &Path, what: &str) -> Problem {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "template-file",
        "The template file cannot be read",
        format!("the template file {} {what}", path.display()),
    )
}

/// A field's name without its spelling: `templateId`, `template_id` and `TemplateID` are one.
fn canonical(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The id of a raw template entry, in either spelling.
fn entry_id(entry: &Value) -> Option<String> {
    entry.as_object()?.iter().find_map(|(k, v)| {
        (canonical(k) == "templateid")
            .then(|| v.as_str().map(str::to_string))
            .flatten()
    })
}

/// `patch` over `entry`, field by field, a field in another spelling replaced rather than
/// doubled.
fn merged(entry: &Map<String, Value>, patch: &Map<String, Value>) -> Map<String, Value> {
    let mut out = entry.clone();
    for (key, value) in patch {
        out.retain(|k, _| canonical(k) != canonical(key));
        out.insert(key.clone(), value.clone());
    }
    out
}

fn body_object(body: Value) -> Result<Map<String, Value>, Problem> {
    match body {
        Value::Object(o) => Ok(o),
        other => Err(Problem::unprocessable(
            "invalid-body",
            "Invalid body",
            format!(
                "the body must be one template as a JSON object, e.g. {{\"templateId\": \"worker\", \
                 \"imageId\": \"busybox:1.36\", \"maxNumber\": 10}}; got {}",
                match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            ),
        )),
    }
}

/// Parses the changed file as loading does, checks the template `id` as loading and acquiring
/// would, and on success replaces the file. Returns the checks' warnings.
fn check_and_write(
    state: &AppState,
    document: &FileDocument,
    id: &str,
    at: usize,
) -> Result<Vec<String>, Problem> {
    let text = serde_json::to_string_pretty(&document.root).unwrap_or_default() + "\n";
    let label = document.path.display().to_string();
    let parsed = parse_template_file(&label, &text, Some(&state.options().template_defaults))
        .map_err(|e| refused(id, vec![e.to_string()]))?;
    // Entries parse in file order, so the written one is at its place in the list.
    let normalized = match parsed.entries.into_iter().nth(at) {
        Some(Ok(normalized)) => normalized,
        Some(Err(e)) => return Err(refused(id, vec![e.to_string()])),
        None => {
            return Err(refused(
                id,
                vec!["it is not in the file after the change".into()],
            ));
        }
    };
    let verdict = match state.template_checker() {
        Some(check) => check(&normalized.template),
        None => check_template(None, &normalized.template),
    };
    if !verdict.usable() {
        return Err(refused(id, verdict.problems));
    }
    let mut warnings = normalized.warnings;
    warnings.extend(verdict.warnings);
    write_atomically(&document.path, text.as_bytes()).map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "template-file",
            "The template file cannot be written",
            format!(
                "cannot write {}: {e}; check that orb may write its config directory",
                document.path.display()
            ),
        )
    })?;
    state.templates_written();
    Ok(warnings)
}

fn refused(id: &str, problems: Vec<String>) -> Problem {
    Problem::unprocessable(
        "invalid-template",
        "Template refused",
        format!(
            "template {id:?} is refused and nothing was written: {}",
            problems.join("; ")
        ),
    )
    .with_detail("validation_errors", json!(problems))
}

fn reply(id: &str, status: &str, warnings: Vec<String>, file: &Path) -> TemplateMutation {
    TemplateMutation {
        template_id: id.to_string(),
        status: status.to_string(),
        created: (status == "created").then_some(true),
        updated: (status == "updated").then_some(true),
        deleted: (status == "deleted").then_some(true),
        validation_errors: vec![],
        warnings,
        file: file.display().to_string(),
    }
}

/// Adds a template to the template file (the reference's `TemplateCreateRequest`: its
/// `template_id`, `name`, `description`, `provider_api`, `image_id`, `tags`, …, in
/// camelCase or snake_case; any field a template file entry takes).
#[utoipa::path(
    post,
    path = "/api/v1/templates/",
    tag = "templates",
    operation_id = "create_template_api_v1_templates__post",
    request_body(content = Object, description = "One template, as an entry of the template file"),
    responses(
        (status = 201, description = "Written to the template file", body = TemplateMutation),
        (status = 409, description = "A template with this id exists", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Refused by the checks; nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create_template(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> Result<(StatusCode, Json<TemplateMutation>), Problem> {
    let entry = body_object(body)?;
    let id = entry_id(&Value::Object(entry.clone())).ok_or_else(|| {
        Problem::unprocessable(
            "invalid-body",
            "Invalid body",
            "the template has no templateId (or template_id); give it one",
        )
    })?;
    let _writing = WRITING.lock().await;
    let mut document = FileDocument::read(&state)?;
    if document.position(&id)?.is_some() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "template-exists",
            "Template exists",
            format!(
                "template {id:?} is already in {}; change it with PUT /api/v1/templates/{id}",
                document.path.display()
            ),
        ));
    }
    document.list_mut().push(Value::Object(entry));
    let at = document.list()?.len() - 1;
    let warnings = check_and_write(&state, &document, &id, at)?;
    Ok((
        StatusCode::CREATED,
        Json(reply(&id, "created", warnings, &document.path)),
    ))
}

/// Changes a template of the template file: the fields sent replace the template's own.
#[utoipa::path(
    put,
    path = "/api/v1/templates/{template_id}",
    tag = "templates",
    operation_id = "update_template_api_v1_templates__template_id__put",
    params(("template_id" = String, Path, description = "The template id")),
    request_body(content = Object, description = "The fields to change, as in a template file entry"),
    responses(
        (status = 200, description = "Written to the template file", body = TemplateMutation),
        (status = 404, description = "No such template in the file", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Refused by the checks; nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update_template(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<TemplateMutation>, Problem> {
    let patch = body_object(body)?;
    if let Some(other) = entry_id(&Value::Object(patch.clone()))
        && other != id
    {
        return Err(Problem::unprocessable(
            "invalid-body",
            "Invalid body",
            format!(
                "the body names template {other:?} but the path {id:?}; a template's id cannot \
                 change (create {other:?} and delete {id:?} instead)"
            ),
        ));
    }
    let _writing = WRITING.lock().await;
    let mut document = FileDocument::read(&state)?;
    let at = document
        .position(&id)?
        .ok_or_else(|| document.unknown(&id))?;
    let list = document.list_mut();
    let current = list[at].as_object().cloned().unwrap_or_default();
    list[at] = Value::Object(merged(&current, &patch));
    let warnings = check_and_write(&state, &document, &id, at)?;
    Ok(Json(reply(&id, "updated", warnings, &document.path)))
}

/// Removes a template from the template file. Requests already made from it keep running.
#[utoipa::path(
    delete,
    path = "/api/v1/templates/{template_id}",
    tag = "templates",
    operation_id = "delete_template_api_v1_templates__template_id__delete",
    params(("template_id" = String, Path, description = "The template id")),
    responses(
        (status = 200, description = "Removed from the template file", body = TemplateMutation),
        (status = 404, description = "No such template in the file", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_template(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<TemplateMutation>, Problem> {
    let _writing = WRITING.lock().await;
    let mut document = FileDocument::read(&state)?;
    let at = document
        .position(&id)?
        .ok_or_else(|| document.unknown(&id))?;
    document.list_mut().remove(at);
    let text = serde_json::to_string_pretty(&document.root).unwrap_or_default() + "\n";
    write_atomically(&document.path, text.as_bytes()).map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "template-file",
            "The template file cannot be written",
            format!("cannot write {}: {e}", document.path.display()),
        )
    })?;
    state.templates_written();
    Ok(Json(reply(&id, "deleted", vec![], &document.path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_sent_in_another_spelling_replaces_the_one_written() {
        let entry = json!({"templateId": "w", "imageId": "a:1", "maxNumber": 2});
        let patch = json!({"image_id": "b:2"});
        let got = merged(entry.as_object().unwrap(), patch.as_object().unwrap());
        assert_eq!(
            Value::Object(got),
            json!({"templateId": "w", "image_id": "b:2", "maxNumber": 2})
        );
    }

    #[test]
    fn the_id_is_found_in_either_spelling() {
        assert_eq!(entry_id(&json!({"template_id": "x"})).as_deref(), Some("x"));
        assert_eq!(entry_id(&json!({"templateId": "y"})).as_deref(), Some("y"));
        assert_eq!(entry_id(&json!({"name": "z"})), None);
    }
}
