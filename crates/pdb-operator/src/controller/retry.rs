//! A PDB write that fails transiently (429 from API Priority and Fairness, 5xx while the
//! apiserver is busy or restarting, a dropped connection) is tried again a few times within the
//! reconcile instead of waiting for the 30 s requeue; each outcome is counted in the
//! `pdb_operator_retry_*` metrics. The client itself retries nothing (`default_retry = false`),
//! so every retry is visible here. Anything else (a conflict, a validation error, a 404) is
//! returned at once: trying again cannot change it.

use std::future::Future;
use std::time::Duration;

use crate::metrics::Metrics;

/// Attempts of one write, the first included.
pub const MAX_ATTEMPTS: u32 = 3;

/// Whether trying the same call again can succeed.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// `error_type` label of a failed call: the API status reason (`toomanyrequests`,
/// `internalerror`, ...), `http_<code>` without one, or `transport`.
pub fn error_type(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.reason.is_empty() => s.reason.to_lowercase(),
        kube::Error::Api(s) => format!("http_{}", s.code),
        _ => "transport".into(),
    }
}

/// How long to wait after failed attempt `attempt` (1-based): the apiserver's Retry-After when
/// it sent one (at most 2 s, so a reconciler slot is not held long), else 100 ms, 200 ms, ...
pub fn backoff(e: &kube::Error, attempt: u32) -> Duration {
    let asked = match e {
        kube::Error::Api(s) => s.details.as_ref().map_or(0, |d| d.retry_after_seconds),
        _ => 0,
    };
    if asked > 0 {
        Duration::from_secs(u64::from(asked).min(2))
    } else {
        Duration::from_millis(100 << (attempt - 1).min(4))
    }
}

/// Runs `call` up to [`MAX_ATTEMPTS`] times while it fails transiently. `operation` names the
/// write in the metrics (`apply_pdb`, `delete_pdb`).
pub async fn with_retries<T, F, Fut>(
    metrics: &Metrics,
    operation: &'static str,
    mut call: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => {
                if attempt > 1 {
                    metrics
                        .retry_success_after_retry
                        .get_or_create(&vec![
                            ("operation", operation.to_string()),
                            ("attempts_required", attempt.to_string()),
                        ])
                        .inc();
                }
                return Ok(v);
            }
            Err(e) if is_transient(&e) && attempt < MAX_ATTEMPTS => {
                metrics
                    .retry_attempts
                    .get_or_create(&vec![
                        ("operation", operation.to_string()),
                        ("error_type", error_type(&e)),
                        ("attempt", attempt.to_string()),
                    ])
                    .inc();
                tracing::debug!(operation, attempt, error = %e, "transient API error; trying again");
                tokio::time::sleep(backoff(&e, attempt)).await;
                attempt += 1;
            }
            Err(e) => {
                if is_transient(&e) {
                    metrics
                        .retry_exhausted
                        .get_or_create(&vec![
                            ("operation", operation.to_string()),
                            ("final_error_type", error_type(&e)),
                        ])
                        .inc();
                }
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use rstest::rstest;
    use std::cell::Cell;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("x", reason).with_code(code).boxed())
    }

    #[rstest]
    #[case::too_many_requests(429, "TooManyRequests", true)]
    #[case::internal(500, "InternalError", true)]
    #[case::unavailable(503, "ServiceUnavailable", true)]
    #[case::conflict(409, "Conflict", false)]
    #[case::invalid(422, "Invalid", false)]
    #[case::not_found(404, "NotFound", false)]
    fn only_transient_errors_are_retried(
        #[case] code: u16,
        #[case] reason: &str,
        #[case] transient: bool,
    ) {
        assert_eq!(is_transient(&api(code, reason)), transient);
    }

    fn lines(m: &Metrics, family: &str) -> Vec<String> {
        let mut out: Vec<String> = m
            .render()
            .lines()
            .filter(|l| l.starts_with(family))
            .map(str::to_string)
            .collect();
        out.sort();
        out
    }

    #[tokio::test]
    async fn two_throttled_attempts_then_success_are_counted() {
        let m = Metrics::new();
        let calls = Cell::new(0);
        let got = with_retries(&m, "apply_pdb", || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move {
                if n < 3 {
                    Err(api(429, "TooManyRequests"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.unwrap(), 3);
        assert_eq!(
            lines(&m, "pdb_operator_retry_attempts_total"),
            [
                "pdb_operator_retry_attempts_total{operation=\"apply_pdb\",error_type=\"toomanyrequests\",attempt=\"1\"} 1",
                "pdb_operator_retry_attempts_total{operation=\"apply_pdb\",error_type=\"toomanyrequests\",attempt=\"2\"} 1",
            ]
        );
        assert_eq!(
            lines(&m, "pdb_operator_retry_success_after_retry_total"),
            [
                "pdb_operator_retry_success_after_retry_total{operation=\"apply_pdb\",attempts_required=\"3\"} 1"
            ]
        );
    }

    #[tokio::test]
    async fn a_write_failing_every_time_is_exhausted_and_a_conflict_is_not_retried() {
        let m = Metrics::new();
        let calls = Cell::new(0);
        let got: Result<(), _> = with_retries(&m, "delete_pdb", || {
            calls.set(calls.get() + 1);
            async { Err(api(503, "ServiceUnavailable")) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(calls.get(), MAX_ATTEMPTS);
        assert_eq!(
            lines(&m, "pdb_operator_retry_exhausted_total"),
            [
                "pdb_operator_retry_exhausted_total{operation=\"delete_pdb\",final_error_type=\"serviceunavailable\"} 1"
            ]
        );
        calls.set(0);
        let got: Result<(), _> = with_retries(&m, "apply_pdb", || {
            calls.set(calls.get() + 1);
            async { Err(api(409, "Conflict")) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(calls.get(), 1, "a conflict is answered at once");
    }

    #[test]
    fn backoff_follows_retry_after_within_limits() {
        let mut s = Status::failure("slow down", "TooManyRequests").with_code(429);
        s.details =
            Some(serde_json::from_value(serde_json::json!({"retryAfterSeconds": 9})).unwrap());
        assert_eq!(
            backoff(&kube::Error::Api(s.boxed()), 1),
            Duration::from_secs(2)
        );
        assert_eq!(backoff(&api(503, "x"), 2), Duration::from_millis(200));
    }
}
