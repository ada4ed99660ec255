//! `/api/v1/requests/{id}`: show (as stored), status (refreshed from the provider), cancel.
//! The list is in [`super::reference`].

use axum::Json;
use axum::extract::{Path, State};
use orb_core::ids::RequestId;

use super::AppState;
use super::extract::ApiQuery;
use super::machines::{wait_for, wait_limit};
use super::model::{RequestDetail, StatusQuery, WaitQuery};
use super::problem::Problem;
use orb_broker::BrokerError;

pub(super) fn parse_id(raw: &str) -> Result<RequestId, Problem> {
    RequestId::parse(raw).map_err(|e| Problem::malformed_request_id(raw, e))
}

pub(super) fn unknown(id: &RequestId) -> Problem {
    BrokerError::UnknownRequest(id.to_string()).into()
}

/// A request and its machines as last stored; does not ask the provider.
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}",
    tag = "requests",
    params(("request_id" = String, Path, description = "req-… or ret-…")),
    responses(
        (status = 200, description = "The stored request", body = RequestDetail),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn show_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<RequestDetail>, Problem> {
    let id = parse_id(&raw)?;
    match state.broker().stored_view(&id).await? {
        Some(view) => Ok(Json(state.detail(&view))),
        None => Err(unknown(&id)),
    }
}

/// Where a request stands now: the provider is asked for unfinished requests and the
/// result stored (the same as `orb requests status`).
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}/status",
    tag = "requests",
    params(("request_id" = String, Path, description = "req-… or ret-…"), StatusQuery),
    responses(
        (status = 200, description = "The current state (with wait=true: once finished or timed out); `note` says when the provider could not be asked", body = RequestDetail),
        (status = 400, description = "Not a request id, or a bad wait/timeout", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_status(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    ApiQuery(query): ApiQuery<StatusQuery>,
) -> Result<Json<RequestDetail>, Problem> {
    let id = parse_id(&raw)?;
    let limit = wait_limit(
        &state,
        &WaitQuery {
            wait: query.wait,
            timeout: query.timeout,
        },
    )?;
    let Some(mut view) = state.broker().refresh(&id).await? else {
        return Err(unknown(&id));
    };
    if let Some(limit) = limit {
        view = wait_for(&state, view, limit).await?;
    }
    Ok(Json(state.detail(&view)))
}

/// Cancels an unfinished acquire request and deletes what it created.
#[utoipa::path(
    post,
    path = "/api/v1/requests/{request_id}/cancel",
    tag = "requests",
    params(("request_id" = String, Path, description = "req-…")),
    responses(
        (status = 200, description = "Cancelled", body = RequestDetail),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already finished, or a return request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Provider unavailable; nothing changed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<RequestDetail>, Problem> {
    let id = parse_id(&raw)?;
    let view = state.broker().cancel(&id).await?;
    Ok(Json(state.detail(&view)))
}
