//! `orb serve`: load config, build the broker exactly as the other commands do, and serve
//! HTTP until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::auth::{Auth, RoleMap, parse_role_flag};
use super::background::DaemonOptions;
use super::daemon::Daemon;
use super::token_review::TokenReviewVerifier;
use super::{AppState, ServeOptions, router};
use crate::cli::ServeArgs;
use crate::commands::{Output, Session};
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::provider_factory::{KUBERNETES_TYPES, ProviderContext, build_kubernetes_provider};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Runs the server on its own multi-threaded runtime; returns when it has shut down.
pub fn run(session: &Session, args: ServeArgs) -> CliResult<Output> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::generic(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(session, args))
}

/// How long a token the apiserver accepted is trusted without asking again.
const TOKEN_CACHE_TTL: Duration = Duration::from_secs(30);

/// The inbound-auth settings from the flags; every problem is reported before anything starts.
async fn auth_from(args: &ServeArgs) -> CliResult<Option<Arc<Auth>>> {
    if !args.auth_token_review {
        return Ok(None);
    }
    let pairs = args
        .auth_roles
        .iter()
        .map(|flag| parse_role_flag(flag))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::invalid)?;
    let default = args
        .auth_default_role
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(|e: String| Failure::invalid(format!("--auth-default-role: {e}")))?;
    if pairs.is_empty() && default.is_none() {
        return Err(Failure::invalid(
            "--auth-token-review needs at least one --auth-role WHO=ROLE (or --auth-default-role), \
             otherwise every caller would be refused",
        ));
    }
    let roles = RoleMap::parse(
        pairs
            .iter()
            .map(|(who, role)| (who.as_str(), role.as_str())),
        default,
    )
    .map_err(Failure::invalid)?;
    let config = match &args.auth_kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                Failure::invalid(format!(
                    "--auth-kubeconfig {}: {e}; point it at a readable kubeconfig",
                    path.display()
                ))
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| {
                    Failure::invalid(format!("--auth-kubeconfig {}: {e}", path.display()))
                })?
        }
        None => kube::Config::infer().await.map_err(|e| {
            Failure::invalid(format!(
                "no Kubernetes credentials for TokenReview ({e}); pass --auth-kubeconfig PATH"
            ))
        })?,
    };
    let client = kube::Client::try_from(config)
        .map_err(|e| Failure::generic(format!("cannot build the TokenReview client: {e}")))?;
    let verifier = Arc::new(TokenReviewVerifier::new(client, vec![]));
    Ok(Some(Arc::new(Auth::new(verifier, roles, TOKEN_CACHE_TTL))))
}

/// `--leader-elect`, by default on exactly when the store is PostgreSQL (the one store
/// several replicas can share).
fn leader_elect(args: &ServeArgs, state: &AppState) -> bool {
    args.leader_elect
        .unwrap_or(state.broker().store.backend() == orb_store::Backend::Postgres)
}

async fn serve(session: &Session, args: ServeArgs) -> CliResult<Output> {
    let listen: SocketAddr = args.listen;
    let auth = auth_from(&args).await?;
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?.clone();
    // The Kubernetes provider is built as its concrete type so the daemon can run its watch
    // cache and background tasks on it; any other provider (or a Kubernetes config that does
    // not build, which /readyz then reports) is served without them.
    let context = ProviderContext {
        config_dir: session.dirs.config_dir.path.clone(),
        work_dir: session.dirs.work_dir.path.clone(),
    };
    let kubernetes =
        if KUBERNETES_TYPES.contains(&entry.provider_type.trim().to_ascii_lowercase().as_str()) {
            build_kubernetes_provider(&entry, &context, &loaded.config.other).ok()
        } else {
            None
        };
    let (broker, warnings) = session
        .broker_using(
            &loaded,
            kubernetes
                .clone()
                .map(|p| p as Arc<dyn orb_core::provider::Provider>),
        )
        .await?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let options = ServeOptions {
        default_wait_secs: loaded.config.request.default_timeout,
        poll_interval: Duration::from_secs(2),
        template_defaults: entry.template_defaults.clone(),
        auth,
    };
    let state = match kubernetes {
        Some(provider) => AppState::with_kubernetes(broker, options, provider),
        None => AppState::new(broker, options),
    };
    let daemon = match state.kubernetes().cloned() {
        Some(provider) => {
            let daemon_options = DaemonOptions {
                leader_elect: leader_elect(&args, &state),
                ..DaemonOptions::default()
            };
            match Daemon::start(provider, state.clone(), daemon_options).await {
                Ok(daemon) => Some(daemon),
                Err(e) => {
                    eprintln!(
                        "warning: orb serve runs without its watch cache and background tasks: {e}"
                    );
                    None
                }
            }
        }
        None => None,
    };
    let app = router(state);
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        Failure::generic(format!(
            "cannot listen on {listen}: {e}; pick another address with --listen HOST:PORT"
        ))
    })?;
    let bound = listener.local_addr().unwrap_or(listen);
    eprintln!(
        "orb serve: listening on http://{bound} (provider {:?}, {}); API under /api/v1, OpenAPI at /api/v1/openapi.json",
        entry.name,
        if args.auth_token_review {
            "Bearer tokens checked by TokenReview"
        } else {
            "no authentication"
        }
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| Failure::generic(format!("the HTTP server stopped: {e}")))?;
    if let Some(daemon) = daemon {
        daemon.shutdown().await;
    }
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
