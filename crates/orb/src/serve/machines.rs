//! `/api/v1/machines`: request (202 + request id, optional wait), return, list.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use orb_core::ids::RequestId;
use orb_store::MachineFilter;

use super::AppState;
use super::extract::{ApiJson, ApiQuery};
use super::metrics::{Outcome, handler_label};
use super::model::{MachineRequestBody, RequestDetail, ReturnBody, WaitQuery};
use super::problem::Problem;
use orb_broker::watch::Pace;
use orb_broker::{BrokerError, RequestView};

/// The longest `?wait=true` may hold a connection.
pub const MAX_WAIT_SECS: u64 = 600;

fn outcome_of(result: &Result<RequestView, BrokerError>) -> Outcome {
    match result {
        Ok(view) if view.request.status.is_unsuccessful() => Outcome::Failed,
        Ok(_) => Outcome::Accepted,
        Err(BrokerError::Provider(
            orb_core::provider::ProviderError::Rejected(_)
            | orb_core::provider::ProviderError::Conflict(_),
        )) => Outcome::Rejected,
        Err(BrokerError::Provider(_) | BrokerError::Store(_) | BrokerError::Lifecycle(_)) => {
            Outcome::Error
        }
        Err(_) => Outcome::Rejected,
    }
}

pub(super) fn wait_limit(state: &AppState, query: &WaitQuery) -> Result<Option<Duration>, Problem> {
    if !query.wait {
        if query.timeout.is_some() {
            return Err(Problem::bad_request(
                "timeout-without-wait",
                "timeout only applies with wait=true; add wait=true or drop timeout",
            ));
        }
        return Ok(None);
    }
    let secs = match query.timeout {
        Some(secs) if (1..=MAX_WAIT_SECS).contains(&secs) => secs,
        Some(secs) => {
            return Err(Problem::bad_request(
                "invalid-timeout",
                format!("timeout={secs} is out of range; give 1 to {MAX_WAIT_SECS} seconds"),
            ));
        }
        None => state.options().default_wait_secs.clamp(1, MAX_WAIT_SECS),
    };
    Ok(Some(Duration::from_secs(secs)))
}

/// Follows the request (the broker's watch) until it is terminal or `limit` has passed.
pub(super) async fn wait_for(
    state: &AppState,
    view: RequestView,
    limit: Duration,
) -> Result<RequestView, Problem> {
    let pace = Pace::up_to(state.options().poll_interval);
    state
        .broker()
        .wait_for(view, pace, limit, |_| {})
        .await
        .map_err(Problem::from)
}

fn accepted(state: &AppState, view: &RequestView) -> (StatusCode, Json<RequestDetail>) {
    // 200 once the outcome is known, 202 while the request is still running.
    let code = if view.request.status.is_terminal() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    (code, Json(state.detail(view)))
}

/// Asks for machines. Every limit is checked before anything is stored; the reply carries
/// the new request id. A provider failure after storing is reported in the request's status.
#[utoipa::path(
    post,
    path = "/api/v1/machines/request",
    tag = "machines",
    params(WaitQuery),
    request_body = MachineRequestBody,
    responses(
        (status = 202, description = "Stored and under way; follow it at /api/v1/requests/{id}", body = RequestDetail),
        (status = 200, description = "Finished (already failed, or finished within wait=true)", body = RequestDetail),
        (status = 400, description = "Malformed JSON or query", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown template, unusable template or count not allowed; nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Provider or storage unavailable; nothing stored", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_machines(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<MachineRequestBody>,
) -> Result<(StatusCode, Json<RequestDetail>), Problem> {
    let limit = wait_limit(&state, &query)?;
    state.templates_now();
    let broker = state.broker();
    let handler = handler_label(
        broker
            .catalog
            .current()
            .get(&body.template_id)
            .map(|t| t.api().as_str()),
    );
    let started = Instant::now();
    let result = broker.request_machines(&body.template_id, body.count).await;
    state
        .metrics()
        .record_acquire(handler, outcome_of(&result), started.elapsed());
    let mut view = result?;
    if let Some(limit) = limit {
        view = wait_for(&state, view, limit).await?;
    }
    Ok(accepted(&state, &view))
}

/// Gives machines back, by id or host name, or every live machine of an acquire request.
#[utoipa::path(
    post,
    path = "/api/v1/machines/return",
    tag = "machines",
    params(WaitQuery),
    request_body = ReturnBody,
    responses(
        (status = 202, description = "Return request stored and under way", body = RequestDetail),
        (status = 200, description = "Return already finished (e.g. every machine was already gone)", body = RequestDetail),
        (status = 400, description = "Malformed JSON or request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Machines already being returned", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Neither or both of machine_ids and request_id, or unknown machines; nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Provider or storage unavailable; nothing stored", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn return_machines(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<ReturnBody>,
) -> Result<(StatusCode, Json<RequestDetail>), Problem> {
    let limit = wait_limit(&state, &query)?;
    let broker = state.broker();
    for (field, given, served) in [
        (
            "providerName",
            &body.provider_name,
            &broker.settings.provider_name,
        ),
        (
            "providerType",
            &body.provider_type,
            &broker.settings.provider_type,
        ),
    ] {
        if let Some(given) = given.as_ref().filter(|g| *g != served) {
            return Err(Problem::unprocessable(
                "other-provider",
                "Another provider",
                format!(
                    "{field} is {given:?} but this server serves {served:?}; send the return \
                     to the server of that provider, or leave {field} out"
                ),
            ));
        }
    }
    let started = Instant::now();
    let selector = match (body.machine_ids, body.request_id, body.all_machines) {
        (None, None, true) => {
            let mut live = broker
                .list_machines(&MachineFilter {
                    live_only: true,
                    not_returning: true,
                    ..Default::default()
                })
                .await?;
            live.retain(|m| m.provider_name == broker.settings.provider_name);
            if live.is_empty() {
                return Err(Problem::unprocessable(
                    "nothing-to-return",
                    "Nothing to return",
                    "allMachines: there is no live machine that is not already being returned",
                ));
            }
            (Some(live.into_iter().map(|m| m.machine_id).collect()), None)
        }
        (ids, request_id, false) => (ids, request_id),
        (_, _, true) => {
            return Err(Problem::unprocessable(
                "return-selector",
                "Say what to return",
                "give exactly one of machine_ids, request_id and allMachines",
            ));
        }
    };
    let result = match selector {
        (Some(ids), None) if !ids.is_empty() => broker.return_named(&ids).await,
        (None, Some(raw)) => {
            let id = RequestId::parse(&raw).map_err(|e| Problem::malformed_request_id(&raw, e))?;
            broker.return_request_machines(&id).await
        }
        (Some(_), None) => {
            return Err(Problem::unprocessable(
                "nothing-to-return",
                "Nothing to return",
                "machine_ids is empty; name at least one machine, or pass request_id instead",
            ));
        }
        (Some(_), Some(_)) | (None, None) => {
            return Err(Problem::unprocessable(
                "return-selector",
                "Say what to return",
                "give exactly one of machine_ids (a list of machine ids or host names), request_id (an acquire request) and allMachines",
            ));
        }
    };
    let handler = match &result {
        Ok(view) => {
            let apis: std::collections::BTreeSet<&'static str> = view
                .machines
                .iter()
                .map(|m| handler_label(m.provider_api.map(orb_core::ProviderApi::as_str)))
                .collect();
            if apis.len() == 1 {
                apis.into_iter().next().unwrap_or("unknown")
            } else {
                "unknown"
            }
        }
        Err(_) => "unknown",
    };
    state
        .metrics()
        .record_release(handler, outcome_of(&result), started.elapsed());
    let mut view = result?;
    if let Some(limit) = limit {
        view = wait_for(&state, view, limit).await?;
    }
    Ok(accepted(&state, &view))
}
