//! `/api/v1/requests`: list, show (as stored), status (refreshed from the provider), cancel.

use axum::Json;
use axum::extract::{Path, State};
use orb_core::ids::RequestId;
use orb_core::request::{RequestStatus, RequestType};
use orb_store::RequestFilter;

use super::AppState;
use super::extract::ApiQuery;
use super::model::{RequestDetail, RequestInfo, RequestListQuery};
use super::problem::Problem;
use orb_broker::BrokerError;

pub const DEFAULT_LIST_LIMIT: u32 = 50;
pub const MAX_LIST_LIMIT: u32 = 1000;

pub(super) fn parse_id(raw: &str) -> Result<RequestId, Problem> {
    RequestId::parse(raw).map_err(|e| Problem::malformed_request_id(raw, e))
}

pub(super) fn unknown(id: &RequestId) -> Problem {
    BrokerError::UnknownRequest(id.to_string()).into()
}

fn parse_filter(query: &RequestListQuery) -> Result<RequestFilter, Problem> {
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(Problem::bad_request(
            "invalid-limit",
            format!("limit={limit} is out of range; give 1 to {MAX_LIST_LIMIT}"),
        ));
    }
    let statuses = match query.status.as_deref() {
        None => vec![],
        Some(raw) => {
            let status = RequestStatus::ALL
                .into_iter()
                .find(|s| s.as_str() == raw)
                .ok_or_else(|| {
                    Problem::bad_request(
                        "invalid-status",
                        format!(
                            "status={raw:?} is not a request status; use one of {}",
                            RequestStatus::ALL.map(RequestStatus::as_str).join(", ")
                        ),
                    )
                })?;
            vec![status]
        }
    };
    let request_type = match query.request_type.as_deref() {
        None => None,
        Some("acquire") => Some(RequestType::Acquire),
        Some("return") => Some(RequestType::Return),
        Some(other) => {
            return Err(Problem::bad_request(
                "invalid-type",
                format!("type={other:?} is not a request type; use acquire or return"),
            ));
        }
    };
    Ok(RequestFilter {
        request_type,
        statuses,
        template_id: None,
        limit: Some(limit),
    })
}

/// Recent requests, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/requests",
    tag = "requests",
    params(RequestListQuery),
    responses(
        (status = 200, description = "The requests", body = Vec<RequestInfo>),
        (status = 400, description = "Bad limit, status or type", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_requests(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<RequestListQuery>,
) -> Result<Json<Vec<RequestInfo>>, Problem> {
    let filter = parse_filter(&query)?;
    let requests = state.broker().list_requests(&filter).await?;
    Ok(Json(requests.iter().map(RequestInfo::from).collect()))
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
        Some(view) => Ok(Json(RequestDetail::from(&view))),
        None => Err(unknown(&id)),
    }
}

/// Where a request stands now: the provider is asked for unfinished requests and the
/// result stored (the same as `orb requests status`).
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}/status",
    tag = "requests",
    params(("request_id" = String, Path, description = "req-… or ret-…")),
    responses(
        (status = 200, description = "The current state; `note` says when the provider could not be asked", body = RequestDetail),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_status(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<RequestDetail>, Problem> {
    let id = parse_id(&raw)?;
    match state.broker().refresh(&id).await? {
        Some(view) => Ok(Json(RequestDetail::from(&view))),
        None => Err(unknown(&id)),
    }
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
    Ok(Json(RequestDetail::from(&view)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn query(limit: Option<u32>, status: Option<&str>, kind: Option<&str>) -> RequestListQuery {
        RequestListQuery {
            limit,
            status: status.map(String::from),
            request_type: kind.map(String::from),
        }
    }

    #[rstest]
    #[case(query(Some(0), None, None), "invalid-limit")]
    #[case(query(Some(1001), None, None), "invalid-limit")]
    #[case(query(None, Some("running"), None), "invalid-status")]
    #[case(query(None, None, Some("acquires")), "invalid-type")]
    fn bad_list_filters_are_refused(#[case] q: RequestListQuery, #[case] slug: &str) {
        let problem = parse_filter(&q).unwrap_err();
        assert_eq!(problem.status, 400);
        assert_eq!(problem.problem_type, format!("urn:orb:problem:{slug}"));
    }

    #[test]
    fn a_good_filter_is_passed_through() {
        let filter = parse_filter(&query(Some(5), Some("in_progress"), Some("return"))).unwrap();
        assert_eq!(filter.limit, Some(5));
        assert_eq!(filter.statuses, vec![RequestStatus::InProgress]);
        assert_eq!(filter.request_type, Some(RequestType::Return));
    }
}
