//! Resilience of the Kubernetes calls: one retry layer inside the kube client (429, 5xx and
//! transport errors, capped exponential backoff, `Retry-After`), and one circuit breaker per
//! handler kind around the provider's handler calls, so a failing apiserver is not hammered.

pub mod breaker;
pub mod retry;

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::client::ClientBuilder;

pub use breaker::{Admission, BreakerState, CallOutcome, CircuitBreaker, Refusal};
pub use retry::{RetryCause, RetryLayer, RetryPolicy};

use orb_core::ProviderApi;

use crate::config::K8sProviderConfig;
use crate::error::K8sError;
use crate::metrics::HandlerLabels;
use crate::metrics::K8sMetrics;

/// A kube client for `config` with orb's retry layer outermost (it sees each call once, and
/// every attempt goes through auth again). kube's own retry must be off in `config`. Like
/// kube's `Client::new`, it must run inside a Tokio runtime (both start a buffer task).
pub fn client_with_retries(
    config: kube::Config,
    policy: RetryPolicy,
    metrics: &K8sMetrics,
) -> Result<Client, K8sError> {
    debug_assert!(!config.default_retry, "orb owns the only retry layer");
    let builder = ClientBuilder::try_from(config).map_err(|e| K8sError::Client(e.to_string()))?;
    Ok(builder
        .with_layer(&RetryLayer::new(policy, metrics.clone()))
        .build())
}

/// The `circuit_state{handler}` label of a kind.
pub fn handler_label(kind: ProviderApi) -> &'static str {
    match kind {
        ProviderApi::Pod => "pod",
        ProviderApi::Deployment => "deployment",
        ProviderApi::StatefulSet => "statefulset",
        ProviderApi::Job => "job",
    }
}

/// Whether a handler call's result means the apiserver is failing: transport errors, 429
/// and 5xx (after the retry layer gave up). Client errors are answers, and refusals decided
/// by orb say nothing about the apiserver.
pub fn call_outcome<T>(result: &Result<T, K8sError>) -> CallOutcome {
    match result {
        Err(K8sError::Api {
            code: None | Some(429 | 500..=599),
            ..
        }) => CallOutcome::Failed,
        _ => CallOutcome::Answered,
    }
}

/// The four breakers of one provider, with their gauges.
pub struct HandlerBreakers {
    breakers: [Mutex<CircuitBreaker>; 4],
    metrics: K8sMetrics,
}

fn index(kind: ProviderApi) -> usize {
    match kind {
        ProviderApi::Pod => 0,
        ProviderApi::Deployment => 1,
        ProviderApi::StatefulSet => 2,
        ProviderApi::Job => 3,
    }
}

impl HandlerBreakers {
    pub fn new(config: &K8sProviderConfig, metrics: K8sMetrics) -> Self {
        let make = || {
            Mutex::new(CircuitBreaker::new(
                config.circuit_breaker_failure_threshold,
                config.circuit_breaker_reset(),
            ))
        };
        let breakers = Self {
            breakers: [make(), make(), make(), make()],
            metrics,
        };
        for kind in ProviderApi::ALL {
            breakers.publish(kind, BreakerState::Closed);
        }
        breakers
    }

    fn publish(&self, kind: ProviderApi, state: BreakerState) {
        self.metrics
            .circuit_state
            .get_or_create(&HandlerLabels {
                handler: handler_label(kind),
            })
            .set(state.gauge_value());
    }

    fn with<R>(&self, kind: ProviderApi, f: impl FnOnce(&mut CircuitBreaker) -> R) -> R {
        let mut breaker = self.breakers[index(kind)]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let result = f(&mut breaker);
        let state = breaker.state(Instant::now());
        drop(breaker);
        self.publish(kind, state);
        result
    }

    /// Every breaker's state now (and the gauges brought up to date).
    pub fn states(&self) -> Vec<(&'static str, BreakerState)> {
        ProviderApi::ALL
            .into_iter()
            .map(|kind| {
                (
                    handler_label(kind),
                    self.with(kind, |b| b.state(Instant::now())),
                )
            })
            .collect()
    }

    /// Runs `call` unless `kind`'s breaker is open, and records how it went.
    pub async fn guard<T, F>(&self, kind: ProviderApi, call: F) -> Result<T, K8sError>
    where
        F: Future<Output = Result<T, K8sError>>,
    {
        let admission = self
            .with(kind, |b| b.admit(Instant::now()))
            .map_err(|refusal| K8sError::CircuitOpen {
                handler: handler_label(kind),
                failures: refusal.failures,
                retry_in_secs: retry_secs(refusal.retry_in),
            })?;
        let mut pending = PendingCall {
            breakers: self,
            kind,
            admission: Some(admission),
        };
        let result = call.await;
        let outcome = call_outcome(&result);
        if outcome == CallOutcome::Failed {
            tracing::warn!(
                handler = handler_label(kind),
                "Kubernetes API call failed after retries; counted by the circuit breaker"
            );
        }
        pending.finish(outcome);
        result
    }
}

/// Whole seconds, rounded up, so "0s" only means "a probe is already running".
fn retry_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// An admitted call; dropped unfinished (the caller's future was cancelled), it frees the
/// probe slot so the breaker does not stay half-open forever.
struct PendingCall<'a> {
    breakers: &'a HandlerBreakers,
    kind: ProviderApi,
    admission: Option<Admission>,
}

impl PendingCall<'_> {
    fn finish(&mut self, outcome: CallOutcome) {
        if let Some(admission) = self.admission.take() {
            self.breakers
                .with(self.kind, |b| b.record(admission, outcome, Instant::now()));
        }
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            self.breakers.with(self.kind, |b| b.abandon(admission));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: Option<u16>) -> Result<(), K8sError> {
        Err(K8sError::Api {
            operation: "creating pod p".into(),
            code,
            detail: "x".into(),
        })
    }

    #[test]
    fn only_unanswered_calls_count_as_failures() {
        assert_eq!(call_outcome(&api_error(None)), CallOutcome::Failed);
        for code in [429, 500, 503, 504] {
            assert_eq!(call_outcome(&api_error(Some(code))), CallOutcome::Failed);
        }
        for code in [400, 401, 403, 404, 409, 410, 422] {
            assert_eq!(call_outcome(&api_error(Some(code))), CallOutcome::Answered);
        }
        assert_eq!(call_outcome(&Ok::<_, K8sError>(())), CallOutcome::Answered);
        assert_eq!(
            call_outcome(&Err::<(), _>(K8sError::Refused("no".into()))),
            CallOutcome::Answered
        );
    }

    fn config(threshold: u32) -> K8sProviderConfig {
        K8sProviderConfig {
            circuit_breaker_failure_threshold: threshold,
            ..K8sProviderConfig::default()
        }
    }

    #[tokio::test]
    async fn an_open_breaker_refuses_without_running_the_call_and_sets_the_gauge() {
        let metrics = K8sMetrics::new();
        let breakers = HandlerBreakers::new(&config(2), metrics.clone());
        for _ in 0..2 {
            let r = breakers
                .guard(ProviderApi::Job, async { api_error(Some(503)) })
                .await;
            assert!(r.is_err());
        }
        let mut ran = false;
        let refused = breakers
            .guard(ProviderApi::Job, async {
                ran = true;
                Ok(())
            })
            .await
            .unwrap_err();
        assert!(!ran);
        let text = refused.to_string();
        assert!(
            text.starts_with("the Kubernetes API has failed 2 times in a row for job calls; orb stops calling it for 60s (circuit breaker open)"),
            "{text}"
        );
        let gauge = |h| {
            metrics
                .circuit_state
                .get_or_create(&HandlerLabels { handler: h })
                .get()
        };
        assert_eq!(gauge("job"), 1);
        assert_eq!(gauge("pod"), 0);
        assert!(breakers.states().contains(&("job", BreakerState::Open)));
        // Other handlers are not affected.
        breakers
            .guard(ProviderApi::Pod, async { Ok(()) })
            .await
            .unwrap();
    }
}
