//! Metrics of the long-running parts of the Kubernetes provider (watch cache, garbage
//! collection, node and event watchers, retries and circuit breakers, pod creations). They
//! live here, next to the code that moves them; `orb serve` registers them into its registry
//! under the `orb_k8s_` prefix ([`K8sMetrics::register`]). Every label takes a closed set of
//! values. The names are listed in docs/rest-api.md.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchEventLabels {
    /// `added`, `modified`, `deleted`, `bookmark`, `error`.
    pub event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `pod`, `deployment`, `statefulset`, `job`.
    pub kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OrphanLabels {
    pub kind: &'static str,
    /// `reported` (a WARNING only) or `deleted`.
    pub action: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    pub handler: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreationLabels {
    /// `success`, `conflict`, `quota_exceeded`, `forbidden`, `invalid`, `error`.
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    /// `throttled` (429), `server_error` (5xx), `transport`.
    pub cause: &'static str,
}

/// Shared by the provider and every background task; cloning shares the same counters.
#[derive(Debug, Clone, Default)]
pub struct K8sMetrics {
    /// Pod watch events applied to the cache.
    pub watch_events: Family<WatchEventLabels, Counter>,
    /// Pod watch restarts: `relist` (410 Gone or a desync), `error` (transport or apiserver
    /// error), `resync` (the periodic full LIST).
    pub watch_reconnects: Family<ReasonLabels, Counter>,
    /// Pods held by the watch cache.
    pub cache_pods: Gauge,
    /// 1 while status reads are served from the cache, 0 while they fall back to LIST.
    pub cache_serving: Gauge,
    /// Status reads by source: `cache` or `list`.
    pub status_reads: Family<ReasonLabels, Counter>,
    /// Orphans found by the orphan GC, by kind and action.
    pub orphans: Family<OrphanLabels, Counter>,
    /// Objects adopted by the start-up reconciliation, by kind.
    pub adopted: Family<KindLabels, Counter>,
    /// Pods released because they outlived `pod_timeout_seconds`, by kind.
    pub timed_out: Family<KindLabels, Counter>,
    /// Circuit breaker state per handler: 0 closed, 1 open, 2 half-open.
    pub circuit_state: Family<HandlerLabels, Gauge>,
    /// Pod creation outcomes.
    pub pod_creations: Family<CreationLabels, Counter>,
    /// Kubernetes API calls retried, by cause.
    pub api_retries: Family<RetryLabels, Counter>,
    /// Nodes known to the node watcher.
    pub nodes: Gauge,
    /// Node disruption events recorded by the events watcher, by reason.
    pub node_disruptions: Family<ReasonLabels, Counter>,
    /// 1 while this replica holds the leader Lease (runs GC and resync), else 0.
    pub leader: Gauge,
}

impl K8sMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers every family into `registry` (the caller's prefix applies, `orb_k8s_` in
    /// `orb serve`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "watch_events",
            "Pod watch events applied to the cache, by event",
            self.watch_events.clone(),
        );
        registry.register(
            "watch_reconnects",
            "Pod watch restarts, by reason (relist, error, resync)",
            self.watch_reconnects.clone(),
        );
        registry.register(
            "cache_pods",
            "Managed pods held by the watch cache",
            self.cache_pods.clone(),
        );
        registry.register(
            "cache_serving",
            "1 while status reads are served from the watch cache, 0 while they use LIST",
            self.cache_serving.clone(),
        );
        registry.register(
            "status_reads",
            "Pod reads of status calls, by source (cache or list)",
            self.status_reads.clone(),
        );
        registry.register(
            "orphans",
            "Orphaned managed objects found by the orphan GC, by kind and action",
            self.orphans.clone(),
        );
        registry.register(
            "adopted",
            "Managed objects adopted by the start-up reconciliation, by kind",
            self.adopted.clone(),
        );
        registry.register(
            "timed_out_pods",
            "Pods released after pod_timeout_seconds, by kind",
            self.timed_out.clone(),
        );
        registry.register(
            "circuit_breaker_state",
            "Circuit breaker state per handler: 0 closed, 1 open, 2 half-open",
            self.circuit_state.clone(),
        );
        registry.register(
            "pod_creations",
            "Pod creation outcomes",
            self.pod_creations.clone(),
        );
        registry.register(
            "api_retries",
            "Kubernetes API calls retried, by cause",
            self.api_retries.clone(),
        );
        registry.register(
            "nodes",
            "Nodes known to the node watcher",
            self.nodes.clone(),
        );
        registry.register(
            "node_disruptions",
            "Node disruption events seen by the events watcher, by reason",
            self.node_disruptions.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease, else 0",
            self.leader.clone(),
        );
    }
}
