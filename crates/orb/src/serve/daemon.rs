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

use std::sync::Arc;

use anyhow::Context;
use orb_k8s::daemon::nodes::{run_event_watch, run_node_watch};
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
}

impl ClusterRuntime {
    /// Builds the views `provider`'s config enables, then the provider that reads them. No
    /// view when the Kubernetes client cannot be built: the daemon will not start, and status
    /// reads LIST as they would without `orb serve`.
    pub async fn prepare(provider: K8sProvider) -> Self {
        let views = match provider.kube_client().await {
            Ok(_) => ClusterViews::for_provider(&provider),
            Err(_) => ClusterViews::default(),
        };
        Self {
            provider: Arc::new(provider.with_cluster_views(views.clone())),
            views,
            status: Arc::default(),
            version_check: VersionCheckCache::default(),
            reachability: ReachabilityCache::default(),
        }
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
            let mut checks = kubernetes_checks(&self.provider);
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
        // On failure (the Lease cannot be used) the tasks started above stop with it.
        let chores = Chores {
            provider: &runtime.provider,
            status: &runtime.status,
            pods: runtime.views.pods.as_ref(),
        };
        match background::start(chores, state, &options, shutdown_rx.clone()).await {
            Ok(chores) => daemon.tasks.extend(chores),
            Err(e) => {
                daemon.shutdown().await;
                return Err(e);
            }
        }
        Ok(daemon)
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
