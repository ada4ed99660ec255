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

async fn checks(state: &AppState) -> BTreeMap<String, Check> {
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
    if let Some(k8s) = state.kubernetes() {
        checks.extend(kubernetes_checks(k8s));
        checks.extend(daemon_checks(k8s));
        checks.insert(
            "kubernetes_version".to_string(),
            state.version_check().check(k8s).await,
        );
        checks.insert(
            "apiserver".to_string(),
            state.reachability().check(k8s).await,
        );
    }
    checks
}

/// The background parts of the Kubernetes provider. The watch cache never fails readiness:
/// while it cannot answer, status reads LIST instead, so it reports what it does.
fn kubernetes_checks(k8s: &orb_k8s::K8sProvider) -> Vec<(String, Check)> {
    let mut checks = Vec::new();
    if let Some(cache) = k8s.pod_cache() {
        let health = cache.health();
        let detail = if cache.serving() {
            format!(
                "status reads served from the watch cache ({} pods)",
                health.pods
            )
        } else {
            let waiting: Vec<String> = health
                .loops
                .iter()
                .filter_map(|(scope, (synced, failing))| match (synced, failing) {
                    (false, _) => Some(format!("{scope}: first LIST pending")),
                    (true, Some(f)) => Some(format!("{scope}: watch failing for {}s", f.as_secs())),
                    _ => None,
                })
                .collect();
            format!(
                "status reads fall back to LIST while the watch recovers ({})",
                if waiting.is_empty() {
                    "starting".to_string()
                } else {
                    waiting.join("; ")
                }
            )
        };
        checks.push((
            "watch_cache".to_string(),
            Check {
                status: OK.into(),
                detail: Some(detail),
            },
        ));
    } else if !k8s.config().watch_enabled {
        checks.push((
            "watch_cache".to_string(),
            Check {
                status: OK.into(),
                detail: Some(
                    "off (watch_enabled=false): every status read LISTs the request's pods".into(),
                ),
            },
        ));
    }
    checks.push(circuit_breakers_check(&k8s.circuit_states()));
    checks
}

/// The handlers' circuit breakers: failing while any is open (calls of that handler fail
/// fast), ok when closed, ok with a note while half-open (one probe call is let through).
fn circuit_breakers_check(
    states: &[(&'static str, orb_k8s::resilience::BreakerState)],
) -> (String, Check) {
    use orb_k8s::resilience::BreakerState;
    let named = |wanted: BreakerState| -> Vec<&str> {
        states
            .iter()
            .filter(|(_, s)| *s == wanted)
            .map(|(h, _)| *h)
            .collect()
    };
    let (open, half_open) = (named(BreakerState::Open), named(BreakerState::HalfOpen));
    let check = if !open.is_empty() {
        Check {
            status: FAILING.into(),
            detail: Some(format!(
                "circuit breaker open for {}: the Kubernetes API failed repeatedly for these calls; check the apiserver",
                open.join(", ")
            )),
        }
    } else if !half_open.is_empty() {
        Check {
            status: OK.into(),
            detail: Some(format!(
                "circuit breaker half-open for {}: the next call probes the apiserver",
                half_open.join(", ")
            )),
        }
    } else {
        Check {
            status: OK.into(),
            detail: Some("all circuit breakers closed".into()),
        }
    };
    ("circuit_breakers".to_string(), check)
}

/// The start-up reconciliation and this replica's leadership. Neither fails readiness:
/// every replica serves the API, and a reconciliation that could not LIST is retried by the
/// GC; the detail says what happened.
fn daemon_checks(k8s: &orb_k8s::K8sProvider) -> Vec<(String, Check)> {
    let Some(status) = k8s.daemon_status() else {
        return Vec::new();
    };
    let reconciliation = match status.reconciliation() {
        Some(report) => report.summary(),
        None => "start-up reconciliation running".to_string(),
    };
    let leader = if status.is_leader() {
        "this replica leads: it runs orphan GC, timeout GC and resumes interrupted acquires"
    } else {
        "standby: another replica holds the leader Lease"
    };
    vec![
        (
            "reconciliation".to_string(),
            Check {
                status: OK.into(),
                detail: Some(reconciliation),
            },
        ),
        (
            "leader".to_string(),
            Check {
                status: OK.into(),
                detail: Some(leader.to_string()),
            },
        ),
    ]
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

/// Overall health: `ok`, `degraded` (provider failing; still 200) or `unhealthy` (storage
/// failing; 503).
#[utoipa::path(
    get,
    path = "/health",
    tag = "probes",
    responses(
        (status = 200, description = "ok or degraded", body = HealthReport),
        (status = 503, description = "unhealthy: storage unavailable", body = HealthReport),
    )
)]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthReport>) {
    let checks = checks(&state).await;
    let store_ok = checks.get("store").is_some_and(|c| c.status == OK);
    let all_ok = checks.values().all(|c| c.status == OK);
    match (store_ok, all_ok) {
        (true, true) => (StatusCode::OK, Json(report(OK, checks))),
        (true, false) => (StatusCode::OK, Json(report("degraded", checks))),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(report("unhealthy", checks)),
        ),
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
    let requests = state
        .broker()
        .store
        .list_requests(&RequestFilter::default())
        .await?;
    let mut counts: BTreeMap<&'static str, (orb_core::request::RequestStatus, i64)> =
        BTreeMap::new();
    for r in &requests {
        counts.entry(r.status.as_str()).or_insert((r.status, 0)).1 += 1;
    }
    state.metrics().set_request_counts(counts.into_values());
    if let Some(k8s) = state.kubernetes() {
        // Brings the breaker gauges up to date (open turns half-open with time alone).
        k8s.circuit_states();
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
    use orb_k8s::resilience::BreakerState::{Closed, HalfOpen, Open};

    #[test]
    fn circuit_breakers_fail_readiness_only_while_one_is_open() {
        let (name, closed) = circuit_breakers_check(&[("pod", Closed), ("job", Closed)]);
        assert_eq!(
            (name.as_str(), closed.status.as_str()),
            ("circuit_breakers", OK)
        );

        let (_, open) =
            circuit_breakers_check(&[("pod", Open), ("deployment", HalfOpen), ("job", Open)]);
        assert_eq!(open.status, FAILING);
        let detail = open.detail.unwrap();
        assert!(detail.contains("open for pod, job"), "{detail}");

        let (_, probing) = circuit_breakers_check(&[("pod", Closed), ("deployment", HalfOpen)]);
        assert_eq!(probing.status, OK);
        assert!(probing.detail.unwrap().contains("half-open for deployment"));
    }
}
