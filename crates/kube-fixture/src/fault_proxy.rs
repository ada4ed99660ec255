//! A fault-injecting proxy in front of the local apiserver, for resilience tests. It listens
//! on 127.0.0.1 over plain HTTP and forwards to the real apiserver with the credentials of
//! the `TestCluster` it starts with (admin, or `BrokerIdentity::as_cluster()` for orb's
//! shipped identity), or with the caller's own Authorization header when it sends one
//! (`BrokerIdentity::through`), except for the requests it decides to break: a 429 with
//! `Retry-After: 1`, a 500, a reset connection, or added latency. Rates, scripted faults and
//! the request filter change at runtime; every request seen is logged for assertions.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::{Client, Config};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::TestCluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 429 Too Many Requests with `Retry-After: 1`.
    Throttle,
    /// 500 Internal Server Error.
    ServerError,
    /// The connection is reset without an answer.
    Reset,
    /// The request reaches the apiserver, then the connection is reset before its answer
    /// (the client cannot know whether the call took effect).
    LostAnswer,
    /// 410 Gone, reason `Expired`, as the apiserver answers a watch or list from a
    /// resourceVersion that has been compacted.
    Gone,
}

/// Which requests faults apply to; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct RequestMatch {
    /// A substring of the path (e.g. `/pods`).
    pub path_contains: Option<String>,
    /// Methods; empty means all.
    pub methods: Vec<Method>,
}

impl RequestMatch {
    pub fn path(fragment: &str) -> Self {
        Self {
            path_contains: Some(fragment.to_string()),
            methods: Vec::new(),
        }
    }

    pub fn matches(&self, method: &Method, path: &str) -> bool {
        self.path_contains
            .as_deref()
            .is_none_or(|fragment| path.contains(fragment))
            && (self.methods.is_empty() || self.methods.contains(method))
    }
}

/// Random faults: each matching request draws once for a fault (the rates add up to at most
/// 1) and once for latency.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    pub throttle_rate: f64,
    pub server_error_rate: f64,
    pub reset_rate: f64,
    pub lost_answer_rate: f64,
    /// Share of matching requests delayed by a random time up to `latency`.
    pub latency_rate: f64,
    pub latency: Duration,
    pub only: RequestMatch,
}

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: Method,
    /// Path and query.
    pub path: String,
    /// The fault injected instead of forwarding, if any.
    pub fault: Option<Fault>,
    pub delayed: bool,
    /// The apiserver's status when forwarded.
    pub upstream_status: Option<u16>,
}

/// Totals over every request seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub seen: usize,
    pub forwarded: usize,
    pub throttled: usize,
    pub server_errors: usize,
    pub resets: usize,
    pub lost_answers: usize,
    pub gone: usize,
    pub delayed: usize,
}

impl FaultCounts {
    pub fn injected(&self) -> usize {
        self.throttled + self.server_errors + self.resets + self.lost_answers + self.gone
    }
}

struct Shared {
    upstream: Client,
    /// The apiserver without credentials of its own: a request that brings an Authorization
    /// header (orb's ServiceAccount token, see `BrokerIdentity::through`) goes as that caller.
    bare: Client,
    plan: Mutex<FaultPlan>,
    script: Mutex<(RequestMatch, VecDeque<Fault>)>,
    log: Mutex<Vec<SeenRequest>>,
    rng: Mutex<u64>,
    /// Open client connections, so a test can cut them (a watch in flight included).
    connections: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Acts as a proxy that speaks JSON only: protobuf is struck from every `Accept`.
    json_only: std::sync::atomic::AtomicBool,
    /// Requests matching this wait (before any fault) until it is lifted.
    hold: tokio::sync::watch::Sender<Option<RequestMatch>>,
    /// How many requests wait on `hold` now.
    held: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// xorshift64*: enough randomness for fault draws, no extra dependency.
    fn draw(&self) -> f64 {
        let mut state = self.rng.lock().unwrap();
        let mut x = *state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault and delay for one request.
    fn decide(&self, method: &Method, path: &str) -> (Option<Fault>, Option<Duration>) {
        {
            let mut script = self.script.lock().unwrap();
            if script.0.matches(method, path)
                && let Some(fault) = script.1.pop_front()
            {
                return (Some(fault), None);
            }
        }
        let plan = self.plan.lock().unwrap().clone();
        if !plan.only.matches(method, path) {
            return (None, None);
        }
        let u = self.draw();
        let mut edge = 0.0;
        let fault = [
            (plan.throttle_rate, Fault::Throttle),
            (plan.server_error_rate, Fault::ServerError),
            (plan.reset_rate, Fault::Reset),
            (plan.lost_answer_rate, Fault::LostAnswer),
        ]
        .into_iter()
        .find_map(|(rate, fault)| {
            edge += rate;
            (u < edge).then_some(fault)
        });
        let delay =
            (plan.latency_rate > 0.0 && !plan.latency.is_zero() && self.draw() < plan.latency_rate)
                .then(|| plan.latency.mul_f64(self.draw()));
        (fault, delay)
    }
}

/// The proxy; it stops accepting connections when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
    kubeconfig: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("connection reset by the fault proxy")]
struct InjectedReset;

fn status_body(code: StatusCode, reason: &str, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

const HOP_BY_HOP: [http::HeaderName; 4] = [
    http::header::HOST,
    http::header::CONNECTION,
    http::header::CONTENT_LENGTH,
    http::header::TRANSFER_ENCODING,
];

async fn forward(
    shared: &Shared,
    req: Request<Incoming>,
) -> Result<(Response<ProxyBody>, Option<u16>), BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut upstream = Request::builder()
        .method(parts.method.clone())
        .uri(path)
        .body(kube::client::Body::from(bytes))?;
    let json_only = shared.json_only.load(std::sync::atomic::Ordering::Relaxed);
    for (name, value) in &parts.headers {
        if HOP_BY_HOP.contains(name) {
            continue;
        }
        if json_only && name == http::header::ACCEPT {
            let kept: Vec<&str> = value
                .to_str()
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|media| !media.contains("protobuf"))
                .collect();
            let accept = if kept.is_empty() {
                "application/json".to_string()
            } else {
                kept.join(", ")
            };
            upstream
                .headers_mut()
                .append(name.clone(), http::HeaderValue::from_str(&accept)?);
            continue;
        }
        upstream.headers_mut().append(name.clone(), value.clone());
    }
    let client = if parts.headers.contains_key(http::header::AUTHORIZATION) {
        &shared.bare
    } else {
        &shared.upstream
    };
    match client.send(upstream).await {
        Ok(answer) => {
            let (mut parts, body) = answer.into_parts();
            for name in &HOP_BY_HOP {
                parts.headers.remove(name);
            }
            let status = parts.status.as_u16();
            let body = body.map_err(|e| Box::new(e) as BoxError).boxed_unsync();
            Ok((Response::from_parts(parts, body), Some(status)))
        }
        Err(e) => Ok((
            status_body(
                StatusCode::BAD_GATEWAY,
                "BadGateway",
                &format!("the fault proxy could not reach the apiserver: {e}"),
            ),
            None,
        )),
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, BoxError> {
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let holds =
        |hold: &Option<RequestMatch>| hold.as_ref().is_some_and(|m| m.matches(&method, &path));
    let mut gate = shared.hold.subscribe();
    if holds(&gate.borrow_and_update()) {
        use std::sync::atomic::Ordering::SeqCst;
        shared.held.fetch_add(1, SeqCst);
        // The sender lives in `shared`, which this request holds: the wait ends only by a lift.
        let _ = gate.wait_for(|hold| !holds(hold)).await;
        shared.held.fetch_sub(1, SeqCst);
    }
    let (fault, delay) = shared.decide(&method, &path);
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let mut seen = SeenRequest {
        method,
        path,
        fault,
        delayed: delay.is_some(),
        upstream_status: None,
    };
    let result = match fault {
        Some(Fault::Throttle) => {
            let mut r = status_body(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "injected by the fault proxy: too many requests, please try again later",
            );
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            Ok(r)
        }
        Some(Fault::ServerError) => Ok(status_body(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected by the fault proxy: internal error",
        )),
        Some(Fault::Reset) => Err(Box::new(InjectedReset) as BoxError),
        Some(Fault::Gone) => Ok(status_body(
            StatusCode::GONE,
            "Expired",
            "injected by the fault proxy: too old resource version",
        )),
        Some(Fault::LostAnswer) => {
            if let Ok((response, status)) = forward(&shared, req).await {
                seen.upstream_status = status;
                drop(response);
            }
            Err(Box::new(InjectedReset) as BoxError)
        }
        None => match forward(&shared, req).await {
            Ok((response, status)) => {
                seen.upstream_status = status;
                Ok(response)
            }
            Err(e) => Err(e),
        },
    };
    shared.log.lock().unwrap().push(seen);
    result
}

impl FaultProxy {
    /// Starts a proxy to `cluster`'s apiserver, injecting nothing until told to.
    pub async fn start(cluster: &TestCluster) -> FaultProxy {
        let upstream = crate::client_from(&cluster.kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("fault proxy: cannot build the upstream client: {e:#}"));
        let bare = bare_client(&cluster.kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("fault proxy: cannot build the bare client: {e:#}"));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fault proxy: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fault proxy: local address");
        let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        let shared = Arc::new(Shared {
            upstream,
            bare,
            plan: Mutex::new(FaultPlan::default()),
            script: Mutex::new((RequestMatch::default(), VecDeque::new())),
            log: Mutex::new(Vec::new()),
            rng: Mutex::new(seed),
            connections: Mutex::new(Vec::new()),
            json_only: std::sync::atomic::AtomicBool::new(false),
            hold: tokio::sync::watch::Sender::new(None),
            held: std::sync::atomic::AtomicUsize::new(0),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // A dropped connection then ends with a TCP RST, as a reset should.
                let _ = stream.set_zero_linger();
                let shared = accepting.clone();
                let task = tokio::spawn(async move {
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                let mut open = accepting.connections.lock().unwrap();
                open.retain(|c| !c.is_finished());
                open.push(task.abort_handle());
            }
        });
        let kubeconfig = std::env::temp_dir().join(format!(
            "orb-fault-proxy-{}.kubeconfig",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&kubeconfig, kubeconfig_text(addr))
            .unwrap_or_else(|e| panic!("fault proxy: writing {}: {e}", kubeconfig.display()));
        FaultProxy {
            addr,
            shared,
            accept,
            kubeconfig,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube config pointed at the proxy (no credentials needed; kube's retry off).
    pub fn kube_config(&self) -> Config {
        let url = format!("http://{}", self.addr)
            .parse()
            .expect("proxy URL is valid");
        let mut config = Config::new(url);
        config.default_namespace = "default".into();
        config.default_retry = false;
        config
    }

    /// A plain kube client through the proxy (no retry layer).
    pub fn client(&self) -> Client {
        Client::try_from(self.kube_config()).expect("client for the fault proxy")
    }

    /// A kubeconfig file naming the proxy, for spawning `orb`; removed with the proxy.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// From now on, strikes protobuf from every request's `Accept`, as a proxy that only
    /// passes JSON would (`false` forwards them untouched again).
    pub fn set_json_only(&self, json_only: bool) {
        self.shared
            .json_only
            .store(json_only, std::sync::atomic::Ordering::Relaxed);
    }

    /// Replaces the random fault plan.
    pub fn set_plan(&self, plan: FaultPlan) {
        *self.shared.plan.lock().unwrap() = plan;
    }

    /// The next requests matching `only` get exactly `faults`, in order (before the plan).
    pub fn script(&self, only: RequestMatch, faults: impl IntoIterator<Item = Fault>) {
        *self.shared.script.lock().unwrap() = (only, faults.into_iter().collect());
    }

    /// Holds every request matching `only` (it reaches neither the apiserver nor a fault)
    /// until [`lift_hold`](Self::lift_hold): a test can change the cluster between a client's
    /// calls at an exact point.
    pub fn hold(&self, only: RequestMatch) {
        self.shared.hold.send_replace(Some(only));
    }

    /// Lets the held requests (and later ones) through.
    pub fn lift_hold(&self) {
        self.shared.hold.send_replace(None);
    }

    /// How many requests are held now.
    pub fn held(&self) -> usize {
        self.shared.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.log.lock().unwrap().clone()
    }

    /// Requests seen so far whose method and path match `only`.
    pub fn requests_matching(&self, only: &RequestMatch) -> Vec<SeenRequest> {
        self.requests()
            .into_iter()
            .filter(|r| only.matches(&r.method, &r.path))
            .collect()
    }

    /// Resets every open client connection, watches in flight included; later requests
    /// connect again and meet the current plan.
    pub fn cut_connections(&self) -> usize {
        let mut open = self.shared.connections.lock().unwrap();
        let n = open.iter().filter(|c| !c.is_finished()).count();
        for c in open.drain(..) {
            c.abort();
        }
        n
    }

    pub fn counts(&self) -> FaultCounts {
        let log = self.shared.log.lock().unwrap();
        let mut counts = FaultCounts {
            seen: log.len(),
            ..FaultCounts::default()
        };
        for r in log.iter() {
            match r.fault {
                None => counts.forwarded += 1,
                Some(Fault::Throttle) => counts.throttled += 1,
                Some(Fault::ServerError) => counts.server_errors += 1,
                Some(Fault::Reset) => counts.resets += 1,
                Some(Fault::LostAnswer) => counts.lost_answers += 1,
                Some(Fault::Gone) => counts.gone += 1,
            }
            counts.delayed += usize::from(r.delayed);
        }
        counts
    }
}

/// A client of `kubeconfig`'s apiserver (its CA) that sends no credentials of its own.
async fn bare_client(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info = Default::default();
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

fn kubeconfig_text(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fault-proxy\n  cluster:\n    server: http://{addr}\n\
         users:\n- name: fault-proxy\n  user: {{}}\ncontexts:\n- name: fault-proxy\n  context:\n    cluster: fault-proxy\n    user: fault-proxy\n    namespace: default\n\
         current-context: fault-proxy\n"
    )
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_match_filters_by_path_fragment_and_method() {
        let only = RequestMatch {
            path_contains: Some("/pods".into()),
            methods: vec![Method::POST],
        };
        assert!(only.matches(&Method::POST, "/api/v1/namespaces/a/pods"));
        assert!(!only.matches(&Method::GET, "/api/v1/namespaces/a/pods"));
        assert!(!only.matches(&Method::POST, "/apis/apps/v1/namespaces/a/deployments"));
        assert!(RequestMatch::default().matches(&Method::DELETE, "/anything"));
    }

    #[test]
    fn the_kubeconfig_names_the_proxy_over_plain_http() {
        let text = kubeconfig_text("127.0.0.1:4321".parse().unwrap());
        let kc = kube::config::Kubeconfig::from_yaml(&text).expect("valid kubeconfig");
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("http://127.0.0.1:4321")
        );
    }
}
