//! `orb serve`: load config, build the broker exactly as the other commands do, and serve
//! HTTP until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::auth::Auth;
use super::auth_config::{self, AuthPlan, inbound_auth_requested};
use super::background::DaemonOptions;
use super::daemon::{ClusterRuntime, Daemon};
use super::listener::Limits;
use super::server::PidFile;
use super::socket::bind_owner_only;
use super::template_file::TemplateSource;
use super::token_review::TokenReviewVerifier;
use super::version_gate::refuse_old_apiserver;
use super::{AppState, ServeOptions, local_router, router};
use crate::cli::ServeArgs;
use crate::context;
use crate::effective_config::EffectiveConfig;
use crate::failure::{CliResult, Failure};
use crate::hostfactory::daemon_target::DaemonSection;
use crate::provider_factory::{ProviderContext, build_kubernetes_provider, is_kubernetes};
use crate::session::{Output, Session};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The Kubernetes provider of `entry`, built as its concrete type so a door can run the
/// daemon's views on it or check the cluster; `None` for any other provider. `door` names
/// the command in the error of a config that does not build (seed 001: the config raises at
/// start-up, with every problem).
pub(crate) fn kubernetes_provider(
    session: &Session,
    loaded: &crate::context::LoadedConfig,
    entry: &orb_core::config::ProviderEntry,
    door: &str,
) -> CliResult<Option<orb_k8s::K8sProvider>> {
    if !is_kubernetes(entry) {
        return Ok(None);
    }
    let context = ProviderContext {
        config_dir: session.dirs.config_dir.path.clone(),
        work_dir: session.dirs.work_dir.path.clone(),
    };
    build_kubernetes_provider(entry, &context, &loaded.config.other)
        .map(Some)
        .map_err(|e| Failure::provider(format!("{door} cannot start: {e}")))
}

/// What the REST handlers need besides the broker, from the config every door reads.
pub(crate) fn serve_options(
    loaded: &crate::context::LoadedConfig,
    entry: &orb_core::config::ProviderEntry,
    auth: Option<Arc<Auth>>,
) -> ServeOptions {
    ServeOptions {
        default_wait_secs: loaded.config.request.default_timeout,
        poll_interval: Duration::from_secs(2),
        template_defaults: entry.template_defaults.clone(),
        auth,
        // MCP serves no HTTP; `orb serve` sets it from its flags and config.
        console: false,
    }
}

/// Loads the templates (re-read when their file changes) and the effective config into a
/// door's state.
pub(crate) fn show_templates_and_config(
    state: &AppState,
    session: &Session,
    entry: orb_core::config::ProviderEntry,
) -> CliResult<()> {
    state.reload_templates_from(TemplateSource {
        config_dir: session.dirs.config_dir.path.clone(),
        entry,
    });
    state.show_config(EffectiveConfig::capture(session, None)?);
    Ok(())
}

/// Runs the server on its own multi-threaded runtime; returns when it has shut down.
pub fn run(session: &Session, args: ServeArgs) -> CliResult<Output> {
    // The background tasks log through `tracing` (watch failures, retries, orphans): to
    // stderr, at `info` unless ORB_LOG says otherwise (e.g. ORB_LOG=debug, ORB_LOG=orb_k8s=debug).
    let filter = tracing_subscriber::EnvFilter::try_from_env("ORB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: a container's stderr goes to log collectors.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::generic(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(session, args))
}

/// How long a token the apiserver accepted is trusted without asking again.
const TOKEN_CACHE_TTL: Duration = Duration::from_secs(30);

/// The TokenReview authenticator for `plan`: its own kubeconfig when one is set, else the
/// provider's Kubernetes connection, else the usual kubeconfig lookup.
async fn authenticator(
    plan: AuthPlan,
    provider: Option<&Arc<orb_k8s::K8sProvider>>,
) -> CliResult<Arc<Auth>> {
    if let auth_config::Scheme::Jwt(verifier) = &plan.scheme {
        // A signature check costs microseconds: nothing to cache.
        return Ok(Arc::new(Auth::new(
            verifier.clone(),
            plan.roles,
            Duration::ZERO,
        )));
    }
    let client = match (&plan.kubeconfig, provider) {
        (Some(path), _) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                Failure::invalid(format!(
                    "auth kubeconfig {}: {e}; point --auth-kubeconfig (or serve.auth.kubeconfig) \
                     at a readable kubeconfig",
                    path.display()
                ))
            })?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| {
                    Failure::invalid(format!("auth kubeconfig {}: {e}", path.display()))
                })?;
            kube::Client::try_from(config).map_err(|e| {
                Failure::generic(format!("cannot build the TokenReview client: {e}"))
            })?
        }
        (None, Some(provider)) => provider.kube_client().await.map_err(|e| {
            Failure::invalid(format!(
                "no Kubernetes client for TokenReview ({e}); fix the provider's connection \
                 settings or pass --auth-kubeconfig PATH"
            ))
        })?,
        (None, None) => {
            let config = kube::Config::infer().await.map_err(|e| {
                Failure::invalid(format!(
                    "no Kubernetes credentials for TokenReview ({e}); pass --auth-kubeconfig PATH"
                ))
            })?;
            kube::Client::try_from(config).map_err(|e| {
                Failure::generic(format!("cannot build the TokenReview client: {e}"))
            })?
        }
    };
    let verifier = Arc::new(TokenReviewVerifier::new(client, vec![]));
    Ok(Arc::new(Auth::new(verifier, plan.roles, TOKEN_CACHE_TTL)))
}

/// `--leader-elect`, by default on exactly when the store is PostgreSQL (the one store
/// several replicas can share).
fn leader_elect(args: &ServeArgs, state: &AppState) -> bool {
    args.leader_elect
        .unwrap_or(state.broker().store.backend() == orb_store::Backend::Postgres)
}

async fn serve(session: &Session, args: ServeArgs) -> CliResult<Output> {
    let listen: SocketAddr = args.listen;
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?.clone();
    let socket_path = socket_path(session, &args, &loaded)?;
    for warning in super::server::config_warnings(&loaded.config)
        .map_err(|e| Failure::invalid(format!("{}: {e}", loaded.file.display())))?
    {
        tracing::warn!("{warning}");
    }
    // `orb server start` names the running server in a pid file; a second one is refused
    // before it builds anything.
    let _pid_file = match &args.pid_file {
        Some(path) => Some(PidFile::claim(path)?),
        None => None,
    };
    // The Kubernetes provider is built as its concrete type so the daemon can run its watch
    // cache and background tasks on it; any other provider is served without them. A
    // Kubernetes config that does not build stops the server here, with every problem
    // (seed 001: the config raises at start-up), instead of serving without its safeguards.
    let kubernetes = kubernetes_provider(session, &loaded, &entry, "orb serve")?;
    if let Some(provider) = &kubernetes {
        for opt_out in provider.security_opt_outs() {
            tracing::warn!("{opt_out}");
        }
    }
    // Every auth problem is reported before anything starts.
    let inbound_auth_enabled = match &kubernetes {
        Some(provider) => provider.config().inbound_auth_enabled,
        None => inbound_auth_requested(&entry.config),
    };
    let auth_plan = auth_config::plan(&args, &loaded.config.other, inbound_auth_enabled)?;
    let console = auth_config::console_enabled(&args, &loaded.config.other)?;
    if let Some(provider) = &kubernetes
        && let Some(warning) = refuse_old_apiserver(provider).await?
    {
        tracing::warn!("{warning}");
    }
    // The views the daemon feeds come first, then the provider that reads them; the loops
    // that fill them start with the daemon below.
    let runtime = match kubernetes {
        Some(provider) => Some(Arc::new(ClusterRuntime::prepare(provider).await)),
        None => None,
    };
    let auth_source = auth_plan.as_ref().map(|plan| plan.switched_on_by);
    if auth_plan.as_ref().is_some_and(|plan| plan.implicit_default) {
        tracing::info!(
            "no role mapping configured, so every caller the TokenReview accepts is \
             a {} (read only); map service accounts to operator in config.json serve.auth.roles \
             or with --auth-role WHO=operator to let them request machines",
            auth_config::DEFAULT_ROLE.as_str()
        );
    }
    let auth = match auth_plan {
        Some(plan) => Some(authenticator(plan, runtime.as_ref().map(|r| r.provider())).await?),
        None => None,
    };
    let (broker, warnings) = session
        .broker_using(
            &loaded,
            runtime
                .as_ref()
                .map(|r| r.provider().clone() as Arc<dyn orb_core::provider::Provider>),
        )
        .await?;
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let options = ServeOptions {
        console,
        ..serve_options(&loaded, &entry, auth)
    };
    let state = match &runtime {
        Some(runtime) => AppState::with_kubernetes(broker, options, runtime.clone()),
        None => AppState::new(broker, options),
    };
    let daemon = match runtime {
        Some(runtime) => {
            let daemon_options = DaemonOptions {
                leader_elect: leader_elect(&args, &state),
                ..DaemonOptions::default()
            };
            Some(Daemon::start_retrying(
                runtime,
                state.clone(),
                daemon_options,
            ))
        }
        None => None,
    };
    show_templates_and_config(&state, session, entry.clone())?;
    let app = router(state.clone());
    let listener = if args.socket_only {
        None
    } else {
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
            Failure::generic(format!(
                "cannot listen on {listen}: {e}; pick another address with --listen HOST:PORT \
                 (orb server start: --host and --port, or config.json's server section)"
            ))
        })?;
        let bound = listener.local_addr().unwrap_or(listen);
        tracing::info!(
            "listening on http://{bound} (provider {:?}, {}); API under /api/v1, OpenAPI at /api/v1/openapi.json{}",
            entry.name,
            match auth_source {
                Some(source) => format!("Bearer tokens checked by TokenReview ({source})"),
                None => "no authentication".to_string(),
            },
            if console {
                format!(", web console at http://{bound}/ui/")
            } else {
                String::new()
            }
        );
        Some(listener)
    };
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let local = match socket_path {
        Some(path) => {
            let (socket, file) = bind_owner_only(&path)?;
            if args.socket_only {
                tracing::info!(
                    "listening on unix:{} only (provider {:?}, owner only, no token); API under /api/v1",
                    file.path().display(),
                    entry.name
                );
            } else {
                tracing::info!(
                    "HostFactory scripts reach it at unix:{} (owner only, no token)",
                    file.path().display()
                );
            }
            let served = super::listener::serve(
                socket,
                local_router(state),
                Limits::default(),
                stopping.clone(),
            );
            Some((tokio::spawn(served), file))
        }
        None => None,
    };
    if !is_kubernetes(&entry) {
        // The reference's SDKs start orb with a provider of their own (`aws`): the server
        // still answers, and says once why machines cannot be had (after the line with its
        // address, which scripts read first).
        tracing::warn!(
            "provider {:?} has type {:?}, which orb cannot serve (orb runs machines on Kubernetes: type \"k8s\"); templates, config, stored requests and machines answer, while \
             requesting, returning and refreshing machines answer 503 provider-misconfigured, and \
             /readyz and GET /api/v1/providers/health name the provider as failing",
            entry.name,
            entry.provider_type
        );
    }
    match listener {
        Some(listener) => {
            super::listener::serve(listener, app, Limits::default(), stopping).await;
        }
        None => drop(app),
    }
    if let Some((task, file)) = local {
        let _ = task.await;
        drop(file);
    }
    if let Some(daemon) = daemon {
        daemon.shutdown().await;
    }
    Ok(Output {
        stdout: String::new(),
        stderr: vec!["orb serve: stopped".into()],
        exit: 0,
    })
}

/// `--socket`, else config.json's `daemon.socket`, else `<work dir>/orb.sock`; none with
/// `--no-socket` or `daemon.enabled=false`.
fn socket_path(
    session: &Session,
    args: &ServeArgs,
    loaded: &context::LoadedConfig,
) -> CliResult<Option<std::path::PathBuf>> {
    let section = DaemonSection::from_config(&loaded.config.other)
        .map_err(|e| Failure::invalid(format!("{}: {e}", loaded.file.display())))?;
    Ok(match (&args.socket, args.no_socket) {
        (_, true) => None,
        (Some(path), false) => Some(path.clone()),
        (None, false) => section.serve_socket(&session.dirs.work_dir.path),
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
