//! The reference broker's REST shapes (ORB 1.8's OpenAPI document), served beside orb's own
//! routes so that its SDKs and scripts work against `orb serve`: the trailing-slash
//! collections with their envelopes and paging, batch status, cancel by `DELETE` and `/info`.
//! Each handler is a few lines over the same broker calls as orb's own routes.

use axum::Json;
use axum::extract::{Path, State};
use jiff::Timestamp;
use orb_core::hostfactory::mapping::hf_machine_result;
use orb_core::machine::Machine;
use orb_core::request::{Request, RequestStatus};
use orb_store::{MachineFilter, RequestFilter};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{ApiJson, ApiQuery};
use super::problem::Problem;
use super::requests::{parse_id, unknown};
use orb_broker::{BrokerError, RequestView};

/// Page size when `limit` is not given, and the largest accepted.
pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 1000;
/// Most request ids one batch status call may name.
pub const MAX_BATCH: usize = 1000;

/// `limit`, `offset` and `cursor` of the reference's list routes. `cursor` is the
/// `next_cursor` of the previous page and wins over `offset`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// At most this many (default 50, 1 to 1000).
    pub limit: Option<u32>,
    /// Skip this many first.
    pub offset: Option<u32>,
    /// The `next_cursor` of the page before.
    pub cursor: Option<String>,
}

/// Where a page starts and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
}

impl PageQuery {
    pub fn page(&self) -> Result<Page, Problem> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Problem::bad_request(
                "invalid-limit",
                format!("limit={limit} is out of range; give 1 to {MAX_PAGE}"),
            ));
        }
        let offset = match &self.cursor {
            Some(raw) => raw.parse::<u32>().map_err(|_| {
                Problem::bad_request(
                    "invalid-cursor",
                    format!(
                        "cursor={raw:?} is not a cursor of this server; pass the next_cursor \
                         of the previous page as it was, or use offset"
                    ),
                )
            })?,
            None => self.offset.unwrap_or(0),
        };
        Ok(Page {
            offset: offset as usize,
            limit: limit as usize,
        })
    }
}

/// One page of `items` and the cursor of the next page (absent on the last one).
pub fn paginate<T>(items: Vec<T>, page: Page) -> (Vec<T>, usize, Option<String>) {
    let total = items.len();
    let shown: Vec<T> = items
        .into_iter()
        .skip(page.offset)
        .take(page.limit)
        .collect();
    let end = page.offset.saturating_add(shown.len());
    let next = (end < total).then(|| end.to_string());
    (shown, total, next)
}

fn time(t: Timestamp) -> String {
    t.to_string()
}

/// A machine inside a request (the reference's `MachineReference`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MachineReference {
    pub machine_id: String,
    /// `succeed`, `executing` or `fail`, as HostFactory reads it for this request's type.
    pub result: String,
    pub status: String,
    pub name: String,
    pub private_ip_address: Option<String>,
    pub public_ip_address: Option<String>,
    pub instance_type: Option<String>,
    pub price_type: Option<String>,
    pub tags: std::collections::BTreeMap<String, String>,
    /// Always null: Kubernetes machines have no cloud host.
    pub cloud_host_id: Option<String>,
    pub launch_time: Option<String>,
    pub request_id: String,
    pub return_request_id: Option<String>,
    pub message: Option<String>,
}

impl MachineReference {
    fn of(request: &Request, m: &Machine) -> Self {
        Self {
            machine_id: m.machine_id.clone(),
            result: hf_machine_result(request.request_type, m.status).to_string(),
            status: m.status.to_string(),
            name: m.name.clone(),
            private_ip_address: m.private_ip.clone(),
            public_ip_address: m.public_ip.clone(),
            instance_type: m.instance_type.clone(),
            price_type: m.price_type.clone(),
            tags: (*m.tags).clone(),
            cloud_host_id: None,
            launch_time: m.launch_time.map(time),
            request_id: m.request_id.to_string(),
            return_request_id: m.return_request_id.as_ref().map(ToString::to_string),
            message: m.status_reason.clone(),
        }
    }
}

/// A request in the reference's shape (`RequestItem`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequestItem {
    pub request_id: String,
    pub status: String,
    /// `acquire` or `return`.
    pub request_type: String,
    pub template_id: Option<String>,
    pub requested_count: u32,
    pub successful_count: u32,
    pub failed_count: u32,
    pub created_at: String,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub message: Option<String>,
    /// Fulfilled share of the requested count, 0 to 100.
    pub success_rate: f64,
    /// Seconds from creation to completion (or to now, while unfinished).
    pub duration: f64,
    /// The request's machines; only in replies that read them (status, batch status).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<MachineReference>>,
    pub machine_ids: Vec<String>,
    pub provider_api: Option<String>,
    pub provider_name: String,
    pub provider_type: String,
    pub is_terminal: bool,
    /// Finished without everything asked for: partial, failed, cancelled or timeout.
    pub is_failure_like: bool,
    /// Share of the requested count that is settled (fulfilled or failed), 0 to 100.
    pub progress_percent: f64,
    /// Why the answer may be stale (the provider could not be asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn percent(part: u32, whole: u32) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (f64::from(part) * 100.0 / f64::from(whole)).min(100.0)
}

impl RequestItem {
    pub fn of(r: &Request, provider_type: &str, now: Timestamp) -> Self {
        let end = r.completed_at.unwrap_or(now);
        let duration = end.duration_since(r.created_at).as_secs_f64().max(0.0);
        let settled = if r.status.is_terminal() {
            r.requested_count
        } else {
            r.fulfilled_count.saturating_add(r.failed_count)
        };
        Self {
            request_id: r.request_id.to_string(),
            status: r.status.to_string(),
            request_type: r.request_type.as_str().to_string(),
            template_id: r.template_id.clone(),
            requested_count: r.requested_count,
            successful_count: r.fulfilled_count,
            failed_count: r.failed_count,
            created_at: time(r.created_at),
            started_at: r.started_at.map(time),
            completed_at: r.completed_at.map(time),
            message: r.status_message.clone(),
            success_rate: percent(r.fulfilled_count, r.requested_count),
            duration,
            machines: None,
            machine_ids: r.machine_ids.clone(),
            provider_api: r.provider_api.map(|api| api.as_str().to_string()),
            provider_name: r.provider_name.clone(),
            provider_type: provider_type.to_string(),
            is_terminal: r.status.is_terminal(),
            is_failure_like: r.status.is_unsuccessful(),
            progress_percent: percent(settled, r.requested_count),
            note: None,
        }
    }

    pub fn of_view(view: &RequestView, provider_type: &str, now: Timestamp) -> Self {
        let mut item = Self::of(&view.request, provider_type, now);
        item.machines = Some(
            view.machines
                .iter()
                .map(|m| MachineReference::of(&view.request, m))
                .collect(),
        );
        if view.request.request_type == orb_core::request::RequestType::Acquire {
            item.machine_ids = view.machines.iter().map(|m| m.machine_id.clone()).collect();
        }
        item.note = view.note.clone();
        item
    }
}

/// A machine in the reference's machine list (`MachineItem`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MachineItem {
    pub machine_id: String,
    pub name: String,
    pub status: String,
    pub instance_type: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    /// `succeed`, `executing` or `fail`, as for the acquire request that made it.
    pub result: String,
    pub launch_time: Option<String>,
    pub status_reason: Option<String>,
    pub request_id: String,
    pub return_request_id: Option<String>,
    pub template_id: String,
    pub region: Option<String>,
    pub availability_zone: Option<String>,
    pub price_type: Option<String>,
    /// The Kubernetes object the machine belongs to (pod, or its controller).
    pub resource_id: Option<String>,
    pub provider_api: Option<String>,
    pub provider_name: String,
    pub provider_type: String,
    pub tags: std::collections::BTreeMap<String, String>,
    pub version: i64,
    /// Seconds since launch, while the machine is live.
    pub uptime_seconds: Option<f64>,
    /// orb's addition: the node the machine runs on, as the node watcher last saw it
    /// (`node_watch_enabled`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<super::model::MachineNode>,
    /// orb's addition: the node the pod was scheduled to, as the provider last saw the pod
    /// (null before it is scheduled, or for a provider that has no nodes).
    pub node_name: Option<String>,
    /// orb's addition: the Kubernetes namespace of the machine's pod.
    pub namespace: Option<String>,
}

impl MachineItem {
    pub fn of(m: &Machine, provider_type: &str, now: Timestamp) -> Self {
        let node = m.provider_data.get("node");
        let node_field = |key: &str| {
            node.and_then(|n| n.get(key))
                .and_then(Value::as_str)
                .map(String::from)
        };
        Self {
            machine_id: m.machine_id.clone(),
            name: m.name.clone(),
            status: m.status.to_string(),
            instance_type: m.instance_type.clone(),
            private_ip: m.private_ip.clone(),
            public_ip: m.public_ip.clone(),
            result: hf_machine_result(orb_core::request::RequestType::Acquire, m.status)
                .to_string(),
            launch_time: m.launch_time.map(time),
            status_reason: m.status_reason.clone(),
            request_id: m.request_id.to_string(),
            return_request_id: m.return_request_id.as_ref().map(ToString::to_string),
            template_id: m.template_id.clone(),
            region: node_field("region"),
            availability_zone: node_field("zone"),
            price_type: m.price_type.clone(),
            resource_id: m.resource_id.clone(),
            provider_api: m.provider_api.map(|api| api.as_str().to_string()),
            provider_name: m.provider_name.clone(),
            provider_type: provider_type.to_string(),
            tags: (*m.tags).clone(),
            version: m.version,
            uptime_seconds: m
                .launch_time
                .filter(|_| m.status.is_live())
                .map(|t| now.duration_since(t).as_secs_f64().max(0.0)),
            node: node.and_then(|n| serde_json::from_value(n.clone()).ok()),
            node_name: provider_text(m, "node_name"),
            namespace: provider_text(m, "namespace"),
        }
    }
}

/// A non-empty text field of the provider's own data about a machine.
fn provider_text(m: &Machine, key: &str) -> Option<String> {
    m.provider_data
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// `GET /info`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ServiceInfo {
    #[schema(example = "orb")]
    pub service: String,
    pub version: String,
    pub description: String,
    pub api_version: String,
    pub providers: Vec<ProviderInfo>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderInfo {
    pub name: String,
    #[serde(rename = "type")]
    #[schema(example = "k8s")]
    pub provider_type: String,
}

/// The service, its version and its provider.
#[utoipa::path(
    get,
    path = "/info",
    tag = "probes",
    operation_id = "get_info",
    responses((status = 200, description = "What this server is", body = ServiceInfo))
)]
pub async fn info(State(state): State<AppState>) -> Json<ServiceInfo> {
    let settings = &state.broker().settings;
    Json(ServiceInfo {
        service: "orb".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        description: "orb-rs: machines on Kubernetes for HPC and grid schedulers".into(),
        api_version: "v1".into(),
        providers: vec![ProviderInfo {
            name: settings.provider_name.clone(),
            provider_type: settings.provider_type.clone(),
        }],
    })
}

/// A template in the reference's shape (`TemplateItem`); cloud-only fields are null.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateItem {
    pub template_id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    /// The container image.
    pub image_id: Option<String>,
    /// `maxNumber`; -1 means unlimited.
    pub max_instances: i64,
    /// How many more machines may be requested now; null when unlimited.
    pub available_number: Option<i64>,
    /// Always null: Kubernetes templates name no instance types.
    pub machine_types: Option<Value>,
    pub price_type: Option<String>,
    /// Pod, Deployment, StatefulSet or Job.
    pub provider_api: String,
    pub provider_name: String,
    pub provider_type: String,
    pub tags: std::collections::BTreeMap<String, String>,
    /// Why the template cannot be used; empty when it can.
    pub problems: Vec<String>,
}

impl TemplateItem {
    pub fn of(
        info: super::model::TemplateInfo,
        t: &orb_core::template::Template,
        settings: &orb_broker::BrokerSettings,
    ) -> Self {
        Self {
            template_id: info.template_id.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            image_id: t.container_image.clone(),
            max_instances: info.max_machines,
            available_number: info.available_number,
            machine_types: None,
            price_type: t.price_type.clone(),
            provider_api: info.provider_api.clone(),
            provider_name: t
                .provider_name
                .clone()
                .unwrap_or_else(|| settings.provider_name.clone()),
            provider_type: t
                .provider_type
                .clone()
                .unwrap_or_else(|| settings.provider_type.clone()),
            tags: t.tags.clone(),
            problems: info.problems,
        }
    }
}

/// `GET /api/v1/templates/{id}`: orb's fields for the one template, and beside them the
/// reference broker's envelope holding the same template.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateDetail {
    #[serde(flatten)]
    pub info: super::model::TemplateInfo,
    pub templates: Vec<TemplateItem>,
    pub total_count: usize,
    pub next_cursor: Option<String>,
    pub success: bool,
    pub message: String,
}

/// `{templates, total_count, next_cursor, success, message}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateList {
    pub templates: Vec<TemplateItem>,
    pub total_count: usize,
    pub next_cursor: Option<String>,
    pub success: bool,
    pub message: String,
}

/// `GET /api/v1/templates/`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReferenceTemplateQuery {
    /// Only templates of this provider instance.
    pub provider_name: Option<String>,
    /// Only templates of this provider type (`k8s`).
    pub provider_type: Option<String>,
    /// Only templates of this handler (Pod, Deployment, StatefulSet, Job).
    pub provider_api: Option<String>,
    /// Only templates whose id or name contains this text.
    pub q: Option<String>,
    pub limit: Option<u32>,
    pub offset: Option<u32>,
    pub cursor: Option<String>,
}

/// The templates, in file order, with what each still allows, a page at a time.
#[utoipa::path(
    get,
    path = "/api/v1/templates/",
    tag = "templates",
    operation_id = "list_templates_api_v1_templates__get",
    params(ReferenceTemplateQuery),
    responses(
        (status = 200, description = "One page of templates", body = TemplateList),
        (status = 400, description = "Bad limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The template file cannot be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_templates(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ReferenceTemplateQuery>,
) -> Result<Json<TemplateList>, Problem> {
    let page = PageQuery {
        limit: query.limit,
        offset: query.offset,
        cursor: query.cursor.clone(),
    }
    .page()?;
    let described = super::templates::list(&state).await?;
    let settings = &state.broker().settings;
    let catalog = state.broker().catalog.current();
    let wanted = |item: &TemplateItem| {
        query
            .provider_name
            .as_ref()
            .is_none_or(|n| *n == item.provider_name)
            && query
                .provider_type
                .as_ref()
                .is_none_or(|t| *t == item.provider_type)
            && query
                .provider_api
                .as_ref()
                .is_none_or(|a| a.eq_ignore_ascii_case(&item.provider_api))
            && query.q.as_ref().is_none_or(|q| {
                item.template_id.contains(q.as_str())
                    || item.name.as_deref().is_some_and(|n| n.contains(q.as_str()))
            })
    };
    let items: Vec<TemplateItem> = described
        .into_iter()
        .filter_map(|info| {
            let t = catalog.get(&info.template_id)?;
            Some(TemplateItem::of(info, t, settings))
        })
        .filter(|item| wanted(item))
        .collect();
    let (templates, total_count, next_cursor) = paginate(items, page);
    Ok(Json(TemplateList {
        message: format!("{} of {total_count} templates", templates.len()),
        templates,
        total_count,
        next_cursor,
        success: true,
    }))
}

/// `GET /api/v1/requests/`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReferenceRequestQuery {
    /// Only requests in this status, e.g. `in_progress`.
    pub status: Option<String>,
    /// Only `acquire` or `return` requests (`type` is accepted too).
    #[serde(alias = "type")]
    pub request_type: Option<String>,
    /// Only requests for this template.
    pub template_id: Option<String>,
    pub limit: Option<u32>,
    pub offset: Option<u32>,
    pub cursor: Option<String>,
}

/// `{requests, count, total_count, next_cursor}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequestList {
    pub requests: Vec<RequestItem>,
    /// How many are in this page.
    pub count: usize,
    /// How many match in all.
    pub total_count: usize,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

fn parse_status(raw: &str) -> Result<RequestStatus, Problem> {
    RequestStatus::ALL
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
        })
}

fn parse_type(raw: Option<&str>) -> Result<Option<orb_core::request::RequestType>, Problem> {
    use orb_core::request::RequestType;
    match raw {
        None => Ok(None),
        Some("acquire") => Ok(Some(RequestType::Acquire)),
        Some("return") => Ok(Some(RequestType::Return)),
        Some(other) => Err(Problem::bad_request(
            "invalid-type",
            format!("request_type={other:?} is not a request type; use acquire or return"),
        )),
    }
}

/// Requests, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/api/v1/requests/",
    tag = "requests",
    operation_id = "list_requests_api_v1_requests__get",
    params(ReferenceRequestQuery),
    responses(
        (status = 200, description = "One page of requests", body = RequestList),
        (status = 400, description = "Bad status, type, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_requests(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ReferenceRequestQuery>,
) -> Result<Json<RequestList>, Problem> {
    let page = PageQuery {
        limit: query.limit,
        offset: query.offset,
        cursor: query.cursor.clone(),
    }
    .page()?;
    let filter = RequestFilter {
        request_type: parse_type(query.request_type.as_deref())?,
        statuses: query
            .status
            .as_deref()
            .map(parse_status)
            .transpose()?
            .into_iter()
            .collect(),
        template_id: query.template_id.clone(),
        limit: None,
    };
    let broker = state.broker();
    let requests = broker.list_requests(&filter).await?;
    let (shown, total_count, next_cursor) = paginate(requests, page);
    let now = (broker.clock)();
    let kind = &broker.settings.provider_type;
    let requests: Vec<RequestItem> = shown
        .iter()
        .map(|r| RequestItem::of(r, kind, now))
        .collect();
    Ok(Json(RequestList {
        count: requests.len(),
        requests,
        total_count,
        next_cursor,
    }))
}

/// `POST /api/v1/requests/status`: `requestIds` (or `request_ids`) and `verbose`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchStatusBody {
    /// The requests to report on, in the order wanted back (1 to 1000).
    #[serde(rename = "requestIds", alias = "request_ids")]
    pub request_ids: Vec<String>,
    /// Accepted for the reference's clients; machines are always included.
    #[serde(default)]
    pub verbose: bool,
}

/// `{requests: [...]}`: a request per id given, in the same order; an id that cannot be
/// reported becomes `{request_id, error}` in its place.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchStatus {
    #[schema(value_type = Vec<Object>)]
    pub requests: Vec<Value>,
}

/// Where several requests stand now; the provider is asked for the unfinished ones.
#[utoipa::path(
    post,
    path = "/api/v1/requests/status",
    tag = "requests",
    operation_id = "get_request_status_batch_api_v1_requests_status_post",
    request_body = BatchStatusBody,
    responses(
        (status = 200, description = "One entry per id, in input order", body = BatchStatus),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No ids, too many ids or an unknown field", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_status_batch(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<BatchStatusBody>,
) -> Result<Json<BatchStatus>, Problem> {
    if body.request_ids.is_empty() || body.request_ids.len() > MAX_BATCH {
        return Err(Problem::unprocessable(
            "request-ids",
            "Say which requests",
            format!(
                "requestIds has {} ids; give 1 to {MAX_BATCH} (split a longer list into calls)",
                body.request_ids.len()
            ),
        ));
    }
    let broker = state.broker();
    let kind = broker.settings.provider_type.clone();
    let mut out = Vec::with_capacity(body.request_ids.len());
    for raw in &body.request_ids {
        let entry = match parse_id(raw) {
            Err(problem) => failed_entry(raw, &problem),
            Ok(id) => match broker.refresh(&id).await {
                Ok(Some(view)) => {
                    serde_json::to_value(RequestItem::of_view(&view, &kind, (broker.clock)()))
                        .unwrap_or(Value::Null)
                }
                Ok(None) => failed_entry(raw, &unknown(&id)),
                Err(e) => failed_entry(raw, &Problem::from(e)),
            },
        };
        out.push(entry);
    }
    Ok(Json(BatchStatus { requests: out }))
}

fn failed_entry(raw: &str, problem: &Problem) -> Value {
    json!({
        "request_id": raw,
        "error": {
            "code": problem.error.code,
            "message": problem.detail,
        },
    })
}

/// `?reason=` of `DELETE /api/v1/requests/{id}`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CancelQuery {
    /// Why; logged with the cancellation.
    pub reason: Option<String>,
}

/// `{request_id, status, message}` of a cancel.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CancelReply {
    pub request_id: String,
    pub status: String,
    pub message: String,
}

/// Cancels an unfinished acquire request and deletes what it created (the reference's
/// spelling of `POST /api/v1/requests/{id}/cancel`).
#[utoipa::path(
    delete,
    path = "/api/v1/requests/{request_id}",
    tag = "requests",
    operation_id = "cancel_request_api_v1_requests__request_id__delete",
    params(("request_id" = String, Path, description = "req-…"), CancelQuery),
    responses(
        (status = 200, description = "Cancelled", body = CancelReply),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already finished, or a return request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Provider unavailable; nothing changed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel_request(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    ApiQuery(query): ApiQuery<CancelQuery>,
) -> Result<Json<CancelReply>, Problem> {
    let id = parse_id(&raw)?;
    if let Some(reason) = &query.reason {
        tracing::info!(request_id = %id, reason = %reason, "cancel asked over REST");
    }
    let view = state.broker().cancel(&id).await?;
    Ok(Json(CancelReply {
        request_id: id.to_string(),
        status: view.request.status.to_string(),
        message: view
            .request
            .status_message
            .clone()
            .unwrap_or_else(|| "Request cancelled".into()),
    }))
}

/// `GET /api/v1/machines/`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReferenceMachineQuery {
    /// Only machines in this status, e.g. `running`.
    pub status: Option<String>,
    /// Only the machines of this acquire request.
    pub request_id: Option<String>,
    /// Only machines of this provider instance.
    pub provider_name: Option<String>,
    /// `false`: only machines whose objects may still exist. Default: all.
    pub all: Option<bool>,
    pub limit: Option<u32>,
    pub offset: Option<u32>,
    pub cursor: Option<String>,
}

/// `{machines, count, total_count, next_cursor}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MachineList {
    pub machines: Vec<MachineItem>,
    pub count: usize,
    pub total_count: usize,
    pub next_cursor: Option<String>,
}

/// Every machine orb has a record of (live and gone), a page at a time.
#[utoipa::path(
    get,
    path = "/api/v1/machines/",
    tag = "machines",
    operation_id = "list_machines_api_v1_machines__get",
    params(ReferenceMachineQuery),
    responses(
        (status = 200, description = "One page of machines", body = MachineList),
        (status = 400, description = "Bad status, request id, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_machines(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ReferenceMachineQuery>,
) -> Result<Json<MachineList>, Problem> {
    let page = PageQuery {
        limit: query.limit,
        offset: query.offset,
        cursor: query.cursor.clone(),
    }
    .page()?;
    let status = match query.status.as_deref() {
        None => None,
        Some(raw) => Some(
            orb_core::machine::MachineStatus::ALL
                .into_iter()
                .find(|s| s.as_str() == raw)
                .ok_or_else(|| {
                    Problem::bad_request(
                        "invalid-status",
                        format!(
                            "status={raw:?} is not a machine status; use one of {}",
                            orb_core::machine::MachineStatus::ALL
                                .map(orb_core::machine::MachineStatus::as_str)
                                .join(", ")
                        ),
                    )
                })?,
        ),
    };
    let request_id = query.request_id.as_deref().map(parse_id).transpose()?;
    let broker = state.broker();
    let mut machines = broker
        .list_machines(&MachineFilter {
            request_id,
            live_only: query.all == Some(false),
            ..Default::default()
        })
        .await?;
    if let Some(status) = status {
        machines.retain(|m| m.status == status);
    }
    if let Some(name) = &query.provider_name {
        machines.retain(|m| m.provider_name == *name);
    }
    let (shown, total_count, next_cursor) = paginate(machines, page);
    let now = (broker.clock)();
    let kind = &broker.settings.provider_type;
    let machines: Vec<MachineItem> = shown
        .iter()
        .map(|m| MachineItem::of(m, kind, now))
        .collect();
    Ok(Json(MachineList {
        count: machines.len(),
        machines,
        total_count,
        next_cursor,
    }))
}

/// `GET /api/v1/templates`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/templates",
    tag = "templates",
    operation_id = "list_templates",
    params(ReferenceTemplateQuery),
    responses(
        (status = 200, description = "One page of templates", body = TemplateList),
        (status = 400, description = "Bad limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "The template file cannot be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_templates_bare(
    state: State<AppState>,
    query: ApiQuery<ReferenceTemplateQuery>,
) -> Result<Json<TemplateList>, Problem> {
    list_templates(state, query).await
}

/// `GET /api/v1/requests`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/requests",
    tag = "requests",
    operation_id = "list_requests",
    params(ReferenceRequestQuery),
    responses(
        (status = 200, description = "One page of requests", body = RequestList),
        (status = 400, description = "Bad status, type, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_requests_bare(
    state: State<AppState>,
    query: ApiQuery<ReferenceRequestQuery>,
) -> Result<Json<RequestList>, Problem> {
    list_requests(state, query).await
}

/// `GET /api/v1/machines`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/machines",
    tag = "machines",
    operation_id = "list_machines",
    params(ReferenceMachineQuery),
    responses(
        (status = 200, description = "One page of machines", body = MachineList),
        (status = 400, description = "Bad status, request id, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_machines_bare(
    state: State<AppState>,
    query: ApiQuery<ReferenceMachineQuery>,
) -> Result<Json<MachineList>, Problem> {
    list_machines(state, query).await
}

/// Return requests, newest first, a page at a time (`GET /api/v1/requests/?request_type=return`).
#[utoipa::path(
    get,
    path = "/api/v1/requests/return",
    tag = "requests",
    operation_id = "list_return_requests_api_v1_requests_return_get",
    params(PageQuery),
    responses(
        (status = 200, description = "One page of return requests", body = RequestList),
        (status = 400, description = "Bad limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_return_requests(
    state: State<AppState>,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<Json<RequestList>, Problem> {
    let query = ReferenceRequestQuery {
        request_type: Some("return".into()),
        limit: page.limit,
        offset: page.offset,
        cursor: page.cursor,
        ..Default::default()
    };
    list_requests(state, ApiQuery(query)).await
}

/// A reference route orb answers with a domain error: generating templates means
/// discovering cloud images and instance types, which a Kubernetes broker has none of.
fn not_supported(what: &str, instead: &str) -> Problem {
    Problem::new(
        axum::http::StatusCode::NOT_IMPLEMENTED,
        "not-supported",
        "Not supported by this broker",
        format!("{what} is not supported by orb's Kubernetes provider; {instead}"),
    )
}

/// Generating templates from cloud images and instance types: refused, Kubernetes has none.
#[utoipa::path(
    post,
    path = "/api/v1/templates/generate",
    tag = "templates",
    operation_id = "generate_templates_api_v1_templates_generate_post",
    responses((status = 501, description = "Cloud template discovery; not for Kubernetes", body = Problem, content_type = "application/problem+json"))
)]
pub async fn generate_templates() -> Problem {
    not_supported(
        "generating templates from cloud images and instance types",
        "write templates by hand (docs/handlers.md has one per handler) and check them with \
         POST /api/v1/templates/validate",
    )
}

/// The template list, read again from the template file (the server follows the file on
/// every call anyway, so this is the list).
#[utoipa::path(
    post,
    path = "/api/v1/templates/refresh",
    tag = "templates",
    operation_id = "refresh_templates_api_v1_templates_refresh_post",
    responses(
        (status = 200, description = "The templates as the file has them now", body = TemplateList),
        (status = 500, description = "The template file cannot be read", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn refresh_templates(state: State<AppState>) -> Result<Json<TemplateList>, Problem> {
    list_templates(state, ApiQuery(ReferenceTemplateQuery::default())).await
}

/// `{machines: [MachineItem]}` of one machine.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OneMachine {
    pub machines: Vec<MachineItem>,
}

pub(super) async fn find_machine(state: &AppState, key: &str) -> Result<Machine, Problem> {
    let found = state
        .broker()
        .store
        .find_machines(&[key.to_string()])
        .await
        .map_err(BrokerError::from)?;
    found.into_iter().next().ok_or_else(|| {
        Problem::not_found(
            "unknown-machine",
            "Unknown machine",
            format!("no machine has the id or host name {key:?}; GET /api/v1/machines/ lists them"),
        )
    })
}

fn one_machine(state: &AppState, m: &Machine) -> Json<OneMachine> {
    let broker = state.broker();
    Json(OneMachine {
        machines: vec![MachineItem::of(
            m,
            &broker.settings.provider_type,
            (broker.clock)(),
        )],
    })
}

/// One machine, by machine id or host name, as last stored.
#[utoipa::path(
    get,
    path = "/api/v1/machines/{machine_id}",
    tag = "machines",
    operation_id = "get_machine_api_v1_machines__machine_id__get",
    params(("machine_id" = String, Path, description = "The machine id or host name")),
    responses(
        (status = 200, description = "The machine", body = OneMachine),
        (status = 404, description = "No such machine", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_machine(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<OneMachine>, Problem> {
    let machine = find_machine(&state, &key).await?;
    Ok(one_machine(&state, &machine))
}

/// One machine as it is now: the request that made it is refreshed from the provider first
/// (as `…/requests/{id}/status` does), then the machine is read again.
#[utoipa::path(
    get,
    path = "/api/v1/machines/{machine_id}/status",
    tag = "machines",
    operation_id = "get_machine_status_api_v1_machines__machine_id__status_get",
    params(("machine_id" = String, Path, description = "The machine id or host name")),
    responses(
        (status = 200, description = "The machine after a refresh", body = OneMachine),
        (status = 404, description = "No such machine", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn machine_status(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<OneMachine>, Problem> {
    let machine = find_machine(&state, &key).await?;
    state.broker().refresh(&machine.request_id).await?;
    let machine = find_machine(&state, &machine.machine_id).await?;
    Ok(one_machine(&state, &machine))
}

/// The `error.code` a broker error gets (for tests and for the MCP door).
pub fn code_of(err: BrokerError) -> String {
    Problem::from(err).error.code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::problem::error_code;
    use rstest::rstest;

    #[rstest]
    #[case(10, 0, 3, vec![0, 1, 2], Some("3"))]
    #[case(10, 9, 3, vec![9], None)]
    #[case(10, 7, 3, vec![7, 8, 9], None)]
    #[case(10, 12, 3, vec![], None)]
    #[case(0, 0, 50, vec![], None)]
    fn pages_cover_the_list_once(
        #[case] len: usize,
        #[case] offset: usize,
        #[case] limit: usize,
        #[case] want: Vec<usize>,
        #[case] next: Option<&str>,
    ) {
        let (shown, total, cursor) = paginate((0..len).collect(), Page { offset, limit });
        assert_eq!(shown, want);
        assert_eq!(total, len);
        assert_eq!(cursor.as_deref(), next);
    }

    #[rstest]
    #[case(Some(0), None, None, "invalid-limit")]
    #[case(Some(1001), None, None, "invalid-limit")]
    #[case(None, None, Some("abc"), "invalid-cursor")]
    #[case(None, None, Some("-1"), "invalid-cursor")]
    fn bad_paging_is_refused(
        #[case] limit: Option<u32>,
        #[case] offset: Option<u32>,
        #[case] cursor: Option<&str>,
        #[case] slug: &str,
    ) {
        let q = PageQuery {
            limit,
            offset,
            cursor: cursor.map(String::from),
        };
        let problem = q.page().unwrap_err();
        assert_eq!(problem.status, 400);
        assert_eq!(problem.error.code, error_code(slug));
    }

    #[test]
    fn the_cursor_wins_over_the_offset() {
        let q = PageQuery {
            limit: Some(5),
            offset: Some(100),
            cursor: Some("10".into()),
        };
        assert_eq!(
            q.page().unwrap(),
            Page {
                offset: 10,
                limit: 5
            }
        );
    }

    #[test]
    fn broker_errors_get_upper_snake_codes() {
        assert_eq!(
            code_of(BrokerError::UnknownRequest("req-x".into())),
            "UNKNOWN_REQUEST"
        );
    }
}
