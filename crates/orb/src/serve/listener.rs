//! The accept loop of `orb serve`, hardened against clients that misbehave: a client has
//! [`Limits::header_read_timeout`] to send its request head (a connection that never finishes
//! sending, or sits idle between requests, is closed), at most [`Limits::max_connections`]
//! connections are served at once (more are closed at accept, so file descriptors cannot run
//! out), and on shutdown the connections in flight get [`Limits::shutdown_grace`] to finish
//! before the server stops anyway. A slow request body is cut by the router's body timeout.
//!
//! A request head over the router's limits ([`request_head`](super::request_head): an 8 KiB
//! URI, 32 KiB or 100 header fields) is refused by the router with a problem document. hyper's
//! own caps are only a backstop well above those: past [`BACKSTOP_HEAD_BYTES`],
//! [`BACKSTOP_HEADER_FIELDS`] or hyper's fixed 64 KiB URI cap, hyper answers 431 (or 414) with
//! an empty body and closes the connection.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

use super::request_head::{MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_URI_BYTES};

/// hyper's cap on a request head (its read buffer, so also the most one connection buffers):
/// room for hyper's largest URI (64 KiB) plus the router's header limit, so any head short of
/// that URI cap reaches the router's problem documents; and, over 1,024 connections, at most
/// 128 MiB of head buffers instead of hyper's default 400 KiB each.
pub const BACKSTOP_HEAD_BYTES: usize = 128 * 1024;
/// hyper's cap on the number of header fields (its default is the router's limit, 100).
pub const BACKSTOP_HEADER_FIELDS: usize = 4 * MAX_HEADER_FIELDS;
/// hyper's fixed cap on the URI (its `MAX_URI_LEN`), for the comparison below.
const HYPER_MAX_URI_BYTES: usize = u16::MAX as usize - 1;
const _: () = assert!(
    MAX_URI_BYTES * 4 <= HYPER_MAX_URI_BYTES
        && HYPER_MAX_URI_BYTES + MAX_HEADER_BYTES <= BACKSTOP_HEAD_BYTES,
    "hyper's caps must stay well above the router's limits, or refusals lose their problem body"
);

/// The serving limits; the defaults suit production.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(15),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Anything that accepts connections: a TCP or a Unix listener.
pub trait Accept {
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static;
    fn accept(&self) -> impl std::future::Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// The send buffer asked for on a Unix connection. The kernel's default (208 KiB) split
/// the 3.4 MB reply of a 5,000-machine HostFactory status into sixteen writes, each waiting
/// for the script to read the one before. The kernel caps the request at
/// `net.core.wmem_max`, so on a host that keeps the default this changes nothing.
const UNIX_SEND_BUFFER: usize = 4 << 20;

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (stream, _) = tokio::net::UnixListener::accept(self).await?;
        // Only a speed-up: a refusal leaves the default.
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(UNIX_SEND_BUFFER);
        Ok(stream)
    }
}

/// Resolves once `stopping` is true (or its sender is gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// Serves `app` on `listener` until `stopping` turns true, then lets the connections in
/// flight finish for at most the shutdown grace. Returns how many were still open then.
pub async fn serve<L: Accept>(
    listener: L,
    app: Router,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) -> usize {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let io = tokio::select! {
            _ = stopped(&mut stopping) => break,
            accepted = listener.accept() => match accepted {
                Ok(io) => io,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Over the cap: closed at once, before it costs anything.
            drop(io);
            continue;
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(BACKSTOP_HEAD_BYTES)
            .max_headers(BACKSTOP_HEADER_FIELDS);
        let connection =
            builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(slot);
        });
    }
    let open = limits.max_connections - slots.available_permits();
    match tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await {
        Ok(()) => 0,
        Err(_) => {
            tracing::warn!(
                "{open} connection(s) still open after {:?}: stopping anyway",
                limits.shutdown_grace
            );
            open
        }
    }
}
