//! The background half of `orb serve`: everything that runs next to the HTTP server on the
//! concrete Kubernetes provider. Each task is started from [`Daemon::start`] and stops when
//! [`Daemon::shutdown`] flips the shared shutdown signal.
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
use orb_k8s::K8sProvider;
use orb_k8s::daemon::nodes::{run_event_watch, run_node_watch};
use orb_k8s::daemon::{NodeIndex, PodCache};
use tokio::sync::watch;

use super::AppState;
use super::background::{self, DaemonOptions};
use tokio::task::JoinHandle;

/// The running background tasks.
pub struct Daemon {
    provider: Arc<K8sProvider>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Daemon {
    /// Starts every background task the provider's config enables; `state` is the HTTP
    /// layer's (its broker and store). Fails when the Kubernetes client cannot be built (bad
    /// kubeconfig, unreadable token) or the leader Lease cannot be used.
    pub async fn start(
        provider: Arc<K8sProvider>,
        state: AppState,
        options: DaemonOptions,
    ) -> anyhow::Result<Self> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut daemon = Self {
            provider: provider.clone(),
            shutdown,
            tasks: Vec::new(),
        };
        let config = provider.config().clone();
        let client = provider
            .kube_client()
            .await
            .context("cannot build the Kubernetes client")?;
        if let Some(cache) = PodCache::for_provider(&provider) {
            let cache = Arc::new(cache);
            provider.attach_pod_cache(cache.clone());
            let rx = shutdown_rx.clone();
            let client = client.clone();
            daemon
                .tasks
                .push(tokio::spawn(async move { cache.run(client, rx).await }));
        }
        if config.node_watch_enabled || config.events_watch_enabled {
            let index = Arc::new(NodeIndex::new(provider.metrics().clone()));
            provider.attach_node_index(index.clone());
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
        match background::start(provider.clone(), state, &options, shutdown_rx.clone()).await {
            Ok(chores) => daemon.tasks.extend(chores),
            Err(e) => {
                daemon.shutdown().await;
                return Err(e);
            }
        }
        Ok(daemon)
    }

    pub fn provider(&self) -> &Arc<K8sProvider> {
        &self.provider
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
