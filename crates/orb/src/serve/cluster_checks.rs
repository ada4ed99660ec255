//! The `/readyz` checks of the Kubernetes side of `orb serve`: the watch cache, the handlers'
//! circuit breakers, the start-up reconciliation and this replica's leadership. They read
//! what the provider and the daemon report and decide nothing else.

use orb_k8s::K8sProvider;
use orb_k8s::daemon::reconcile::DaemonStatus;

use super::model::Check;

const OK: &str = "ok";
const FAILING: &str = "failing";

/// The background parts of the Kubernetes provider. A watch cache that does not serve fails
/// readiness: status reads still LIST meanwhile, but orb lacks what it needs to see pods
/// change (first LIST pending, or the watch failing past `stale_cache_timeout_seconds`).
pub(super) fn kubernetes_checks(k8s: &K8sProvider) -> Vec<(String, Check)> {
    let mut checks = Vec::new();
    if let Some(cache) = k8s.pod_cache() {
        let health = cache.health();
        let serving = cache.serving();
        let detail = if serving {
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
                "not serving, status reads LIST meanwhile ({}); check the apiserver and orb's \
                 list/watch rights on pods",
                if waiting.is_empty() {
                    "no LIST answered yet".to_string()
                } else {
                    waiting.join("; ")
                }
            )
        };
        checks.push((
            "watch_cache".to_string(),
            Check {
                status: if serving { OK } else { FAILING }.into(),
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
/// GC; the detail says what happened. Nothing until the background tasks have settled this
/// replica's leadership (so nothing when they did not start).
pub(super) fn daemon_checks(status: &DaemonStatus) -> Vec<(String, Check)> {
    if status.leadership().is_none() {
        return Vec::new();
    }
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
