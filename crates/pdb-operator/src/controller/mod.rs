//! The live half of the operator: kube Controllers that gather inputs, ask the pure
//! [`crate::desired`] functions for a [`crate::desired::Decision`] and carry it out
//! (server-side apply, delete, events, metrics, policy status).

pub mod apps;
pub mod cached_pdbs;
pub mod carry_out;
pub mod discovery;
pub mod gang;
pub mod live;
pub mod lws;
pub mod orphans;
pub mod outcomes;
pub mod pdb_cache;
pub mod policies;
pub mod queue;
pub mod retry;
pub mod triggers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{RETRY_AFTER, ViewError, WorkloadKind};
use crate::enforcement::{EventNote, EventType};
use crate::metrics::Metrics;
use crate::names::keys;
use outcomes::Outcomes;

/// Which namespaces the operator watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    AllNamespaces,
    /// `--watch-namespace`: workloads, pods, PDBs and PDBPolicies of one namespace only.
    Namespace(String),
}

impl Scope {
    /// A namespaced `Api` of the scope (all namespaces or the watched one).
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self {
            Self::AllNamespaces => Api::all(client.clone()),
            Self::Namespace(ns) => Api::namespaced(client.clone(), ns),
        }
    }

    /// Whether a ClusterPDBPolicy's status is ours to write: always when watching everything,
    /// else only when the policy is limited to exactly the watched namespace (several
    /// namespace-scoped operators must not overwrite each other's view).
    pub fn writes_cluster_policy_status(&self, p: &ClusterPDBPolicy) -> bool {
        match self {
            Self::AllNamespaces => true,
            Self::Namespace(ns) => p.spec.0.workload_selector.namespaces == [ns.clone()],
        }
    }
}

/// Errors a reconcile can end with; they are counted and retried after 30 s.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    View(#[from] ViewError),
}

impl Error {
    /// `error_type` label: the API status reason (`conflict`, `forbidden`, ...).
    pub fn metric_label(&self) -> String {
        match self {
            Self::Kube(e) => retry::error_type(e),
            Self::View(_) => "invalid_object".into(),
        }
    }
}

/// Shared state of every controller.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub outcomes: Arc<Outcomes>,
    pub scope: Scope,
    pub legacy_cross_namespace: bool,
    pub namespaced_policies: Store<PDBPolicy>,
    pub cluster_policies: Store<ClusterPDBPolicy>,
    /// Wakes the policy status writer.
    pub status_changed: Arc<tokio::sync::Notify>,
    /// PDBs of the scope from a shared watch (`None`: each reconcile LISTs its namespace).
    pub pdbs: Option<Arc<cached_pdbs::PdbCache>>,
    /// The shared PDB watch's events (`None`: each controller watches PDBs itself).
    pub pdb_events: Option<pdb_cache::PdbEvents>,
    /// Our PDB writes the `pdbs` cache may not show yet.
    pub recent_writes: Arc<pdb_cache::RecentWrites>,
    /// Workloads waiting for a reconcile (`pdb_operator_reconcile_queue_length`).
    pub queue: Arc<queue::WorkQueue>,
    /// Each running controller's store of its workloads, for the sweep of deleted ones.
    pub live: live::LiveWorkloads,
    /// Bounds the announcements ([`Context::announce`]) being posted at once.
    announcing: Arc<tokio::sync::Semaphore>,
}

/// Announcements posted at once at most. Few: in a burst of new workloads every PDB write is
/// followed by a `PDBCreated` post, and these compete with the PDB writes at the apiserver; two
/// at a time let them trail the burst by a few seconds instead.
const ANNOUNCING: usize = 2;

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        scope: Scope,
        legacy_cross_namespace: bool,
        stores: (Store<PDBPolicy>, Store<ClusterPDBPolicy>),
    ) -> Self {
        let reporter = Reporter {
            controller: keys::OPERATOR_NAME.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            outcomes: Arc::default(),
            scope,
            legacy_cross_namespace,
            namespaced_policies: stores.0,
            cluster_policies: stores.1,
            status_changed: Arc::default(),
            pdbs: None,
            pdb_events: None,
            recent_writes: Arc::default(),
            queue: Arc::new(queue::WorkQueue::new(
                metrics.reconcile_queue_length.clone(),
            )),
            live: live::LiveWorkloads::default(),
            announcing: Arc::new(tokio::sync::Semaphore::new(ANNOUNCING)),
            metrics,
        }
    }

    /// Current policies (copies out of the reflector stores) for a decision, without their
    /// status: no decision reads it, and a policy applied to 5,000 workloads carries 10,000
    /// names there, which every reconcile copied.
    pub fn policies(&self) -> (Vec<PDBPolicy>, Vec<ClusterPDBPolicy>) {
        let ns = self
            .namespaced_policies
            .state()
            .iter()
            .map(|p| PDBPolicy {
                metadata: p.metadata.clone(),
                spec: p.spec.clone(),
                status: None,
            })
            .collect();
        let cl = self
            .cluster_policies
            .state()
            .iter()
            .map(|p| ClusterPDBPolicy {
                metadata: p.metadata.clone(),
                spec: p.spec.clone(),
                status: None,
            })
            .collect();
        (ns, cl)
    }

    /// Posts one event on `regarding` (events.k8s.io/v1, see [`event_of`]). A failed post is
    /// logged, never fatal: the decision has been carried out already. Returns whether it posted.
    pub async fn publish(&self, regarding: &ObjectReference, note: &EventNote) -> bool {
        match self.recorder.publish(&event_of(note), regarding).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(reason = note.reason, error = %e, "posting event failed");
                false
            }
        }
    }

    /// Posts an event that reports a write already made (PDB created, updated, deleted) without
    /// holding up the reconcile: a reconciler slot is not kept for the round-trip. A failed post
    /// is logged; nothing depends on it.
    pub fn announce(&self, regarding: &ObjectReference, note: EventNote) {
        let (recorder, permits, regarding) = (
            self.recorder.clone(),
            self.announcing.clone(),
            regarding.clone(),
        );
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            if let Err(e) = recorder.publish(&event_of(&note), &regarding).await {
                tracing::warn!(reason = note.reason, error = %e, "posting event failed");
            }
        });
    }
}

/// The event for `note`. The recorder folds a repeat into a series by type, reason and action,
/// never the note: with `action = reason` a repeat kept its first text while its count grew
/// ("minAvailable 7" when the PDB had become 11). So the action carries a digest of the text: the
/// same text repeated is one series, a changed text is a new event with the current figures.
fn event_of(note: &EventNote) -> Event {
    use std::hash::{Hash, Hasher};
    let text = truncate(&note.message, 1000);
    let mut digest = std::hash::DefaultHasher::new();
    text.hash(&mut digest);
    Event {
        type_: match note.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        },
        reason: note.reason.into(),
        note: Some(text),
        action: format!("{}-{:08x}", note.reason, digest.finish() as u32),
        secondary: None,
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Object reference for events about `obj`.
pub fn reference_of<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    obj.object_ref(&())
}

impl AsRef<Context> for Context {
    fn as_ref(&self) -> &Context {
        self
    }
}

/// Counts a failed reconcile and retries it after 30 s.
pub fn error_policy<K, C: AsRef<Context>>(
    kind: WorkloadKind,
) -> impl Fn(Arc<K>, &Error, Arc<C>) -> Action {
    move |_obj, err, ctx| {
        let ctx = (*ctx).as_ref();
        tracing::warn!(controller = kind.controller_name(), error = %err, "reconcile failed");
        ctx.metrics
            .reconcile_errors
            .get_or_create(&vec![
                ("controller", kind.controller_name().to_string()),
                ("error_type", err.metric_label()),
            ])
            .inc();
        Action::requeue(RETRY_AFTER)
    }
}

/// Times the reconcile of `obj` into `pdb_operator_reconciliation_duration_seconds` (and takes
/// it off the waiting count).
pub async fn timed<F>(
    ctx: &Context,
    kind: WorkloadKind,
    obj: &kube::api::ObjectMeta,
    fut: F,
) -> Result<Action, Error>
where
    F: std::future::Future<Output = Result<Action, Error>>,
{
    let start = Instant::now();
    ctx.queue.started(
        kind,
        obj.namespace.as_deref(),
        obj.name.as_deref().unwrap_or_default(),
    );
    let out = fut.await;
    let result = if out.is_ok() { "success" } else { "error" };
    ctx.metrics
        .reconcile_duration
        .get_or_create(&vec![
            ("controller", kind.controller_name().to_string()),
            ("result", result.to_string()),
        ])
        .observe(start.elapsed().as_secs_f64());
    out
}

/// Strips the reference operator's legacy finalizer from a workload, if present.
pub async fn strip_legacy_finalizer<K>(
    api: &Api<K>,
    meta: &kube::api::ObjectMeta,
) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(kept) = meta
        .finalizers
        .as_deref()
        .and_then(crate::pdb::without_legacy_finalizers)
    else {
        return Ok(());
    };
    let name = meta.name.clone().unwrap_or_default();
    let patch = serde_json::json!({
        "metadata": {"finalizers": kept, "resourceVersion": meta.resource_version}
    });
    api.patch(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    tracing::info!(workload = %name, "removed the reference operator's legacy finalizer");
    Ok(())
}

/// How long a workload's reconcile waits for more changes of the same object. Short: status-only
/// updates, the Deployment controller's revision annotation and the echoes of our own writes
/// never trigger (see `triggers`), so this only folds together triggers that arrive at the same
/// moment from different watches, and every new workload pays it once before its PDB is written.
pub const DEBOUNCE: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_message_is_a_new_event_and_a_repeat_is_the_same_series() {
        let blocked = |live: u32| {
            event_of(&EventNote::warning(
                "WorkloadDrainBlocked",
                format!("{live} of its 6 gang pods live"),
            ))
        };
        assert_eq!(blocked(3).action, blocked(3).action);
        assert_ne!(blocked(3).action, blocked(4).action);
        assert!(blocked(3).action.starts_with("WorkloadDrainBlocked-"));
        assert!(blocked(3).action.len() <= 128, "the API's limit");
    }
}
