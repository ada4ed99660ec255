//! Forgetting records that are over: `DELETE /api/v1/machines/{id}` (purge one machine's
//! record), `POST /api/v1/requests/{id}/purge` (a finished request and its machines) and
//! `POST /api/v1/admin/database/cleanup` (every finished request older than a cutoff). The
//! broker decides what may go; these handlers read the input and shape the reply.

use axum::Json;
use axum::extract::{Path, State};
use jiff::SignedDuration;
use orb_broker::purge::CleanupAsk;
use orb_core::request::RequestStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{ApiJson, ApiQuery};
use super::problem::Problem;
use super::requests::parse_id;

/// At most this many request ids are listed in a cleanup reply (the counts are whole).
pub const IDS_SHOWN: usize = 1000;
/// At most this many kept requests are listed with their reason.
pub const KEPT_SHOWN: usize = 20;

/// `?purge=` of `DELETE /api/v1/machines/{machine_id}`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PurgeMachineQuery {
    /// `true` or absent: remove orb's record of the machine. `false` is refused: this route
    /// never gives a machine back (that is `POST /api/v1/machines/return`).
    pub purge: Option<bool>,
}

/// What a purge removed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PurgeReply {
    /// The machine purged (machine purge), or null.
    pub machine_id: Option<String>,
    /// The request purged (request purge), or null.
    pub request_id: Option<String>,
    /// Every machine record removed.
    pub machine_ids: Vec<String>,
    pub purged: bool,
    pub message: String,
}

/// Removes orb's record of a machine that can no longer exist in the cluster.
#[utoipa::path(
    delete,
    path = "/api/v1/machines/{machine_id}",
    tag = "machines",
    operation_id = "purge_machine_api_v1_machines__machine_id__delete",
    params(("machine_id" = String, Path, description = "The machine id or host name"), PurgeMachineQuery),
    responses(
        (status = 200, description = "The record was removed", body = PurgeReply),
        (status = 400, description = "purge=false: this route does not return machines", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such machine", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The machine may still exist, or an unfinished request holds it; nothing was removed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn purge_machine(
    State(state): State<AppState>,
    Path(key): Path<String>,
    ApiQuery(query): ApiQuery<PurgeMachineQuery>,
) -> Result<Json<PurgeReply>, Problem> {
    if query.purge == Some(false) {
        return Err(Problem::bad_request(
            "purge-not-asked",
            format!(
                "DELETE /api/v1/machines/{key} only removes orb's record of a machine that is \
                 gone, and purge=false asks for nothing; to give the machine back (delete its \
                 pod), POST /api/v1/machines/return with {{\"machine_ids\": [\"{key}\"]}}"
            ),
        ));
    }
    let machine = state.broker().purge_machine(&key).await?;
    Ok(Json(PurgeReply {
        message: format!("purged the record of machine {}", machine.machine_id),
        machine_ids: vec![machine.machine_id.clone()],
        machine_id: Some(machine.machine_id),
        request_id: None,
        purged: true,
    }))
}

/// Removes a finished request's record and the records of its machines.
#[utoipa::path(
    post,
    path = "/api/v1/requests/{request_id}/purge",
    tag = "requests",
    operation_id = "purge_request_api_v1_requests__request_id__purge_post",
    params(("request_id" = String, Path, description = "req-… or ret-…")),
    responses(
        (status = 200, description = "The request and its machine records were removed", body = PurgeReply),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Unfinished, a machine may still exist, or an unfinished request holds one; nothing was removed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn purge_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<PurgeReply>, Problem> {
    let id = parse_id(&raw)?;
    let purged = state.broker().purge_request(&id).await?;
    Ok(Json(PurgeReply {
        message: format!(
            "purged request {id} and {} machine record{}",
            purged.machine_ids.len(),
            if purged.machine_ids.len() == 1 {
                ""
            } else {
                "s"
            }
        ),
        machine_id: None,
        request_id: Some(id.to_string()),
        machine_ids: purged.machine_ids,
        purged: true,
    }))
}

/// The body of `POST /api/v1/admin/database/cleanup`. Exactly one of `older_than_days` and
/// `older_than_seconds` is required.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CleanupBody {
    /// Remove requests that finished more than this many days ago (0 to 36525).
    #[serde(alias = "olderThanDays")]
    pub older_than_days: Option<u32>,
    /// The same in seconds, for finer cutoffs.
    #[serde(alias = "olderThanSeconds")]
    pub older_than_seconds: Option<u64>,
    /// Only requests in these finished statuses (`complete`, `partial`, `failed`,
    /// `cancelled`, `timeout`); default: all of them.
    #[serde(alias = "requestStatuses")]
    pub request_statuses: Option<Vec<String>>,
    /// `true`: report what would be removed and remove nothing.
    #[serde(alias = "dryRun")]
    pub dry_run: Option<bool>,
    /// Accepted for the reference's clients; `false` is refused, since a request's machine
    /// records always go with it.
    #[serde(alias = "includeMachines")]
    pub include_machines: Option<bool>,
    /// Accepted for the reference's clients. Not needed; when sent, it must be true
    /// (`true`, `"true"`, `"yes"`), or nothing is done.
    #[schema(value_type = Option<Object>)]
    pub confirm: Option<Value>,
}

/// One request a cleanup had to keep.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeptRequest {
    pub request_id: String,
    pub reason: String,
}

/// What a cleanup removed, or would remove in a dry run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CleanupReply {
    pub dry_run: bool,
    /// Requests that finished before this time (RFC 3339) were considered.
    pub cutoff: String,
    pub requests_removed: usize,
    pub machines_removed: usize,
    /// The requests removed (the first 1000).
    pub request_ids: Vec<String>,
    /// Old enough but kept: how many, and the first 20 with why.
    pub requests_kept: usize,
    pub kept: Vec<KeptRequest>,
    pub message: String,
}

impl CleanupBody {
    fn ask(&self) -> Result<CleanupAsk, Problem> {
        let invalid = |detail: String| {
            Problem::unprocessable("invalid-cleanup", "Cleanup not possible as asked", detail)
        };
        if let Some(confirm) = &self.confirm {
            let yes = match confirm {
                Value::Bool(b) => *b,
                Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes"),
                _ => false,
            };
            if !yes {
                return Err(invalid(format!(
                    "confirm is {confirm}, so nothing was removed; send \"confirm\": true or \
                     leave it out (\"dry_run\": true shows what would go)"
                )));
            }
        }
        if self.include_machines == Some(false) {
            return Err(invalid(
                "include_machines=false cannot be honoured: a request's machine records are \
                 removed with it; leave include_machines out"
                    .into(),
            ));
        }
        let older_than = match (self.older_than_days, self.older_than_seconds) {
            (Some(days), None) => SignedDuration::from_hours(i64::from(days) * 24),
            (None, Some(secs)) => {
                SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX))
            }
            (None, None) => {
                return Err(invalid(
                    "say how old a finished request must be to go: send \"older_than_days\": N \
                     (or \"older_than_seconds\": N)"
                        .into(),
                ));
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "send older_than_days or older_than_seconds, not both".into(),
                ));
            }
        };
        let statuses = self
            .request_statuses
            .iter()
            .flatten()
            .map(|raw| {
                raw.parse::<RequestStatus>()
                    .map_err(|e| invalid(format!("request_statuses: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CleanupAsk {
            older_than,
            statuses,
            dry_run: self.dry_run.unwrap_or(false),
        })
    }
}

/// Removes every finished request older than the cutoff, with its machine records, when
/// nothing needs them any more; a dry run says what would go.
#[utoipa::path(
    post,
    path = "/api/v1/admin/database/cleanup",
    tag = "admin",
    operation_id = "cleanup_database_api_v1_admin_database_cleanup_post",
    request_body = CleanupBody,
    responses(
        (status = 200, description = "What was removed (or would be, in a dry run) and what was kept", body = CleanupReply),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller is not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No age given, both ages, an unfinished status, confirm=false, or an unknown field", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cleanup_database(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CleanupBody>,
) -> Result<Json<CleanupReply>, Problem> {
    let ask = body.ask()?;
    let done = state.broker().cleanup(&ask).await?;
    let requests_removed = done.removed.request_ids.len();
    let machines_removed = done.removed.machine_ids.len();
    let verb = if done.dry_run {
        "would remove"
    } else {
        "removed"
    };
    Ok(Json(CleanupReply {
        dry_run: done.dry_run,
        cutoff: done.cutoff.to_string(),
        requests_removed,
        machines_removed,
        request_ids: done
            .removed
            .request_ids
            .iter()
            .take(IDS_SHOWN)
            .map(ToString::to_string)
            .collect(),
        requests_kept: done.kept.len(),
        kept: done
            .kept
            .iter()
            .take(KEPT_SHOWN)
            .map(|(id, reason)| KeptRequest {
                request_id: id.to_string(),
                reason: reason.clone(),
            })
            .collect(),
        message: format!(
            "{verb} {requests_removed} finished requests and {machines_removed} machine records \
             older than {}; kept {}",
            done.cutoff,
            done.kept.len()
        ),
    }))
}
