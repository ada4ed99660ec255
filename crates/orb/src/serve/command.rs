//! `orb serve`: load config, build the broker exactly as the other commands do, and serve
//! HTTP until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use super::{AppState, ServeOptions, router};
use crate::commands::{Output, Session};
use crate::context;
use crate::failure::{CliResult, Failure};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Runs the server on its own multi-threaded runtime; returns when it has shut down.
pub fn run(session: &Session, listen: SocketAddr) -> CliResult<Output> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::generic(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(session, listen))
}

async fn serve(session: &Session, listen: SocketAddr) -> CliResult<Output> {
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?.clone();
    let (broker, warnings) = session.broker(&loaded).await?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let options = ServeOptions {
        default_wait_secs: loaded.config.request.default_timeout,
        poll_interval: Duration::from_secs(2),
        template_defaults: entry.template_defaults.clone(),
        // Inbound authentication is not configurable yet; the API is open (bind to loopback).
        auth: None,
    };
    let app = router(AppState::new(broker, options));
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        Failure::generic(format!(
            "cannot listen on {listen}: {e}; pick another address with --listen HOST:PORT"
        ))
    })?;
    let bound = listener.local_addr().unwrap_or(listen);
    eprintln!(
        "orb serve: listening on http://{bound} (provider {:?}); API under /api/v1, OpenAPI at /api/v1/openapi.json",
        entry.name
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| Failure::generic(format!("the HTTP server stopped: {e}")))?;
    Ok(Output {
        stdout: String::new(),
        stderr: vec!["orb serve: stopped".into()],
        exit: 0,
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
