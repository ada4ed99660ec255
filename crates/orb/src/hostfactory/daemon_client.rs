//! Sends one HostFactory call to a running `orb serve` over HTTP/1 (a Unix socket or TCP)
//! and returns the script reply it computed.
//!
//! A daemon that accepts connections may still be wedged. So the call is sent only after the
//! daemon has answered a ping (`GET /livez`) on the same connection within [`PING_TIMEOUT`].
//! A silent daemon is then skipped within seconds and the call was never sent, so running it
//! directly cannot do it twice. A live daemon gets the whole `reply_timeout` for the call
//! itself, so a slow acquire is never abandoned half-way. HostFactory calls carry no id of
//! their own that would let a repeated `requestMachines` be recognised. So once the call
//! is sent and the daemon stops answering, it is still not repeated
//! ([`ForwardError::Unanswered`]).

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use super::daemon_target::DaemonTarget;
use super::operations::{Operation, SCRIPT_OUTPUT_MEDIA_TYPE, ScriptOutputReader, ScriptReply};

/// Why a forward did not produce a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// Nothing reached the daemon (no socket, refused, connect timeout, or it refused the
    /// call before running it: 401, 403, 404); running directly is safe.
    #[error("{0}")]
    NotSent(String),
    /// The call may have reached the daemon (broken connection, reply timeout, a reply that
    /// is not a script reply). Repeating a request or return directly could do it twice.
    #[error("{0}")]
    Unanswered(String),
}

/// The route a call goes to.
pub fn route(op: Operation) -> String {
    format!("/api/v1/hostfactory/{}", op.name())
}

/// Where a call goes and how: the target, a Bearer token for a daemon with inbound auth, and
/// the two timeouts.
#[derive(Debug, Clone)]
pub struct Forward<'a> {
    pub target: &'a DaemonTarget,
    pub token: Option<&'a str>,
    pub connect_timeout: Duration,
    pub reply_timeout: Duration,
}

pub async fn forward(
    how: &Forward<'_>,
    op: Operation,
    input: Option<&Value>,
) -> Result<ScriptReply, ForwardError> {
    let Forward {
        target,
        token,
        connect_timeout,
        reply_timeout,
    } = *how;
    let body = match input {
        Some(value) => serde_json::to_vec(value)
            .map_err(|e| ForwardError::NotSent(format!("cannot encode the input: {e}")))?,
        None => Vec::new(),
    };
    let not_sent = |e: std::io::Error| ForwardError::NotSent(format!("cannot connect: {e}"));
    let connect_timed_out = || {
        ForwardError::NotSent(format!(
            "no connection within {} ms",
            connect_timeout.as_millis()
        ))
    };
    match target {
        DaemonTarget::Unix(path) => {
            let stream =
                tokio::time::timeout(connect_timeout, tokio::net::UnixStream::connect(path))
                    .await
                    .map_err(|_| connect_timed_out())?
                    .map_err(not_sent)?;
            let exchange_with = Exchange {
                host: "localhost",
                token,
                connect_timeout,
                reply_timeout,
            };
            exchange(stream, &exchange_with, op, body).await
        }
        DaemonTarget::Http(authority) => {
            let stream =
                tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(authority))
                    .await
                    .map_err(|_| connect_timed_out())?
                    .map_err(not_sent)?;
            let exchange_with = Exchange {
                host: authority,
                token,
                connect_timeout,
                reply_timeout,
            };
            exchange(stream, &exchange_with, op, body).await
        }
    }
}

/// How long a daemon that accepted the connection has to answer the ping.
pub const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /livez` on the connection: any answer within [`PING_TIMEOUT`] shows the daemon is not
/// wedged. Its body is read whole so the connection can carry the call next.
async fn ping(sender: &mut SendRequest<Full<Bytes>>, host: &str) -> Result<(), ForwardError> {
    let request = Request::get("/livez")
        .header(header::HOST, host)
        .body(Full::new(Bytes::new()))
        .map_err(|e| ForwardError::NotSent(format!("cannot build the ping: {e}")))?;
    let answered = tokio::time::timeout(PING_TIMEOUT, async {
        let response = sender.send_request(request).await?;
        response.into_body().collect().await?;
        sender.ready().await
    })
    .await;
    match answered {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ForwardError::NotSent(format!(
            "it broke off the ping before the call was sent: {e}"
        ))),
        Err(_) => Err(ForwardError::NotSent(format!(
            "it accepted the connection but did not answer a ping within {} s",
            PING_TIMEOUT.as_secs()
        ))),
    }
}

struct Exchange<'a> {
    host: &'a str,
    token: Option<&'a str>,
    connect_timeout: Duration,
    reply_timeout: Duration,
}

/// A daemon's reply as read: a compact script reply (read as it arrived), or any other
/// status or form, whole.
enum Received {
    Compact(ScriptOutputReader),
    Other(StatusCode, Bytes),
}

async fn exchange<S>(
    stream: S,
    how: &Exchange<'_>,
    op: Operation,
    body: Vec<u8>,
) -> Result<ScriptReply, ForwardError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Exchange {
        host,
        token,
        connect_timeout,
        reply_timeout,
    } = *how;
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| ForwardError::NotSent("the HTTP handshake timed out".into()))?
    .map_err(|e| ForwardError::NotSent(format!("HTTP handshake failed: {e}")))?;
    let driver = tokio::spawn(connection);
    if let Err(e) = ping(&mut sender, host).await {
        driver.abort();
        return Err(e);
    }
    let mut request = Request::post(route(op));
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::ACCEPT,
            format!("{SCRIPT_OUTPUT_MEDIA_TYPE}, application/json;q=0.5"),
        )
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ForwardError::NotSent(format!("cannot build the request: {e}")))?;
    let reply = tokio::time::timeout(reply_timeout, async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ForwardError::Unanswered(format!("the connection broke: {e}")))?;
        let status = response.status();
        let compact = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(SCRIPT_OUTPUT_MEDIA_TYPE));
        let size = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = response.into_body();
        let broke = |e: hyper::Error| ForwardError::Unanswered(format!("the reply broke off: {e}"));
        if status == StatusCode::OK && compact {
            let mut reader = ScriptOutputReader::with_size(size);
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.map_err(broke)?.into_data() {
                    reader.push(&data);
                }
            }
            return Ok(Received::Compact(reader));
        }
        let bytes = body.collect().await.map_err(broke)?.to_bytes();
        Ok::<_, ForwardError>(Received::Other(status, bytes))
    })
    .await;
    driver.abort();
    let received = reply.map_err(|_| {
        ForwardError::Unanswered(format!("no reply within {} s", reply_timeout.as_secs()))
    })??;
    let (status, bytes) = match received {
        Received::Compact(reader) => {
            return reader.finish().map_err(|e| {
                ForwardError::Unanswered(format!("the reply is not a script reply ({e})"))
            });
        }
        Received::Other(status, bytes) => (status, bytes),
    };
    let text = || String::from_utf8_lossy(&bytes);
    match status {
        // A daemon that predates the compact form answers with the JSON one.
        StatusCode::OK => serde_json::from_slice(&bytes).map_err(|e| {
            ForwardError::Unanswered(format!("the reply is not a script reply ({e}): {}", text()))
        }),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
            Err(ForwardError::NotSent(format!(
                "the daemon refused the call ({status}): {}",
                text()
            )))
        }
        other => Err(ForwardError::Unanswered(format!(
            "the daemon answered {other}: {}",
            text()
        ))),
    }
}
