//! Probes and metrics: `/livez` (the process answers), `/readyz` (storage and provider
//! usable), `/health` (the same checks, 503 only when storage is down), `/metrics`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use orb_store::RequestFilter;

use super::AppState;
use super::metrics::OPENMETRICS_CONTENT_TYPE;
use super::model::{Check, HealthReport};
use super::problem::Problem;

const OK: &str = "ok";
const FAILING: &str = "failing";

fn report(status: &str, checks: BTreeMap<String, Check>) -> HealthReport {
    HealthReport {
        service: "orb".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        status: status.into(),
        checks,
    }
}

pub(super) async fn checks(state: &AppState) -> BTreeMap<String, Check> {
    let broker = state.broker();
    let store = match broker
        .store
        .list_requests(&RequestFilter {
            limit: Some(1),
            ..Default::default()
        })
        .await
    {
        Ok(_) => Check {
            status: OK.into(),
            detail: Some(format!("{:?} store reachable", broker.store.backend())),
        },
        Err(e) => Check {
            status: FAILING.into(),
            detail: Some(e.to_string()),
        },
    };
    let provider = match broker.provider.get() {
        Ok(provider) => Check {
            status: OK.into(),
            detail: Some(format!(
                "provider {:?} ({}) built",
                broker.settings.provider_name,
                provider.provider_type()
            )),
        },
        Err(e) => Check {
            status: FAILING.into(),
            detail: Some(format!("provider {:?}: {e}", broker.settings.provider_name)),
        },
    };
    let mut checks = BTreeMap::from([
        ("store".to_string(), store),
        ("provider".to_string(), provider),
    ]);
    if let Some(daemon) = state.daemon() {
        checks.extend(daemon.readiness().await);
    }
    checks
}

/// Always 200 while the process can answer; checks nothing else.
#[utoipa::path(
    get,
    path = "/livez",
    tag = "probes",
    responses((status = 200, description = "Alive", body = HealthReport))
)]
pub async fn livez() -> Json<HealthReport> {
    Json(report("alive", BTreeMap::new()))
}

/// 200 when storage answers and the provider could be built; 503 otherwise, naming what fails.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "Ready", body = HealthReport),
        (status = 503, description = "Not ready; `checks` says why", body = HealthReport),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<HealthReport>) {
    let checks = checks(&state).await;
    if checks.values().all(|c| c.status == OK) {
        (StatusCode::OK, Json(report(OK, checks)))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(report("unhealthy", checks)),
        )
    }
}

/// Overall health: `healthy`, `degraded` (provider failing; still 200) or `unhealthy`
/// (storage failing; 503) — the reference broker's words, which its SDKs' managed mode waits
/// for (`healthy` or `degraded`) before the first call.
#[utoipa::path(
    get,
    path = "/health",
    tag = "probes",
    responses(
        (status = 200, description = "healthy or degraded", body = HealthReport),
        (status = 503, description = "unhealthy: storage unavailable", body = HealthReport),
    )
)]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthReport>) {
    let checks = checks(&state).await;
    let (code, status) = overall_health(&checks);
    (code, Json(report(status, checks)))
}

fn overall_health(checks: &BTreeMap<String, Check>) -> (StatusCode, &'static str) {
    let store_ok = checks.get("store").is_some_and(|c| c.status == OK);
    let all_ok = checks.values().all(|c| c.status == OK);
    match (store_ok, all_ok) {
        (true, true) => (StatusCode::OK, "healthy"),
        (true, false) => (StatusCode::OK, "degraded"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unhealthy"),
    }
}

/// Prometheus metrics in the OpenMetrics text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    responses(
        (status = 200, description = "OpenMetrics exposition", content_type = "application/openmetrics-text", body = String),
        (status = 503, description = "Storage unavailable (request counts could not be taken)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, Problem> {
    if !state.metrics().enabled() {
        let text = state.metrics().encode().unwrap_or_default();
        return Ok(([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text));
    }
    let counts = state.broker().store.count_requests_by_status().await?;
    state.metrics().set_request_counts(counts);
    if let Some(daemon) = state.daemon() {
        daemon.refresh_gauges();
    }
    let text = state.metrics().encode().map_err(|e| {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics-encoding",
            "Metrics could not be encoded",
            e.to_string(),
        )
    })?;
    Ok(([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(store: &str, provider: &str) -> BTreeMap<String, Check> {
        [("store", store), ("provider", provider)]
            .into_iter()
            .map(|(name, status)| {
                let check = Check {
                    status: status.into(),
                    detail: None,
                };
                (name.to_string(), check)
            })
            .collect()
    }

    #[test]
    fn health_speaks_the_words_the_reference_sdks_wait_for() {
        assert_eq!(overall_health(&checks(OK, OK)), (StatusCode::OK, "healthy"));
        assert_eq!(
            overall_health(&checks(OK, FAILING)),
            (StatusCode::OK, "degraded")
        );
        assert_eq!(
            overall_health(&checks(FAILING, OK)),
            (StatusCode::SERVICE_UNAVAILABLE, "unhealthy")
        );
    }
}
