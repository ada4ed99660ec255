//! orb's one retry layer: a tower layer around the kube client's HTTP stack (kube's own
//! retry stays off, see `kube_config_for`). It retries throttling (429), server errors (5xx)
//! and transport failures with capped exponential backoff, honouring `Retry-After`; client
//! errors are the apiserver's real answer and go straight back. Watches are never retried
//! here: the watch loop resumes from its last resourceVersion on its own.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::config::K8sProviderConfig;
use crate::metrics::K8sMetrics;
use crate::metrics::RetryLabels;

/// Why one attempt may be repeated; the value of `api_retries{cause}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCause {
    /// 429 Too Many Requests.
    Throttled,
    /// A 5xx other than 501/505 (those are permanent).
    ServerError,
    /// The connection was refused, reset or closed early, or timed out.
    Transport,
}

impl RetryCause {
    pub fn label(self) -> &'static str {
        match self {
            Self::Throttled => "throttled",
            Self::ServerError => "server_error",
            Self::Transport => "transport",
        }
    }
}

/// The cause an HTTP status gives to try again, or `None` when the answer stands
/// (2xx, 3xx, and 400/401/403/404/409/410/422 and every other 4xx).
pub fn classify_status(status: StatusCode) -> Option<RetryCause> {
    match status.as_u16() {
        429 => Some(RetryCause::Throttled),
        501 | 505 => None,
        500..=599 => Some(RetryCause::ServerError),
        _ => None,
    }
}

/// `Transport` when `error` (from the HTTP stack, before any answer) is a network failure
/// worth another attempt: refused, reset, aborted or closed connections and timeouts. TLS and
/// credential errors are not: they fail the same way every time.
pub fn classify_error(error: &(dyn std::error::Error + 'static)) -> Option<RetryCause> {
    use std::io::ErrorKind;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::TimedOut
            )
            .then_some(RetryCause::Transport);
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled() || h.is_timeout())
        {
            return Some(RetryCause::Transport);
        }
        current = e.source();
    }
    None
}

/// True for watch requests (`?watch=true`), which this layer passes through untouched.
pub fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

/// True for the Eviction API, whose 429 is a PodDisruptionBudget saying no, not throttling:
/// the caller decides what to do about it, and repeating the call at once would not help.
pub fn is_eviction(uri: &http::Uri) -> bool {
    uri.path().ends_with("/eviction")
}

/// `Retry-After` in whole seconds (the apiserver's form); HTTP dates are ignored.
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The retry settings of the provider config.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    pub fn from_config(config: &K8sProviderConfig) -> Self {
        Self {
            max_retries: config.max_retries,
            base_delay: config.retry_base(),
            max_delay: config.retry_cap(),
        }
    }

    /// The wait before retry number `retry` (0 for the first retry): `base * 2^retry`, or the
    /// server's `Retry-After` when it sent one, both capped at `max_delay`.
    pub fn delay(&self, retry: u32, server_hint: Option<Duration>) -> Duration {
        let wait = server_hint.unwrap_or_else(|| {
            self.base_delay
                .checked_mul(2u32.saturating_pow(retry))
                .unwrap_or(self.max_delay)
        });
        wait.min(self.max_delay)
    }
}

/// Wraps the kube client's HTTP service in [`RetryService`].
#[derive(Clone)]
pub struct RetryLayer {
    policy: Arc<RetryPolicy>,
    metrics: K8sMetrics,
}

impl RetryLayer {
    pub fn new(policy: RetryPolicy, metrics: K8sMetrics) -> Self {
        Self {
            policy: Arc::new(policy),
            metrics,
        }
    }
}

type Inner<S> = Buffer<Request<Body>, <S as Service<Request<Body>>>::Future>;

impl<S, B> Layer<S> for RetryLayer
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        // Each attempt needs the inner service again from inside a 'static future; kube's
        // stack is a boxed service (not Clone), so it goes behind a buffer.
        RetryService {
            inner: Buffer::new(inner, 1024),
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

pub struct RetryService<S>
where
    S: Service<Request<Body>>,
{
    inner: Inner<S>,
    policy: Arc<RetryPolicy>,
    metrics: K8sMetrics,
}

/// A second copy of a request, when its body is in memory (every kube request but streams).
fn copy_request(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

impl<S, B> Service<Request<Body>> for RetryService<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited per attempt inside the future (a clone of the buffer does
        // not inherit this instance's reserved slot).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let policy = self.policy.clone();
        let metrics = self.metrics.clone();
        Box::pin(async move {
            if is_watch(req.uri()) || policy.max_retries == 0 {
                return inner.oneshot(req).await;
            }
            let mut retry = 0;
            loop {
                let Some(attempt) = copy_request(&req) else {
                    return inner.oneshot(req).await;
                };
                let result = inner.clone().oneshot(attempt).await;
                let (cause, hint) = match &result {
                    Ok(response)
                        if response.status() == StatusCode::TOO_MANY_REQUESTS
                            && is_eviction(req.uri()) =>
                    {
                        (None, None)
                    }
                    Ok(response) => {
                        let cause = classify_status(response.status());
                        let honoured = matches!(response.status().as_u16(), 429 | 503);
                        (
                            cause,
                            honoured.then(|| retry_after(response.headers())).flatten(),
                        )
                    }
                    Err(e) => (classify_error(e.as_ref()), None),
                };
                let Some(cause) = cause else { return result };
                if retry >= policy.max_retries {
                    return result;
                }
                let delay = policy.delay(retry, hint);
                metrics
                    .api_retries
                    .get_or_create(&RetryLabels {
                        cause: cause.label(),
                    })
                    .inc();
                let outcome = match &result {
                    Ok(response) => response.status().to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(
                    method = %req.method(),
                    path = req.uri().path(),
                    cause = cause.label(),
                    retry = retry + 1,
                    max_retries = policy.max_retries,
                    delay_ms = delay.as_millis() as u64,
                    "Kubernetes API call failed ({outcome}); retrying"
                );
                drop(result);
                tokio::time::sleep(delay).await;
                retry += 1;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(429, Some(RetryCause::Throttled))]
    #[case(500, Some(RetryCause::ServerError))]
    #[case(502, Some(RetryCause::ServerError))]
    #[case(503, Some(RetryCause::ServerError))]
    #[case(504, Some(RetryCause::ServerError))]
    #[case(501, None)]
    #[case(200, None)]
    #[case(201, None)]
    #[case(400, None)]
    #[case(401, None)]
    #[case(403, None)]
    #[case(404, None)]
    #[case(409, None)]
    #[case(410, None)]
    #[case(422, None)]
    fn statuses_retried_are_throttling_and_server_errors_only(
        #[case] code: u16,
        #[case] want: Option<RetryCause>,
    ) {
        assert_eq!(
            classify_status(StatusCode::from_u16(code).unwrap()),
            want,
            "{code}"
        );
    }

    #[rstest]
    #[case(std::io::ErrorKind::ConnectionReset, Some(RetryCause::Transport))]
    #[case(std::io::ErrorKind::ConnectionRefused, Some(RetryCause::Transport))]
    #[case(std::io::ErrorKind::TimedOut, Some(RetryCause::Transport))]
    #[case(std::io::ErrorKind::UnexpectedEof, Some(RetryCause::Transport))]
    #[case(std::io::ErrorKind::InvalidData, None)]
    #[case(std::io::ErrorKind::PermissionDenied, None)]
    fn network_failures_are_transport_errors(
        #[case] kind: std::io::ErrorKind,
        #[case] want: Option<RetryCause>,
    ) {
        // Wrapped once, as the HTTP client wraps the socket error.
        #[derive(Debug, thiserror::Error)]
        #[error("client error (SendRequest)")]
        struct Wrapper(#[source] std::io::Error);
        let error = Wrapper(std::io::Error::new(kind, "boom"));
        assert_eq!(classify_error(&error), want);
    }

    #[test]
    fn an_error_without_a_network_cause_is_not_retried() {
        let error: BoxError = "invalid kubeconfig token".into();
        assert_eq!(classify_error(error.as_ref()), None);
    }

    #[rstest]
    #[case("/api/v1/namespaces/a/pods?watch=true&resourceVersion=5", true)]
    #[case("/api/v1/pods?labelSelector=x&watch=1", true)]
    #[case("/api/v1/namespaces/a/pods?labelSelector=watch%3Dtrue", false)]
    #[case("/api/v1/namespaces/a/pods", false)]
    #[case("/api/v1/namespaces/a/pods?watch=false", false)]
    fn only_watch_requests_are_watches(#[case] uri: &str, #[case] watch: bool) {
        assert_eq!(is_watch(&uri.parse().unwrap()), watch);
    }

    #[rstest]
    #[case("/api/v1/namespaces/a/pods/p-1/eviction", true)]
    #[case("/api/v1/namespaces/a/pods/p-1/eviction?dryRun=All", true)]
    #[case("/api/v1/namespaces/a/pods/p-1", false)]
    fn evictions_are_recognised(#[case] uri: &str, #[case] eviction: bool) {
        assert_eq!(is_eviction(&uri.parse().unwrap()), eviction);
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }

    #[rstest]
    #[case(0, 1)]
    #[case(1, 2)]
    #[case(2, 4)]
    #[case(4, 16)]
    #[case(5, 30)]
    #[case(40, 30)]
    fn backoff_doubles_from_the_base_up_to_the_cap(#[case] retry: u32, #[case] secs: u64) {
        assert_eq!(policy().delay(retry, None), Duration::from_secs(secs));
    }

    #[test]
    fn retry_after_replaces_the_backoff_but_not_the_cap() {
        assert_eq!(
            policy().delay(3, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            policy().delay(0, Some(Duration::from_secs(120))),
            Duration::from_secs(30)
        );
    }

    #[rstest]
    #[case(Some("3"), Some(3))]
    #[case(Some(" 1 "), Some(1))]
    #[case(Some("Wed, 21 Oct 2015 07:28:00 GMT"), None)]
    #[case(None, None)]
    fn retry_after_is_read_in_seconds(#[case] value: Option<&str>, #[case] want: Option<u64>) {
        let mut headers = http::HeaderMap::new();
        if let Some(v) = value {
            headers.insert(http::header::RETRY_AFTER, v.parse().unwrap());
        }
        assert_eq!(retry_after(&headers), want.map(Duration::from_secs));
    }
}
