//! `POST /api/v1/hostfactory/{operation}`: one HostFactory script call answered by the
//! daemon (the scripts forward here over the Unix socket). It runs the same
//! [`run_operation`] as the direct path, on a broker that shares the daemon's store and
//! provider (and so its watch cache) but re-reads the template file on every call, as the
//! direct path does, so the reply is byte for byte what the script would print itself.

use std::path::PathBuf;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use orb_core::config::ProviderEntry;
use serde_json::Value;

use super::AppState;
use super::problem::Problem;
use crate::context;
use crate::failure::CliResult;
use crate::hostfactory::{Operation, SCRIPT_OUTPUT_MEDIA_TYPE, ScriptReply, run_operation};
use crate::session::BrokerEnv;
use orb_broker::catalog::Catalog;
use orb_broker::{Broker, ProviderHandle};

/// Where the template file of the served provider is looked up on each call.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    pub config_dir: PathBuf,
    pub entry: ProviderEntry,
}

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
    let output = run_operation(op, input.as_ref(), async || call_env(&state)).await;
    let reply = ScriptReply::from(output);
    let compact = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains(SCRIPT_OUTPUT_MEDIA_TYPE));
    Ok(if compact {
        (
            [(header::CONTENT_TYPE, SCRIPT_OUTPUT_MEDIA_TYPE)],
            reply.to_script_output(),
        )
            .into_response()
    } else {
        Json(reply).into_response()
    })
}

/// The daemon's broker with a freshly read template file (or the one it started with when
/// it has no template source, as in tests).
fn call_env(state: &AppState) -> CliResult<BrokerEnv> {
    let base = state.broker();
    let (catalog, warnings, catalog_failure) = match state.template_source() {
        Some(source) => match context::find_template_file(&source.config_dir, &source.entry)
            .and_then(|path| context::load_catalog_from(&path, &source.entry))
        {
            Ok(catalog) => {
                let warnings = catalog.notes();
                (catalog, warnings, None)
            }
            Err(failure) => (
                Catalog::default(),
                vec![failure.message.clone()],
                Some(failure),
            ),
        },
        None => (base.catalog.clone(), base.catalog.notes(), None),
    };
    let provider = match base.provider.get() {
        Ok(provider) => ProviderHandle::ready(provider),
        Err(e) => ProviderHandle::lazy(move || Err(e.clone())),
    };
    let broker = Broker {
        store: base.store.clone(),
        provider,
        settings: base.settings.clone(),
        catalog,
        clock: base.clock.clone(),
        refreshed: base.refreshed.clone(),
    };
    Ok(BrokerEnv {
        broker,
        warnings,
        catalog_failure,
    })
}
