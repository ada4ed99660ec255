//! The chores of `orb serve` that need both the cluster and the store: the start-up
//! reconciliation (adopt what orb tracks, settle acquires a killed orb left unfinished,
//! report the rest as orphans), the orphan GC, the periodic refresh of unfinished acquires
//! (and of finished ones whose machines may still exist) that applies `pod_timeout_seconds`
//! and records machines that failed or vanished even when nobody polls, and the follow loop
//! that refreshes a request as soon as the watch cache sees one of its pods change. With
//! several replicas on one PostgreSQL, only the holder of the leader Lease runs the GC and
//! the refreshes; every replica serves the API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use jiff::Timestamp;
use orb_k8s::K8sProvider;
use orb_k8s::daemon::leader::{Leadership, LeaseSettings, elect, lease_identity, lease_name};
use orb_k8s::daemon::reconcile::{
    GcOutcome, ManagedObject, ReconcileReport, StoredRequest, act_on_orphans, count_adopted,
    list_managed, plan_gc, request_ids,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::AppState;
use super::daemon::ClusterRuntime;
use orb_broker::Broker;

/// How the background chores run; the defaults suit production.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// Hold a Lease so only one replica runs the chores. Off: this process always leads
    /// (one replica, e.g. on SQLite).
    pub leader_elect: bool,
    /// How long a leader's claim lasts without renewal.
    pub lease_duration: Duration,
    /// Renew this long before the claim expires.
    pub lease_grace: Duration,
    /// How often the leader refreshes unfinished acquires (timeout GC, interrupted acquires).
    pub refresh_interval: Duration,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        Self {
            leader_elect: false,
            lease_duration: Duration::from_secs(15),
            lease_grace: Duration::from_secs(5),
            refresh_interval: Duration::from_secs(30),
        }
    }
}

/// The stored requests the objects' labels name, with their machines.
async fn stored_requests(
    broker: &Broker,
    objects: &[ManagedObject],
) -> anyhow::Result<BTreeMap<String, StoredRequest>> {
    let mut found = BTreeMap::new();
    for id in request_ids(objects) {
        // A label that is no request id names no stored request.
        let Ok(parsed) = orb_core::ids::RequestId::parse(&id) else {
            continue;
        };
        let request = broker
            .store
            .get_request(&parsed)
            .await
            .with_context(|| format!("reading request {id}"))?;
        if let Some(request) = request {
            let machines = broker
                .machines_of(&request)
                .await
                .with_context(|| format!("reading the machines of request {id}"))?;
            found.insert(id, StoredRequest { request, machines });
        }
    }
    Ok(found)
}

/// Resumes acquires that stopped between storing the request and storing the provider's
/// answer and that no live process works on any more (their claim is free), or fails them
/// with the reason. Returns one line per request.
pub async fn settle_interrupted_acquires(broker: &Broker) -> Vec<String> {
    let unfinished = match broker.unfinished_acquires().await {
        Ok(requests) => requests,
        Err(e) => return vec![format!("unfinished acquires not listed: {e}")],
    };
    let mut lines = Vec::new();
    for request in unfinished {
        let machines = match broker.machines_of(&request).await {
            Ok(m) => m.len(),
            Err(_) => continue,
        };
        if !orb_broker::is_unrecorded_acquire(&request, machines) {
            continue;
        }
        let id = request.request_id.clone();
        let line = match broker.resume_interrupted_acquire(&id).await {
            Ok(Some(view)) => format!(
                "{id} resumed: {} ({} machines recorded)",
                view.request.status,
                view.machines.len()
            ),
            Ok(None) => continue,
            Err(e) => format!("{id} not resumed: {e}"),
        };
        tracing::info!("interrupted acquire {line}");
        lines.push(line);
    }
    lines
}

/// Resumes returns whose release the cluster cut off or whose process died before recording
/// it, when no live process works on them (their claim is free); past its deadline such a
/// return ends failed and frees its machines. Returns one line per request.
pub async fn settle_interrupted_returns(broker: &Broker) -> Vec<String> {
    let unfinished = match broker.unfinished_returns().await {
        Ok(requests) => requests,
        Err(e) => return vec![format!("unfinished returns not listed: {e}")],
    };
    let mut lines = Vec::new();
    for request in unfinished
        .into_iter()
        .filter(orb_broker::is_unrecorded_return)
    {
        let id = request.request_id.clone();
        let line = match broker.resume_interrupted_return(&id).await {
            Ok(Some(view)) if orb_broker::is_unrecorded_return(&view.request) => {
                format!(
                    "{id} still cut off: {}",
                    view.request.status_message.unwrap_or_default()
                )
            }
            Ok(Some(view)) => format!("{id} resumed: {}", view.request.status),
            Ok(None) => continue,
            Err(e) => format!("{id} not resumed: {e}"),
        };
        tracing::info!("interrupted return {line}");
        lines.push(line);
    }
    lines
}

/// The start-up reconciliation: LIST every managed object in scope, adopt what belongs to
/// stored requests, settle interrupted acquires, report the rest as orphans (nothing is
/// deleted here; the GC decides that).
pub async fn reconcile(
    provider: &K8sProvider,
    broker: &Broker,
    settle_interrupted: bool,
) -> ReconcileReport {
    let started = Instant::now();
    let config = provider.config();
    let scope = provider.watch_scope();
    let mut report = ReconcileReport::for_scope(&scope);
    let min_age = Duration::from_secs(config.orphan_min_age_seconds);
    if settle_interrupted {
        report.resumed = settle_interrupted_acquires(broker).await;
        report
            .resumed
            .extend(settle_interrupted_returns(broker).await);
    }
    let result = async {
        let client = provider
            .kube_client()
            .await
            .context("cannot build the Kubernetes client")?;
        let objects = list_managed(&client, &scope, &config.label_prefix)
            .await
            .context("listing the managed objects")?;
        let requests = stored_requests(broker, &objects).await?;
        anyhow::Ok(plan_gc(&objects, &requests, Timestamp::now(), min_age))
    }
    .await;
    match result {
        Ok(plan) => {
            count_adopted(&plan, provider.metrics());
            report.record_plan(&plan);
        }
        Err(e) => report.error = Some(format!("{e:#}")),
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    report
}

/// One orphan-GC pass: report or delete (by `auto_cleanup_orphans`) the orphans older than
/// `orphan_min_age_seconds`.
pub async fn orphan_gc_pass(provider: &K8sProvider, broker: &Broker) -> anyhow::Result<GcOutcome> {
    let config = provider.config();
    let client = provider
        .kube_client()
        .await
        .context("cannot build the Kubernetes client")?;
    let objects = list_managed(&client, &provider.watch_scope(), &config.label_prefix)
        .await
        .context("listing the managed objects")?;
    let requests = stored_requests(broker, &objects).await?;
    let plan = plan_gc(
        &objects,
        &requests,
        Timestamp::now(),
        Duration::from_secs(config.orphan_min_age_seconds),
    );
    let outcome = act_on_orphans(
        &client,
        plan.orphans,
        config.auto_cleanup_orphans,
        provider.metrics(),
    )
    .await;
    for orphan in &outcome.reported {
        tracing::warn!(
            "orphan GC: orphaned managed {orphan}; set auto_cleanup_orphans=true to let orb delete it"
        );
    }
    for orphan in &outcome.deleted {
        tracing::warn!("orphan GC: deleted orphaned managed {orphan}");
    }
    for (orphan, e) in &outcome.failed {
        tracing::warn!("orphan GC: could not delete {orphan}: {e}");
    }
    Ok(outcome)
}

/// Refreshes every unfinished acquire and return once (the status path applies
/// `pod_timeout_seconds` and releases timed-out pods; a return completes once its machines
/// are gone), after settling interrupted ones. A request a client has
/// read within `skip_within` was refreshed by that read and is left alone: HostFactory polls
/// its requests constantly, and refreshing 200 of them again cost reads 600 ms of CPU on two
/// cores (bench `daemon_status`).
pub async fn refresh_pass(broker: &Broker, skip_within: Duration) {
    settle_interrupted_acquires(broker).await;
    settle_interrupted_returns(broker).await;
    let unfinished = match broker.unfinished_acquires().await {
        Ok(requests) => requests,
        Err(e) => {
            tracing::warn!("timeout GC: unfinished acquires not listed: {e}");
            return;
        }
    };
    broker.retain_refreshed(&unfinished.iter().map(|r| &r.request_id).collect());
    let mut ids: Vec<orb_core::ids::RequestId> =
        unfinished.into_iter().map(|r| r.request_id).collect();
    // Returns in progress are refreshed too: one resumed above (or released by a process
    // that died after recording it) completes when its machines are gone, even with nobody
    // asking about it.
    match broker.unfinished_returns().await {
        Ok(returns) => ids.extend(returns.into_iter().map(|r| r.request_id)),
        Err(e) => tracing::warn!("timeout GC: unfinished returns not listed: {e}"),
    }
    // Finished acquires are followed while a machine of theirs may still exist: a pod that
    // fails or disappears later is recorded here even if nobody asks about its request.
    match broker.store.requests_with_live_machines().await {
        Ok(followed) => {
            for id in followed {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        Err(e) => tracing::warn!("requests with live machines not listed: {e}"),
    }
    for id in ids
        .into_iter()
        .filter(|id| !broker.refreshed_within(id, skip_within))
    {
        refresh_own(broker, &id, "timeout GC").await;
    }
}

/// Refreshes one request of this provider; logs a failure instead of returning it.
async fn refresh_own(broker: &Broker, id: &orb_core::ids::RequestId, chore: &str) {
    match broker.store.get_request(id).await {
        Ok(Some(r)) if r.provider_name == broker.settings.provider_name => {}
        Ok(_) => return,
        Err(e) => {
            tracing::warn!("{chore}: request {id} not read: {e}");
            return;
        }
    }
    if let Err(e) = broker.refresh(id).await {
        tracing::warn!("{chore}: request {id} not refreshed: {e}");
    }
}

/// How long the follow loop lets a burst of pod events gather before it refreshes.
const FOLLOW_DEBOUNCE: Duration = Duration::from_millis(500);

/// Refreshes the requests whose pods the watch cache saw change, while this replica leads:
/// a pod that fails, is evicted or deleted is stored within about a second, whether or not
/// anyone polls its request (HostFactory stops polling a request once it is complete).
async fn follow_loop(
    cache: Arc<orb_k8s::daemon::PodCache>,
    state: AppState,
    leadership: Leadership,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = cache.wait_changed() => {}
        }
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(FOLLOW_DEBOUNCE) => {}
        }
        let changed = cache.take_changed();
        if !leadership.is_leader() {
            continue;
        }
        for raw in changed {
            if *shutdown.borrow() {
                return;
            }
            if let Ok(id) = orb_core::ids::RequestId::parse(&raw) {
                refresh_own(state.broker(), &id, "follow").await;
            }
        }
    }
}

/// Runs `pass` every `every` (first after one interval) while this replica leads, until
/// shutdown.
async fn leader_loop<F, Fut>(
    every: Duration,
    leadership: Leadership,
    mut shutdown: watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let every = every.max(Duration::from_secs(1));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = ticker.tick() => {}
        }
        if leadership.is_leader() {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                _ = pass() => {}
            }
        }
    }
}

/// Starts leadership, the start-up reconciliation and the leader-only chores, reporting to
/// `runtime`'s status; returns the tasks to wait for at shutdown.
pub async fn start(
    runtime: &ClusterRuntime,
    state: AppState,
    options: &DaemonOptions,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut tasks = Vec::new();
    let provider = runtime.provider().clone();
    let status = runtime.status().clone();
    let leadership = if options.leader_elect {
        let client = provider
            .kube_client()
            .await
            .context("cannot build the Kubernetes client")?;
        let settings = LeaseSettings {
            name: lease_name(&state.broker().settings.provider_name),
            namespace: provider
                .config()
                .default_namespace(provider.detected_namespace()),
            identity: lease_identity(),
            duration: options.lease_duration,
            grace: options.lease_grace,
        };
        let (leadership, task) = elect(
            client,
            &settings,
            provider.metrics().clone(),
            shutdown.clone(),
        )
        .await?;
        tracing::info!(
            "leader election on Lease {}/{} as {}",
            settings.namespace,
            settings.name,
            settings.identity
        );
        tasks.push(task);
        leadership
    } else {
        Leadership::always(provider.metrics())
    };
    status.set_leadership(leadership.clone());

    // Start-up reconciliation: every replica reports; only the leader settles interrupted
    // acquires (another replica may be creating right now). Waits briefly for the election.
    {
        let (provider, state, status, leadership) = (
            provider.clone(),
            state.clone(),
            status.clone(),
            leadership.clone(),
        );
        let lease_wait = options.lease_grace;
        let elect = options.leader_elect;
        tasks.push(tokio::spawn(async move {
            if elect {
                let mut rx = leadership.subscribe();
                let _ = tokio::time::timeout(lease_wait, rx.wait_for(|l| *l)).await;
            }
            let report = reconcile(&provider, state.broker(), leadership.is_leader()).await;
            let line = report.summary();
            if report.error.is_some() {
                tracing::warn!("{line}");
            } else {
                tracing::info!("{line}");
            }
            for orphan in &report.orphans {
                tracing::warn!("reconciliation: orphaned managed {orphan}");
            }
            status.set_reconciliation(report);
        }));
    }

    let config = provider.config().clone();
    if config.orphan_gc_enabled {
        let (provider, state, leadership, rx) = (
            provider.clone(),
            state.clone(),
            leadership.clone(),
            shutdown.clone(),
        );
        let every = Duration::from_secs(config.orphan_gc_interval_seconds);
        tasks.push(tokio::spawn(leader_loop(
            every,
            leadership,
            rx,
            move || {
                let (provider, state) = (provider.clone(), state.clone());
                async move {
                    if let Err(e) = orphan_gc_pass(&provider, state.broker()).await {
                        tracing::warn!("orphan GC pass failed: {e:#}; next try in {every:?}");
                    }
                }
            },
        )));
    }
    if let Some(cache) = &runtime.views().pods {
        tasks.push(tokio::spawn(follow_loop(
            cache.clone(),
            state.clone(),
            leadership.clone(),
            shutdown.clone(),
        )));
    }
    {
        let (state, rx) = (state.clone(), shutdown.clone());
        let every = options.refresh_interval;
        tasks.push(tokio::spawn(leader_loop(
            every,
            leadership,
            rx,
            move || {
                let state = state.clone();
                async move { refresh_pass(state.broker(), every).await }
            },
        )));
    }
    Ok(tasks)
}
