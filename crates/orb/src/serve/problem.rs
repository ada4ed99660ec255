//! Error replies as RFC 9457 problem documents (`application/problem+json`): a stable `type`
//! per kind of failure, the HTTP status, and a `detail` that names the offending value and
//! how to fix it. Every refusal the API makes goes through [`Problem`].

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use orb_core::lifecycle::LifecycleError;
use orb_core::provider::ProviderError;
use orb_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

use orb_broker::BrokerError;

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem document. It also carries the reference broker's error envelope as
/// the extension member `error` (`{"code", "message", "details"}`), so clients written for
/// either shape read the same reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem, e.g. `urn:orb:problem:unknown-template`.
    #[serde(rename = "type")]
    #[schema(example = "urn:orb:problem:unknown-template")]
    pub problem_type: String,
    /// A short summary of the kind of problem; the same for every occurrence.
    pub title: String,
    /// The HTTP status code of this reply.
    pub status: u16,
    /// What was wrong in this call, and how to fix it.
    pub detail: String,
    /// The same failure in the reference broker's envelope (boxed: a `Problem` travels in
    /// every handler's `Err`, which should stay small).
    pub error: Box<ErrorEnvelope>,
}

/// `error` of a refusal: the reference broker's `{"code", "message", "details"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ErrorEnvelope {
    /// A stable machine code: the problem type's last part in upper snake case, e.g.
    /// `UNKNOWN_TEMPLATE`.
    #[schema(example = "UNKNOWN_TEMPLATE")]
    pub code: String,
    /// The same text as `detail`.
    pub message: String,
    /// The HTTP status and the problem type, for clients that only read `error`.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

/// `unknown-template` → `UNKNOWN_TEMPLATE`.
pub fn error_code(slug: &str) -> String {
    slug.to_ascii_uppercase().replace('-', "_")
}

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let problem_type = format!("urn:orb:problem:{slug}");
        Self {
            error: Box::new(ErrorEnvelope {
                code: error_code(slug),
                message: detail.clone(),
                details: serde_json::json!({"status": status.as_u16(), "type": problem_type}),
            }),
            problem_type,
            title: title.to_string(),
            status: status.as_u16(),
            detail,
        }
    }

    /// Adds `key` to `error.details`, for what a client should read as data (e.g. every
    /// problem of a refused config file).
    pub fn with_detail(mut self, key: &str, value: serde_json::Value) -> Self {
        if let serde_json::Value::Object(details) = &mut self.error.details {
            details.insert(key.to_string(), value);
        }
        self
    }

    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn bad_request(slug: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, slug, "Bad request", detail)
    }

    pub fn unprocessable(slug: &str, title: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, slug, title, detail)
    }

    pub fn not_found(slug: &str, title: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, slug, title, detail)
    }

    /// A request id that does not even have the `req-…`/`ret-…` form.
    pub fn malformed_request_id(raw: &str, reason: impl std::fmt::Display) -> Self {
        Self::bad_request(
            "malformed-request-id",
            format!(
                "{raw:?} is not a request id ({reason}); ids look like req-<uuid> or ret-<uuid>, \
                 as returned by POST /api/v1/machines/request"
            ),
        )
    }

    pub fn from_json_rejection(rejection: &JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonSyntaxError(e) => Self::bad_request(
                "malformed-json",
                format!(
                    "the request body is not valid JSON: {}; send one JSON object",
                    e.body_text()
                ),
            ),
            JsonRejection::JsonDataError(e) => Self::unprocessable(
                "invalid-body",
                "Invalid request body",
                format!(
                    "the request body does not have the expected fields: {}; see /api/v1/openapi.json for the schema",
                    e.body_text()
                ),
            ),
            JsonRejection::MissingJsonContentType(_) => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not-json",
                "Unsupported media type",
                "the request body must be JSON; send the header Content-Type: application/json",
            ),
            other => Self::new(
                other.status(),
                "unreadable-body",
                "Request body could not be read",
                format!(
                    "the request body could not be read: {}; send one JSON object (at most 2 MiB)",
                    other.body_text()
                ),
            ),
        }
    }

    pub fn from_query_rejection(rejection: &QueryRejection) -> Self {
        Self::bad_request(
            "invalid-query",
            format!(
                "the query string is not valid: {}; see /api/v1/openapi.json for the parameters",
                rejection.body_text()
            ),
        )
    }
}

impl From<BrokerError> for Problem {
    fn from(err: BrokerError) -> Self {
        let detail = err.to_string();
        match err {
            BrokerError::UnknownTemplate { .. } => {
                Self::unprocessable("unknown-template", "Unknown template", detail)
            }
            BrokerError::InvalidTemplate(_) | BrokerError::RefusedTemplate(_) => {
                Self::unprocessable("invalid-template", "Template is not usable", detail)
            }
            BrokerError::CountRejected(_) => {
                Self::unprocessable("count-rejected", "Machine count not allowed", detail)
            }
            BrokerError::UnknownRequest(_) => {
                Self::not_found("unknown-request", "Unknown request", detail)
            }
            BrokerError::UnknownMachine(_) => {
                Self::not_found("unknown-machine", "Unknown machine", detail)
            }
            BrokerError::PurgeRefused(_) => Self::new(
                StatusCode::CONFLICT,
                "purge-refused",
                "Record still needed",
                detail,
            ),
            BrokerError::InvalidCleanup(_) => {
                Self::unprocessable("invalid-cleanup", "Cleanup not possible as asked", detail)
            }
            BrokerError::UnknownMachines(_) => {
                Self::unprocessable("unknown-machines", "Unknown machines", detail)
            }
            BrokerError::NotAllowed(_)
            | BrokerError::Lifecycle(LifecycleError::AlreadyTerminal { .. }) => Self::new(
                StatusCode::CONFLICT,
                "not-allowed",
                "Not allowed in this state",
                detail,
            ),
            BrokerError::Lifecycle(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "illegal-transition",
                "Internal state error",
                detail,
            ),
            BrokerError::Provider(e) => e.into(),
            BrokerError::Store(e) => e.into(),
        }
    }
}

impl From<ProviderError> for Problem {
    fn from(err: ProviderError) -> Self {
        let detail = err.to_string();
        match err {
            ProviderError::Rejected(_) => {
                Self::unprocessable("provider-rejected", "Refused by the provider", detail)
            }
            ProviderError::Unavailable(_) | ProviderError::Interrupted(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "provider-unavailable",
                "Provider unavailable",
                detail,
            ),
            ProviderError::Conflict(_) => Self::new(
                StatusCode::CONFLICT,
                "provider-conflict",
                "Conflicts with what is in the cluster",
                detail,
            ),
            ProviderError::Forbidden(_) => Self::new(
                StatusCode::FORBIDDEN,
                "provider-forbidden",
                "The cluster does not allow orb this",
                detail,
            ),
            ProviderError::Misconfigured(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "provider-misconfigured",
                "Provider misconfigured",
                detail,
            ),
        }
    }
}

impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Self {
        let detail = err.to_string();
        match err {
            StoreError::Conflict { .. } => Self::new(
                StatusCode::CONFLICT,
                "concurrent-change",
                "Changed concurrently",
                detail,
            ),
            _ => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "Storage unavailable",
                detail,
            ),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(BrokerError::CountRejected("machine count must be at least 1".into()), 422, "count-rejected")]
    #[case(BrokerError::UnknownRequest("req-x".into()), 404, "unknown-request")]
    #[case(BrokerError::NotAllowed("already complete".into()), 409, "not-allowed")]
    #[case(BrokerError::PurgeRefused("machine m is running".into()), 409, "purge-refused")]
    #[case(BrokerError::UnknownMachine("m".into()), 404, "unknown-machine")]
    #[case(BrokerError::InvalidCleanup("in_progress is not finished".into()), 422, "invalid-cleanup")]
    #[case(BrokerError::UnknownTemplate { template_id: "t".into(), available: "a".into() }, 422, "unknown-template")]
    #[case(BrokerError::Provider(ProviderError::Misconfigured("no such type".into())), 503, "provider-misconfigured")]
    #[case(BrokerError::Provider(ProviderError::Rejected("audit".into())), 422, "provider-rejected")]
    #[case(BrokerError::Provider(ProviderError::Conflict("pod p exists and is not this request's".into())), 409, "provider-conflict")]
    #[case(BrokerError::Provider(ProviderError::Forbidden("pods is forbidden".into())), 403, "provider-forbidden")]
    #[case(BrokerError::Provider(ProviderError::Interrupted("no answer".into())), 503, "provider-unavailable")]
    #[case(BrokerError::Provider(ProviderError::Unavailable("quota".into())), 503, "provider-unavailable")]
    fn broker_errors_map_to_status_and_type(
        #[case] err: BrokerError,
        #[case] status: u16,
        #[case] slug: &str,
    ) {
        let message = err.to_string();
        let problem = Problem::from(err);
        assert_eq!(problem.status, status);
        assert_eq!(problem.problem_type, format!("urn:orb:problem:{slug}"));
        assert_eq!(problem.detail, message);
    }
}
