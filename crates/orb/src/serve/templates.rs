//! `/api/v1/templates`: list, show, validate.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use orb_core::template::Template;
use orb_core::template::file::parse_template_file;
use serde_json::Value;

use super::AppState;
use super::extract::ApiJson;
use super::model::{InvalidTemplate, TemplateInfo, ValidationReport};
use super::problem::Problem;
use super::reference::{TemplateDetail, TemplateItem};
use crate::template_checks::{PREVIEW_NOTE, check_template};

/// Runs `work` (rendering templates: CPU-bound, bounded by the provider's render limits) on
/// tokio's blocking pool, so the async workers keep answering other calls meanwhile.
pub(super) async fn off_the_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "template-check",
            "A template check failed",
            format!("checking the templates stopped: {e}; see the server log"),
        )
    })
}

/// The problems of each template, checked off the async workers.
async fn problems_of(
    state: &AppState,
    templates: Vec<Template>,
) -> Result<Vec<Vec<String>>, Problem> {
    let checker = state.template_checker().cloned();
    off_the_workers(move || {
        templates
            .iter()
            .map(|t| match (&checker, t.problems().is_empty()) {
                (Some(check), true) => check(t).problems,
                _ => t.problems().iter().map(ToString::to_string).collect(),
            })
            .collect()
    })
    .await
}

async fn describe(state: &AppState, templates: &[&Template]) -> Result<Vec<TemplateInfo>, Problem> {
    let listings = state.broker().templates_with_usage(templates).await?;
    let all_problems =
        problems_of(state, listings.iter().map(|l| l.template.clone()).collect()).await?;
    Ok(listings
        .into_iter()
        .zip(all_problems)
        .map(|(l, problems)| {
            let t = &l.template;
            TemplateInfo {
                template_id: t.template_id.clone(),
                provider_api: t.api().to_string(),
                max_machines: l.max_machines,
                available_number: l.available,
                problems,
                template: serde_json::to_value(t).unwrap_or(Value::Null),
            }
        })
        .collect())
}

/// Every template of the file, described; refused when the file cannot be read.
pub(super) async fn list(state: &AppState) -> Result<Vec<TemplateInfo>, Problem> {
    if let Some(failure) = state.templates_now().failure {
        return Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "template-file",
            "The template file cannot be read",
            failure.message,
        ));
    }
    let catalog = state.broker().catalog.current();
    let all: Vec<&Template> = catalog.templates.iter().collect();
    describe(state, &all).await
}

/// One template.
#[utoipa::path(
    get,
    path = "/api/v1/templates/{template_id}",
    tag = "templates",
    params(("template_id" = String, Path, description = "The template id")),
    responses(
        (status = 200, description = "The template: orb's fields and the reference's envelope", body = TemplateDetail),
        (status = 404, description = "No such template", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn show_template(
    State(state): State<AppState>,
    Path(template_id): Path<String>,
) -> Result<Json<TemplateDetail>, Problem> {
    state.templates_now();
    let catalog = state.broker().catalog.current();
    // Not served either way; the detail says whether it is undefined or was refused (and why).
    let template = catalog
        .lookup(&template_id)
        .map_err(|e| Problem::not_found("unknown-template", "Unknown template", e.to_string()))?;
    let info = describe(&state, &[template]).await?.remove(0);
    let item = TemplateItem::of(info.clone(), template, &state.broker().settings);
    Ok(Json(TemplateDetail {
        info,
        templates: vec![item],
        total_count: 1,
        next_cursor: None,
        success: true,
        message: format!("template {template_id}"),
    }))
}

/// Checks a template document (the same JSON as a templates file) without storing it.
#[utoipa::path(
    post,
    path = "/api/v1/templates/validate",
    tag = "templates",
    request_body(content = Object, description = "A templates document: {\"templates\": [...]}"),
    responses(
        (status = 200, description = "The verdict for each template; `ok` says whether all are usable", body = ValidationReport),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a templates document", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn validate_templates(
    State(state): State<AppState>,
    ApiJson(document): ApiJson<Value>,
) -> Result<Json<ValidationReport>, Problem> {
    let text = document.to_string();
    let parsed = parse_template_file(
        "request body",
        &text,
        Some(&state.options().template_defaults),
    )
    .map_err(|e| {
        Problem::unprocessable(
            "invalid-template-document",
            "Not a templates document",
            e.to_string(),
        )
    })?;
    let checker = state.template_checker().cloned();
    let entries = off_the_workers(move || {
        parsed
            .entries
            .into_iter()
            .map(|entry| {
                entry.map(|normalized| {
                    // The same check as `orb templates validate`: load-time refusal, the
                    // template's problems, then the provider's acquire planning and audit.
                    let verdict = match &checker {
                        Some(check) => check(&normalized.template),
                        None => check_template(None, &normalized.template),
                    };
                    (normalized, verdict)
                })
            })
            .collect::<Vec<_>>()
    })
    .await?;
    let mut valid = Vec::new();
    let mut invalid = Vec::new();
    let mut warnings = Vec::new();
    for entry in entries {
        match entry {
            Ok((normalized, verdict)) => {
                let template = normalized.template;
                warnings.extend(
                    normalized
                        .warnings
                        .into_iter()
                        .map(|w| format!("template {:?}: {w}", template.template_id)),
                );
                warnings.extend(
                    verdict
                        .warnings
                        .iter()
                        .map(|w| format!("template {:?}: {w}", template.template_id)),
                );
                if verdict.usable() {
                    valid.push(template.template_id);
                } else {
                    invalid.push(InvalidTemplate {
                        template_id: Some(template.template_id),
                        problems: verdict.problems,
                    });
                }
            }
            Err(e) => invalid.push(InvalidTemplate {
                template_id: None,
                problems: vec![e.to_string()],
            }),
        }
    }
    Ok(Json(ValidationReport {
        ok: invalid.is_empty(),
        valid,
        invalid,
        warnings,
        note: PREVIEW_NOTE.to_string(),
    }))
}
