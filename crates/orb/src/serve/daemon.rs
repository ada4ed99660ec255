//! The background half of `orb serve`: everything that runs next to the HTTP server on the
//! concrete Kubernetes provider. [`ClusterRuntime::prepare`] builds the views first and the
//! provider that reads them second; [`Daemon::start`] then starts the tasks that feed the
//! views, and [`Daemon::shutdown`] stops them by flipping the shared shutdown signal.
//!
//! - the pod watch cache (`watch_enabled`, on by default): status reads are served from it;
//!   with `watch_enabled=false` every status read LISTs (polling).
//! - the node watcher (`node_watch_enabled`) and the node events watcher
//!   (`events_watch_enabled`) share one node index: machines carry their node's facts and
//!   Karpenter disruptions.
//! - the store-aware chores in [`super::background`]: start-up reconciliation, orphan GC,
//!   timeout GC and the leader Lease that decides which replica runs them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use orb_k8s::daemon::nodes::{run_event_watch, run_node_watch};
use orb_k8s::daemon::pod_cache::sleep_or_shutdown;
use orb_k8s::daemon::reconcile::DaemonStatus;
use orb_k8s::{ClusterViews, K8sProvider};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::AppState;
use super::background::{self, Chores, DaemonOptions};
use super::cluster_checks::{daemon_checks, kubernetes_checks};
use super::health::{ChecksFuture, DaemonHealth};
use super::version_gate::{ReachabilityCache, VersionCheckCache};

/// The Kubernetes side of `orb serve`: the provider, built with the views the daemon feeds,
/// and what the daemon reports. The HTTP layer holds it only as [`DaemonHealth`].
pub struct ClusterRuntime {
    provider: Arc<K8sProvider>,
    views: ClusterViews,
    status: Arc<DaemonStatus>,
    version_check: VersionCheckCache,
    reachability: ReachabilityCache,
    /// Why the background tasks do not run (yet); `None` once they do.
    not_running: Mutex<Option<String>>,
}

impl ClusterRuntime {
    /// Builds the views `provider`'s config enables, then the provider that reads them. The
    /// views are built even when the cluster cannot be reached yet: the daemon starts them
    /// once it can ([`Daemon::start_retrying`]); until then reads LIST.
    pub async fn prepare(provider: K8sProvider) -> Self {
        let views = ClusterViews::for_provider(&provider);
        Self {
            provider: Arc::new(provider.with_cluster_views(views.clone())),
            views,
            status: Arc::default(),
            version_check: VersionCheckCache::default(),
            reachability: ReachabilityCache::default(),
            not_running: Mutex::new(Some("starting".into())),
        }
    }

    fn set_not_running(&self, why: Option<String>) {
        *self.not_running.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    pub fn provider(&self) -> &Arc<K8sProvider> {
        &self.provider
    }

    /// The pod cache and node index the daemon feeds and the provider reads.
    pub fn views(&self) -> &ClusterViews {
        &self.views
    }

    /// The start-up reconciliation's report and this replica's leadership.
    pub fn status(&self) -> &Arc<DaemonStatus> {
        &self.status
    }

    /// Whether this replica runs the cluster-wide chores now (false until the daemon runs).
    pub fn is_leader(&self) -> bool {
        self.status.is_leader()
    }
}

impl DaemonHealth for ClusterRuntime {
    fn readiness(&self) -> ChecksFuture<'_> {
        Box::pin(async move {
            let not_running = self
                .not_running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let mut checks = vec![background_check(not_running)];
            checks.extend(kubernetes_checks(&self.provider));
            checks.extend(daemon_checks(&self.status));
            checks.push((
                "kubernetes_version".to_string(),
                self.version_check.check(&self.provider).await,
            ));
            checks.push((
                "apiserver".to_string(),
                self.reachability.check(&self.provider).await,
            ));
            checks
        })
    }

    fn refresh_gauges(&self) {
        // Open breakers turn half-open with time alone; reading them updates the gauges.
        self.provider.circuit_states();
    }
}

const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Whether the background tasks run; without them orb is not ready (no watch cache, no
/// start-up reconciliation, no GC of timed-out or orphaned machines).
fn background_check(not_running: Option<String>) -> (String, super::model::Check) {
    let check = match not_running {
        None => super::model::Check {
            status: "ok".into(),
            detail: Some("watch cache, reconciliation and GC running".into()),
        },
        Some(why) => super::model::Check {
            status: "failing".into(),
            detail: Some(format!(
                "watch cache, reconciliation and GC not running: {why}; retried in the background"
            )),
        },
    };
    ("background".to_string(), check)
}

/// The running background tasks.
pub struct Daemon {
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Starts every background task the provider's config enables, feeding `runtime`'s
    /// views; `state` is the HTTP layer's (its broker and store). Fails when the Kubernetes
    /// client cannot be built (bad kubeconfig, unreadable token) or the leader Lease cannot
    /// be used.
    pub async fn start(
        runtime: Arc<ClusterRuntime>,
        state: AppState,
        options: DaemonOptions,
    ) -> anyhow::Result<Self> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut daemon = Self {
            shutdown,
            tasks: Vec::new(),
        };
        let provider = runtime.provider();
        let config = provider.config().clone();
        let client = provider
            .kube_client()
            .await
            .context("cannot build the Kubernetes client")?;
        // The chores first: they fail (the Lease cannot be used) before any task is spawned,
        // so a failed start leaves no view fed for a while and then stale, for reads to trust.
        let chores = Chores {
            provider: &runtime.provider,
            status: &runtime.status,
            pods: runtime.views.pods.as_ref(),
        };
        let chores = background::start(chores, state, &options, shutdown_rx.clone()).await?;
        daemon.tasks.extend(chores);
        if let Some(cache) = runtime.views.pods.clone() {
            let rx = shutdown_rx.clone();
            let client = client.clone();
            daemon
                .tasks
                .push(tokio::spawn(async move { cache.run(client, rx).await }));
        }
        if let Some(index) = runtime.views.nodes.clone() {
            if config.node_watch_enabled {
                let (index, client, rx) = (index.clone(), client.clone(), shutdown_rx.clone());
                daemon
                    .tasks
                    .push(tokio::spawn(run_node_watch(index, client, rx)));
            }
            if config.events_watch_enabled {
                let (client, rx) = (client.clone(), shutdown_rx.clone());
                daemon
                    .tasks
                    .push(tokio::spawn(run_event_watch(index, client, rx)));
            }
        }
        runtime.set_not_running(None);
        Ok(daemon)
    }

    /// [`Daemon::start`], retried with backoff until it succeeds or the server stops: a
    /// kubeconfig mounted late, an apiserver down or a Lease refused must not leave the
    /// server running without its watch cache, reconciliation and GC for good. Meanwhile
    /// `/readyz` fails naming the cause, and every failed try is logged.
    pub fn start_retrying(
        runtime: Arc<ClusterRuntime>,
        state: AppState,
        options: DaemonOptions,
    ) -> Self {
        let (shutdown, mut stop) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut delay = RETRY_FIRST;
            let daemon = loop {
                match Self::start(runtime.clone(), state.clone(), options.clone()).await {
                    Ok(daemon) => break daemon,
                    Err(e) => {
                        let why = format!("{e:#}");
                        tracing::warn!(
                            "orb serve is not ready: its watch cache, reconciliation and GC \
                             cannot start: {why}; retrying in {delay:?}"
                        );
                        runtime.set_not_running(Some(why));
                        if sleep_or_shutdown(delay, &mut stop).await {
                            return;
                        }
                        delay = (delay * 2).min(RETRY_MAX);
                    }
                }
            };
            if delay > RETRY_FIRST {
                tracing::info!("the watch cache, reconciliation and GC run now");
            }
            let _ = stop.wait_for(|stop| *stop).await;
            daemon.shutdown().await;
        });
        Self {
            shutdown,
            tasks: vec![task],
        }
    }

    /// A receiver that turns true when the daemon stops (for tasks started by others).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Keeps a task to wait for at shutdown.
    pub fn adopt_task(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// Signals every task to stop and waits for them.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
