//! orb's additions for looking closer, which the console's drawers use: a machine's pod as
//! the apiserver has it now (conditions and events, `kubectl describe pod` in JSON), and
//! the exact bodies an acquire of a template would send (`orb templates render`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::ApiQuery;
use super::problem::Problem;
use super::reference::find_machine;
use super::templates::off_the_workers;
use crate::template_checks::{Rendering, render_bodies};

fn no_kubernetes(what: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_IMPLEMENTED,
        "not-kubernetes",
        "Not a Kubernetes provider",
        format!("{what} needs the Kubernetes provider; this server's provider has no pods"),
    )
}

fn kubernetes_failed(what: &str, e: impl std::fmt::Display) -> Problem {
    Problem::new(
        StatusCode::BAD_GATEWAY,
        "kubernetes-unavailable",
        "The apiserver did not answer",
        format!("cannot read {what}: {e}; /readyz shows whether the apiserver answers"),
    )
}

/// A machine's pod: phase, node, conditions and events.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MachinePod {
    pub machine_id: String,
    pub namespace: String,
    pub pod_name: String,
    /// False when the pod is gone (its events are listed until they expire).
    pub found: bool,
    pub phase: Option<String>,
    pub node_name: Option<String>,
    /// `[{type, status, reason, message, last_transition_time}]`
    #[schema(value_type = Vec<Object>)]
    pub conditions: Value,
    /// `[{type, reason, message, count, first_seen, last_seen}]`, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub events: Value,
}

/// The pod of one machine as the apiserver has it now, with its conditions and events.
#[utoipa::path(
    get,
    path = "/api/v1/machines/{machine_id}/pod",
    tag = "machines",
    params(("machine_id" = String, Path, description = "The machine id or host name")),
    responses(
        (status = 200, description = "The machine's pod", body = MachinePod),
        (status = 404, description = "No such machine", body = Problem, content_type = "application/problem+json"),
        (status = 501, description = "The provider is not Kubernetes", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "The apiserver did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn machine_pod(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<MachinePod>, Problem> {
    let machine = find_machine(&state, &key).await?;
    let provider = state
        .kubernetes()
        .ok_or_else(|| no_kubernetes("a machine's pod"))?;
    // The pod is where the provider last saw it; a machine not yet observed is in the
    // provider's namespace.
    let namespace = machine
        .provider_data
        .get("namespace")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| provider.config().namespace.clone())
        .unwrap_or_else(|| "default".to_string());
    let description =
        orb_k8s::pod_description::read_pod_description(provider, &namespace, &machine.name)
            .await
            .map_err(|e| kubernetes_failed(&format!("pod {namespace}/{}", machine.name), e))?;
    Ok(Json(MachinePod {
        machine_id: machine.machine_id,
        namespace: description.namespace,
        pod_name: description.pod_name,
        found: description.found,
        phase: description.phase,
        node_name: description.node_name,
        conditions: serde_json::to_value(description.conditions).unwrap_or_default(),
        events: serde_json::to_value(description.events).unwrap_or_default(),
    }))
}

/// How many machines the preview is for.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RenderQuery {
    /// Machines in the previewed acquire, 1 to 100 (default 1).
    pub count: Option<u32>,
}

/// What an acquire of the template would send.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RenderedTemplate {
    pub template_id: String,
    pub count: u32,
    /// False when the template cannot be rendered; `problems` says why.
    pub ok: bool,
    /// Which code built the bodies: the typed builders or the native spec.
    pub path: Option<String>,
    /// The Kubernetes objects, in the order an acquire creates them.
    #[schema(value_type = Vec<Object>)]
    pub bodies: Vec<Value>,
    pub warnings: Vec<String>,
    pub problems: Vec<String>,
    /// The fresh preview request id the names are built from (see `note`).
    pub request_id: String,
    /// Says that `request_id` is a preview: a real acquire gets its own id and names.
    pub note: String,
}

const MAX_PREVIEW: u32 = 100;

/// The exact Kubernetes bodies an acquire of `count` machines of the template would send,
/// built and audited by the provider's own acquire planning (as `orb templates render`).
#[utoipa::path(
    get,
    path = "/api/v1/templates/{template_id}/render",
    tag = "templates",
    params(("template_id" = String, Path, description = "The template id"), RenderQuery),
    responses(
        (status = 200, description = "The bodies, or the problems that stop them (`ok`)", body = RenderedTemplate),
        (status = 400, description = "A count out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such template", body = Problem, content_type = "application/problem+json"),
        (status = 501, description = "The provider is not Kubernetes", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn render_template(
    State(state): State<AppState>,
    Path(template_id): Path<String>,
    ApiQuery(query): ApiQuery<RenderQuery>,
) -> Result<Json<RenderedTemplate>, Problem> {
    let count = query.count.unwrap_or(1);
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(Problem::bad_request(
            "bad-count",
            format!("count={count} is out of range; preview 1 to {MAX_PREVIEW} machines"),
        ));
    }
    state.templates_now();
    let catalog = state.broker().catalog.current();
    let template = catalog
        .lookup(&template_id)
        .map_err(|e| Problem::not_found("unknown-template", "Unknown template", e.to_string()))?;
    let provider = state
        .kubernetes()
        .ok_or_else(|| no_kubernetes("rendering a template"))?;
    let request_id = orb_k8s::native_spec::preview_request_id();
    let mut rendered = RenderedTemplate {
        note: format!(
            "{request_id} is a fresh preview request id: a real acquire gets its own id, and \
             the names and request-id labels built from it"
        ),
        template_id: template_id.clone(),
        count,
        ok: false,
        path: None,
        bodies: Vec::new(),
        warnings: Vec::new(),
        problems: template
            .problems()
            .iter()
            .map(ToString::to_string)
            .collect(),
        request_id,
    };
    if !rendered.problems.is_empty() {
        return Ok(Json(rendered));
    }
    let (provider, template) = (Arc::clone(provider), template.clone());
    let id = rendered.request_id.clone();
    let rendering =
        off_the_workers(move || render_bodies(&provider, &template, count, &id)).await?;
    match rendering {
        Rendering::Ok(planned) => {
            rendered.ok = true;
            rendered.path = Some(planned.path.as_str().to_string());
            rendered.bodies = planned.bodies;
            rendered.warnings = planned.warnings;
        }
        Rendering::Fails { problems, warnings } => {
            rendered.problems = problems;
            rendered.warnings = warnings;
        }
    }
    Ok(Json(rendered))
}
