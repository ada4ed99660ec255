//! [`ApiRecorder`]: a `tower::Service` in place of the apiserver connection that records every
//! request a [`kube::Client`] sends and answers it from a small table of scripted replies.
//!
//! It pins a handler's exact call sequence (which objects it reads, patches, scales or
//! creates, in which order, with which bodies) without a cluster. It does not emulate
//! Kubernetes: its replies are the minimum the code under test needs to go on, and nothing
//! checks them against what an apiserver would say. What Kubernetes does with these calls is
//! tested on the real control plane, by the cluster tests (`cargo test -p orb-k8s --test
//! cluster -- --include-ignored`).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, header};
use kube::client::Body;
use serde_json::{Value, json};

/// One request the client sent.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    pub method: Method,
    /// The path with its query, as sent (`/api/v1/namespaces/batch/pods?&labelSelector=…`).
    pub path: String,
    /// The JSON body, if the request had one (a body that is not JSON is kept as a string).
    pub body: Option<Value>,
}

impl RecordedCall {
    /// `"<METHOD> <path with query>"`, the form the tests compare sequences in.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[derive(Debug, Clone)]
enum Answer {
    Json(StatusCode, Value),
    /// The request's own body back (what a create returns, near enough for the code that
    /// reads the created object's name and labels).
    Echo(StatusCode),
}

#[derive(Debug, Clone)]
struct Rule {
    method: Method,
    path_prefix: String,
    answer: Answer,
}

#[derive(Debug, Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<Vec<RecordedCall>>,
}

/// Records the requests of the [`kube::Client`] made by [`ApiRecorder::client`] and answers
/// each with the first reply whose method matches and whose path prefix starts the request's
/// path (query included), in the order the replies were added. A request no reply matches is
/// answered `404` with a `Status` naming the request, so the code under test fails with a
/// clear error (and the recorded sequence shows the call).
///
/// ```text
/// let recorder = ApiRecorder::new()
///     .reply(Method::GET, "/apis/apps/v1/namespaces/batch/deployments/d", 200, deployment)
///     .echo(Method::POST, "/api/v1/namespaces/batch/pods?", 201);
/// let client = recorder.client();
/// // ... run the handler with `client` ...
/// assert_eq!(recorder.lines(), ["GET /apis/apps/v1/namespaces/batch/deployments/d", ...]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ApiRecorder {
    shared: Arc<Shared>,
}

impl ApiRecorder {
    /// A recorder with no replies: every request is answered 404.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `method` requests whose path (with query) starts with `path_prefix` with
    /// `status` and the JSON `body`.
    pub fn reply(self, method: Method, path_prefix: &str, status: u16, body: Value) -> Self {
        self.rule(method, path_prefix, Answer::Json(status_code(status), body))
    }

    /// Answers `method` requests whose path starts with `path_prefix` with `status` and the
    /// request's own body.
    pub fn echo(self, method: Method, path_prefix: &str, status: u16) -> Self {
        self.rule(method, path_prefix, Answer::Echo(status_code(status)))
    }

    /// A client whose every request goes to this recorder (default namespace `default`).
    /// Needs a Tokio runtime: the client's buffer runs as a task.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    /// Every request so far, in the order the client sent them.
    pub fn calls(&self) -> Vec<RecordedCall> {
        lock(&self.shared.calls).clone()
    }

    /// [`RecordedCall::line`] of every request so far.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.shared.calls)
            .iter()
            .map(RecordedCall::line)
            .collect()
    }

    fn rule(self, method: Method, path_prefix: &str, answer: Answer) -> Self {
        lock(&self.shared.rules).push(Rule {
            method,
            path_prefix: path_prefix.to_string(),
            answer,
        });
        self
    }

    fn answer(&self, call: &RecordedCall) -> Response<Body> {
        let rule = lock(&self.shared.rules)
            .iter()
            .find(|r| r.method == call.method && call.path.starts_with(&r.path_prefix))
            .cloned();
        let (status, body) = match rule.map(|r| r.answer) {
            Some(Answer::Json(status, body)) => (status, body),
            Some(Answer::Echo(status)) => (status, call.body.clone().unwrap_or(Value::Null)),
            None => (
                StatusCode::NOT_FOUND,
                json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": format!(
                        "the ApiRecorder has no reply for {}; add one if the code under test \
                         should get an answer",
                        call.line()
                    ),
                }),
            ),
        };
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
            .expect("a response from a valid status and header")
    }
}

impl tower::Service<Request<Body>> for ApiRecorder {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    /// Records the request here, not in the returned future, so the recorded order is the
    /// order the client handed requests over (the client's buffer calls this in that order).
    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string());
        // kube sends whole bodies (never a stream) for the calls orb makes, so they are ready.
        let body = match body.collect_bytes().now_or_never() {
            Some(Ok(bytes)) if bytes.is_empty() => None,
            Some(Ok(bytes)) => Some(
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into())),
            ),
            Some(Err(e)) => Some(Value::String(format!("<unreadable body: {e}>"))),
            None => Some(Value::String("<streamed body>".into())),
        };
        let call = RecordedCall {
            method: parts.method,
            path,
            body,
        };
        let response = self.answer(&call);
        lock(&self.shared.calls).push(call);
        Box::pin(async move { Ok(response) })
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or_else(|_| panic!("{status} is not an HTTP status"))
}

/// A poisoned lock only means another test thread panicked mid-push; the data is still whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
