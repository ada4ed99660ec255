//! `pdb-operator run`: leader election, the controllers, periodic API discovery and the
//! `/healthz`, `/readyz`, `/metrics` endpoints. Everything runs inside the returned future:
//! dropping or aborting it stops every controller (tasks live in a `JoinSet`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kube::{Api, Client};
use serde::Serialize;
use tokio::task::JoinSet;

use crate::controller::discovery::{Discovered, discover};
use crate::controller::live::NameSet;
use crate::controller::pdb_cache::watch_pdbs;
use crate::controller::policies::{PolicyTrigger, run_status_writer, watch_policies};
use crate::controller::{Context, Scope, apps, gang, lws};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::WorkloadKind;
use crate::metrics::{CONTENT_TYPE, Metrics};

/// Lease shared with the reference operator, so the two exclude each other during a migration.
pub const LEASE_NAME: &str = "d6525091.pdboperator.io";

/// Default of `--max-concurrent-reconciles`, per controller. A reconcile spends nearly all its
/// time waiting for one apiserver write, so the number in flight is what limits a burst: the
/// reference's 5 wrote 36–50 PDBs a second while 1,000 new Deployments arrived (p99 from
/// Deployment to PDB 24.7 s, bench `operator_scale`). At 128 the operator's p99 matched a bare
/// loop held to 128 applies at once, but trailed one with no limit (median 1.08–1.31× over
/// 8 rounds); at 512 it was 0.91–0.98× of the unlimited loop, no round above 1.19×
/// (bench/README.md, 2026-12-04). The apiserver's API Priority and Fairness, not an
/// in-process cap, is what should queue the writes; a throttled write is retried
/// (`controller::retry`). 512 still bounds what a policy change that touches every workload
/// sends at once (over HTTP/1.1, at most that many connections).
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 512;

/// Options of `pdb-operator run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub scope: Scope,
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    pub lease_namespace: String,
    /// Identity written into the Lease (pod name).
    pub identity: String,
    /// `/healthz` + `/readyz` (+ `/metrics` when no separate metrics address is set).
    pub health_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub legacy_cross_namespace: bool,
    pub discovery_interval: Duration,
    pub max_concurrent_reconciles: u16,
}

impl RunOptions {
    /// Options for one namespace with no leader election and no HTTP listener (tests, local runs).
    pub fn for_namespace(ns: &str) -> Self {
        Self {
            scope: Scope::Namespace(ns.to_string()),
            leader_elect: false,
            lease_namespace: ns.to_string(),
            identity: "pdb-operator-local".into(),
            health_addr: None,
            metrics_addr: None,
            legacy_cross_namespace: false,
            discovery_interval: Duration::from_secs(300),
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
        }
    }
}

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "cannot listen on {addr}: {source}; pick a free port with --health-probe-bind-address / --metrics-bind-address"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "leader election with Lease {LEASE_NAME} in namespace {namespace} failed: {source}; check that the namespace exists and the ServiceAccount may get/create/update leases there"
    )]
    Lease {
        namespace: String,
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error("lost leadership of Lease {LEASE_NAME}; exiting so a fresh process can campaign again")]
    LostLeadership,
    #[error("a controller task stopped unexpectedly: {0}")]
    Task(String),
}

/// What `/readyz` reports.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub ready: bool,
    pub leader: bool,
    pub controllers: Vec<&'static str>,
    pub optional_apis: Discovered,
}

type SharedHealth = Arc<Mutex<Health>>;

fn snapshot(h: &SharedHealth) -> Health {
    h.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn update(h: &SharedHealth, f: impl FnOnce(&mut Health)) {
    f(&mut h.lock().unwrap_or_else(|e| e.into_inner()));
}

/// The HTTP routes; `/metrics` only when `metrics` is given.
pub fn router(health: SharedHealth, metrics: Option<Arc<Metrics>>) -> Router {
    let h = health.clone();
    let mut r = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let s = snapshot(&h);
                async move {
                    let code = if s.ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (code, axum::Json(s))
                }
            }),
        );
    if let Some(m) = metrics {
        r = r.route(
            "/metrics",
            get(move || {
                let body = m.render();
                async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response() }
            }),
        );
    }
    r
}

async fn serve(
    tasks: &mut JoinSet<Result<(), RunError>>,
    addr: SocketAddr,
    app: Router,
) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Bind { addr, source })?;
    tracing::info!(%addr, "serving HTTP");
    tasks.spawn(async move {
        axum::serve(listener, app)
            .await
            .map_err(|e| RunError::Task(format!("HTTP server: {e}")))
    });
    Ok(())
}

/// How often outcomes of deleted workloads are forgotten (their gauge series removed).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Forgets outcomes (and so gauge series) of workloads that no longer exist, as the running
/// controllers' stores show them. A kind with no controller, or whose store has not finished
/// its first list, is left alone.
pub fn sweep_deleted_workloads(ctx: &Context) {
    // Outcomes recorded after this point are kept even if the stores read below miss them.
    let since = ctx.outcomes.mark();
    let alive: Vec<(&str, Option<NameSet>)> = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::Workload,
        WorkloadKind::LeaderWorkerSet,
    ]
    .into_iter()
    .map(|kind| (kind.kind(), ctx.live.names(kind.kind())))
    .collect();
    let removed = ctx.outcomes.retain(
        since,
        |k| {
            alive
                .iter()
                .find(|(kind, _)| *kind == k.kind)
                .and_then(|(_, names)| names.as_ref())
                .is_none_or(|names| names.contains(&(k.namespace.clone(), k.name.clone())))
        },
        &ctx.metrics,
    );
    if removed {
        ctx.status_changed.notify_one();
    }
}

/// Runs the operator until an error (or forever). Abort or drop the future to stop it.
pub async fn run(client: Client, opts: RunOptions) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
    let health: SharedHealth = Arc::default();
    let mut tasks: JoinSet<Result<(), RunError>> = JoinSet::new();

    match (opts.health_addr, opts.metrics_addr) {
        (Some(h), Some(m)) if h != m => {
            serve(&mut tasks, h, router(health.clone(), None)).await?;
            serve(&mut tasks, m, router(health.clone(), Some(metrics.clone()))).await?;
        }
        (Some(a), _) | (None, Some(a)) => {
            serve(&mut tasks, a, router(health.clone(), Some(metrics.clone()))).await?;
        }
        (None, None) => {}
    }

    if opts.leader_elect {
        let lease_err = |source| RunError::Lease {
            namespace: opts.lease_namespace.clone(),
            source,
        };
        // Standby replicas are ready too: they serve probes while waiting for the Lease.
        update(&health, |h| h.ready = true);
        let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(opts.lease_namespace.clone())
            .with_identity(opts.identity.clone())
            .with_duration(15)
            .with_grace(5)
            .with_field_manager(crate::names::keys::OPERATOR_NAME)
            .build()
            .await
            .map_err(lease_err)?;
        let (mut rx, handle) = manager.watch().await;
        tracing::info!(lease = LEASE_NAME, identity = %opts.identity, "waiting for leadership");
        rx.wait_for(|leader| *leader)
            .await
            .map_err(|_| RunError::LostLeadership)?;
        tracing::info!("acquired leadership");
        update(&health, |h| h.leader = true);
        tasks.spawn(async move {
            let _keep = handle;
            let _ = rx.wait_for(|leader| !*leader).await;
            Err(RunError::LostLeadership)
        });
    } else {
        update(&health, |h| h.leader = true);
    }

    let trigger = PolicyTrigger::default();
    let status_changed = Arc::new(tokio::sync::Notify::new());
    let policy_api: Api<PDBPolicy> = opts.scope.api(&client);
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: crate::names::keys::OPERATOR_NAME.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let (ns_store, ns_watch) = watch_policies(
        policy_api,
        trigger.clone(),
        status_changed.clone(),
        recorder.clone(),
    );
    let (cl_store, cl_watch) = watch_policies(
        Api::<ClusterPDBPolicy>::all(client.clone()),
        trigger.clone(),
        status_changed.clone(),
        recorder,
    );
    tasks.spawn(async move {
        ns_watch.await;
        Err(RunError::Task("PDBPolicy watch ended".into()))
    });
    tasks.spawn(async move {
        cl_watch.await;
        Err(RunError::Task("ClusterPDBPolicy watch ended".into()))
    });
    let recent_writes = Arc::new(crate::controller::pdb_cache::RecentWrites::default());
    let (pdb_cache, pdb_events, pdb_watch) =
        watch_pdbs(opts.scope.api(&client), recent_writes.clone());
    tasks.spawn(async move {
        pdb_watch.await;
        Err(RunError::Task("PodDisruptionBudget watch ended".into()))
    });
    // Decide nothing before the policies are known, or every workload would look unmanaged,
    // nor before the PDBs are, or existing ones would look missing.
    let _ = ns_store.wait_until_ready().await;
    let _ = cl_store.wait_until_ready().await;
    pdb_cache.wait_until_ready().await;

    let mut ctx = Context::new(
        client.clone(),
        metrics.clone(),
        opts.scope.clone(),
        opts.legacy_cross_namespace,
        (ns_store, cl_store),
    );
    ctx.status_changed = status_changed;
    ctx.pdbs = Some(pdb_cache);
    ctx.pdb_events = Some(pdb_events);
    ctx.recent_writes = recent_writes;
    let ctx = Arc::new(ctx);
    let n = opts.max_concurrent_reconciles;

    let (c, t) = (ctx.clone(), trigger.subscribe());
    tasks.spawn(async move {
        apps::run_deployments(c, t, n).await;
        Err(RunError::Task("deployment-pdb controller ended".into()))
    });
    let (c, t) = (ctx.clone(), trigger.subscribe());
    tasks.spawn(async move {
        apps::run_stateful_sets(c, t, n).await;
        Err(RunError::Task("statefulset-pdb controller ended".into()))
    });
    let c = ctx.clone();
    tasks.spawn(async move {
        run_status_writer(c, Duration::from_millis(500), Duration::from_secs(300)).await;
        Err(RunError::Task("policy status writer ended".into()))
    });
    let c = ctx.clone();
    tasks.spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_INTERVAL).await;
            sweep_deleted_workloads(&c);
        }
    });
    let c = ctx.clone();
    tasks.spawn(async move {
        crate::controller::orphans::delete_orphaned_pdbs(c).await;
        Err(RunError::Task("orphaned PDB cleanup ended".into()))
    });
    update(&health, |h| {
        h.controllers = vec!["pdbpolicy", "deployment-pdb", "statefulset-pdb"];
        h.ready = true;
    });

    let mut interval = tokio::time::interval(opts.discovery_interval);
    let (mut workloads_on, mut lws_on) = (false, false);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let found = discover(&client).await;
                if found.workload_api.served && !workloads_on {
                    workloads_on = true;
                    let (c, t) = (ctx.clone(), trigger.subscribe());
                    tasks.spawn(async move {
                        gang::run_workloads(c, t, n).await;
                        Err(RunError::Task("workload-pdb controller ended".into()))
                    });
                    update(&health, |h| h.controllers.push("workload-pdb"));
                }
                if found.leader_worker_set.served && !lws_on {
                    lws_on = true;
                    let (c, t) = (ctx.clone(), trigger.subscribe());
                    tasks.spawn(async move {
                        lws::run_leader_worker_sets(c, t, n).await;
                        Err(RunError::Task("leaderworkerset-pdb controller ended".into()))
                    });
                    update(&health, |h| h.controllers.push("leaderworkerset-pdb"));
                }
                let changed = snapshot(&health).optional_apis != found;
                if changed {
                    tracing::info!(workload_api = %found.workload_api.detail,
                        leader_worker_set = %found.leader_worker_set.detail, "API discovery");
                }
                update(&health, |h| h.optional_apis = found);
            }
            done = tasks.join_next() => {
                return match done {
                    Some(Ok(Err(e))) => Err(e),
                    Some(Ok(Ok(()))) => Err(RunError::Task("a task ended".into())),
                    Some(Err(e)) => Err(RunError::Task(e.to_string())),
                    None => Err(RunError::Task("no tasks left".into())),
                };
            }
        }
    }
}
