//! `POST /api/v1/hostfactory/{operation}`: one HostFactory script call answered by the
//! daemon (the scripts forward here over the Unix socket). It runs the same
//! [`run_operation`] as the direct path, on the daemon's own broker (its store, provider and
//! watch cache) with the templates brought up to date with the file first (see
//! [`super::template_file`]), so the reply is byte for byte what the script would print.

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::AppState;
use super::problem::Problem;
use crate::failure::CliResult;
use crate::hostfactory::{Operation, SCRIPT_OUTPUT_MEDIA_TYPE, ScriptReply, run_operation};
use crate::session::BrokerEnv;

/// Runs one HostFactory operation and returns what its script prints and its exit code.
/// A failed operation is still a 200: the failure is in the script reply, as on the
/// direct path.
#[utoipa::path(
    post,
    path = "/api/v1/hostfactory/{operation}",
    tag = "hostfactory",
    params(("operation" = String, Path, description = "getAvailableTemplates, requestMachines, requestReturnMachines, getRequestStatus or getReturnRequests")),
    request_body(content = Object, content_type = "application/json", description = "The HostFactory JSON input exactly as the script got it; an empty body for none"),
    responses(
        (status = 200, description = "What the script prints on stdout and stderr, and its exit code. With `Accept: application/vnd.orb.script-output` (what the forwarding scripts send) the reply is instead one line of JSON with `stderr` and `exit_code`, then stdout byte for byte", body = ScriptReply),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not one of the five operations", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn hostfactory_call(
    State(state): State<AppState>,
    Path(operation): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let op = Operation::from_name(&operation).ok_or_else(|| {
        Problem::not_found(
            "no-such-operation",
            "No such HostFactory operation",
            format!(
                "{operation:?} is not a HostFactory operation; use one of {}",
                Operation::ALL.map(Operation::name).join(", ")
            ),
        )
    })?;
    let input: Option<Value> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(serde_json::from_slice(&body).map_err(|e| {
            Problem::bad_request(
                "invalid-json",
                format!("the body is not JSON ({e}); send the HostFactory input as is"),
            )
        })?)
    };
    let reply = run_operation(op, input.as_ref(), async || call_env(&state)).await;
    let compact = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains(SCRIPT_OUTPUT_MEDIA_TYPE));
    Ok(if compact {
        let (head, stdout) = reply.into_script_output();
        let length = head.len() + stdout.len();
        let parts = [Bytes::from(head), Bytes::from(stdout)];
        (
            [
                (header::CONTENT_TYPE, SCRIPT_OUTPUT_MEDIA_TYPE.to_string()),
                (header::CONTENT_LENGTH, length.to_string()),
            ],
            Body::from_stream(futures::stream::iter(
                parts.map(Ok::<_, std::convert::Infallible>),
            )),
        )
            .into_response()
    } else {
        Json(reply).into_response()
    })
}

/// The daemon's broker, its templates brought up to date with the file first.
fn call_env(state: &AppState) -> CliResult<BrokerEnv> {
    let loaded = state.templates_now();
    Ok(BrokerEnv {
        broker: state.shared_broker(),
        warnings: loaded.warnings,
        catalog_failure: loaded.failure.or(loaded.missing),
        written: Some(state.written_machines()),
    })
}
