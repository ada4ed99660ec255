//! Start-up reconciliation and the orphan GC: which managed objects belong to a request orb
//! still tracks, and which are orphans. The decisions are pure ([`classify`], [`plan_gc`]);
//! the runners only LIST managed objects ([`list_managed`]) and delete the orphans the plan
//! names ([`delete_orphan`]). The caller (orb serve) looks the request ids up in its store.
//!
//! Only objects labelled `<prefix>/managed=true` are ever listed, so nothing else can be
//! touched. An object is never called an orphan while it backs a machine the store holds as
//! live, whatever its request's status says.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use futures::{StreamExt, stream};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Preconditions, PropagationPolicy};
use kube::{Api, Client, Resource};
use orb_core::ProviderApi;
use orb_core::machine::Machine;
use orb_core::request::{Request, RequestStatus, RequestType};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::NamespaceScope;
use crate::error::{K8sError, is_conflict, is_not_found};
use crate::labels::LabelKeys;
use crate::metrics::K8sMetrics;
use crate::metrics::{KindLabels, OrphanLabels};

/// Deletes of one GC pass in flight at once.
const DELETES_IN_FLIGHT: usize = 50;

/// The metric label of a kind (`pod`, `deployment`, `statefulset`, `job`).
pub fn kind_label(kind: ProviderApi) -> &'static str {
    match kind {
        ProviderApi::Pod => "pod",
        ProviderApi::Deployment => "deployment",
        ProviderApi::StatefulSet => "statefulset",
        ProviderApi::Job => "job",
    }
}

/// What the reconciler needs to know about one managed object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManagedObject {
    pub kind: ProviderApi,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// The `<prefix>/request-id` label, when present and non-empty.
    pub request_id: Option<String>,
    pub created: Option<Timestamp>,
    /// Already being deleted (deletionTimestamp set).
    pub deleting: bool,
    /// A pod with a controller owner: judged through its controller, never alone.
    pub controlled: bool,
}

/// A stored request and, when it has finished, its machines (an unfinished request's objects
/// are all its own whatever its machines say, so they are not read).
#[derive(Debug, Clone)]
pub struct StoredRequest {
    pub request: Request,
    pub machines: Vec<Machine>,
}

/// Why an object is an orphan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum OrphanReason {
    /// The managed label is there, the request-id label is not.
    MissingRequestId,
    /// The request-id label names no acquire request in the store.
    UnknownRequest { request_id: String },
    /// The request is over and no live machine of it needs this object.
    FinishedRequest {
        request_id: String,
        status: RequestStatus,
    },
}

impl fmt::Display for OrphanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingRequestId => f.write_str("it has no request-id label"),
            Self::UnknownRequest { request_id } => {
                write!(f, "request {request_id} is not in orb's store")
            }
            Self::FinishedRequest { request_id, status } => write!(
                f,
                "request {request_id} is {status} and no live machine of it uses the object"
            ),
        }
    }
}

/// The reconciler's decision on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classification {
    /// Belongs to a request orb tracks.
    Adopted {
        request_id: String,
    },
    /// A pod of a controller, or an object being deleted: nothing to decide.
    Skipped,
    Orphan(OrphanReason),
}

/// Delivered requests whose objects stay until the scheduler returns the machines.
fn delivered(status: RequestStatus) -> bool {
    matches!(status, RequestStatus::Complete | RequestStatus::Partial)
}

/// A stored machine still needs its object: live, and (for a delivered request) not given back.
fn holds(machine: &Machine, status: RequestStatus) -> bool {
    if delivered(status) {
        machine.return_request_id.is_none() && machine.status != orb_core::MachineStatus::Returned
    } else {
        machine.status.is_live()
    }
}

/// The machines of a stored request that still need their objects, by name: worked out once
/// per request, so a pass over the pods of a finished 5,000-machine request does not scan its
/// machines once per pod.
struct Held<'a> {
    names: HashSet<&'a str>,
}

impl<'a> Held<'a> {
    fn of(stored: &'a StoredRequest) -> Self {
        let status = stored.request.status;
        Self {
            names: stored
                .machines
                .iter()
                .filter(|m| holds(m, status))
                .map(|m| m.machine_id.as_str())
                .collect(),
        }
    }
}

/// Whether `object` belongs to a request orb tracks. `stored` is the request its label names
/// (`None`: not in the store).
pub fn classify(object: &ManagedObject, stored: Option<&StoredRequest>) -> Classification {
    classify_held(object, stored.map(|s| (s, Held::of(s))).as_ref())
}

fn classify_held(
    object: &ManagedObject,
    stored: Option<&(&StoredRequest, Held<'_>)>,
) -> Classification {
    if object.deleting || object.controlled {
        return Classification::Skipped;
    }
    let Some(request_id) = object.request_id.clone() else {
        return Classification::Orphan(OrphanReason::MissingRequestId);
    };
    let Some((stored, held)) =
        stored.filter(|(s, _)| s.request.request_type == RequestType::Acquire)
    else {
        return Classification::Orphan(OrphanReason::UnknownRequest { request_id });
    };
    let status = stored.request.status;
    if !status.is_terminal() {
        return Classification::Adopted { request_id };
    }
    let needed = match object.kind {
        // A bare pod is one machine: it is needed while that machine is.
        ProviderApi::Pod => held.names.contains(object.name.as_str()),
        // A controller is needed while any machine of its request is.
        _ => !held.names.is_empty(),
    };
    if needed {
        Classification::Adopted { request_id }
    } else {
        Classification::Orphan(OrphanReason::FinishedRequest { request_id, status })
    }
}

/// One orphan, as reported and logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    pub kind: ProviderApi,
    pub namespace: String,
    pub name: String,
    #[serde(skip)]
    pub uid: Option<String>,
    pub why: OrphanReason,
    /// Seconds since creation, when known.
    pub age_seconds: Option<u64>,
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}: {}",
            self.kind, self.namespace, self.name, self.why
        )
    }
}

/// What one pass over the managed objects found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub seen: BTreeMap<ProviderApi, usize>,
    pub adopted: BTreeMap<ProviderApi, usize>,
    /// Orphans old enough to act on (reported or deleted).
    pub orphans: Vec<Orphan>,
    /// Orphans younger than the minimum age, left alone this pass.
    pub young: Vec<Orphan>,
}

fn age(created: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let created = created?;
    let secs = now.duration_since(created).as_secs();
    Some(Duration::from_secs(secs.max(0) as u64))
}

/// Classifies every object; orphans younger than `min_age` (or of unknown age) go to
/// `young`, so a request being committed right now is never raced.
pub fn plan_gc(
    objects: &[ManagedObject],
    requests: &BTreeMap<String, StoredRequest>,
    now: Timestamp,
    min_age: Duration,
) -> Plan {
    let mut plan = Plan::default();
    let mut held: HashMap<&str, (&StoredRequest, Held<'_>)> = HashMap::new();
    for object in objects {
        *plan.seen.entry(object.kind).or_default() += 1;
        let found = object
            .request_id
            .as_ref()
            .and_then(|id| requests.get_key_value(id));
        let stored = found.map(|(key, stored)| {
            &*held
                .entry(key.as_str())
                .or_insert_with(|| (stored, Held::of(stored)))
        });
        match classify_held(object, stored) {
            Classification::Skipped => {}
            Classification::Adopted { .. } => *plan.adopted.entry(object.kind).or_default() += 1,
            Classification::Orphan(why) => {
                let object_age = age(object.created, now);
                let orphan = Orphan {
                    kind: object.kind,
                    namespace: object.namespace.clone(),
                    name: object.name.clone(),
                    uid: object.uid.clone(),
                    why,
                    age_seconds: object_age.map(|a| a.as_secs()),
                };
                match object_age {
                    Some(a) if a >= min_age => plan.orphans.push(orphan),
                    _ => plan.young.push(orphan),
                }
            }
        }
    }
    plan
}

/// The request ids named by the objects' labels.
pub fn request_ids(objects: &[ManagedObject]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o.request_id.clone())
        .collect()
}

fn to_object(kind: ProviderApi, meta: ObjectMeta, keys: &LabelKeys) -> ManagedObject {
    ManagedObject {
        kind,
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        uid: meta.uid,
        request_id: meta
            .labels
            .and_then(|mut labels| labels.remove(&keys.request_id()))
            .filter(|v| !v.is_empty()),
        created: meta.creation_timestamp.map(|t| t.0),
        deleting: meta.deletion_timestamp.is_some(),
        controlled: kind == ProviderApi::Pod
            && meta
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| o.controller == Some(true)),
    }
}

async fn list_kind<K>(
    client: &Client,
    namespace: Option<&str>,
    kind: ProviderApi,
    keys: &LabelKeys,
) -> Result<Vec<ManagedObject>, K8sError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    // Reconciliation reads metadata only, page by page: a namespace of 10,000 pods would
    // otherwise cost their full bodies in memory at once.
    let context = || {
        format!(
            "listing managed {kind}s in {}",
            namespace.unwrap_or("all namespaces")
        )
    };
    let url = K::url_path(&(), namespace);
    let mut params = ListParams::default()
        .labels(&keys.managed_selector())
        .limit(500);
    let mut objects = Vec::new();
    loop {
        let page = crate::protobuf_list::list_metadata(client, &url, &params)
            .await
            .map_err(|e| K8sError::api(context(), e))?;
        objects.extend(
            page.items
                .into_iter()
                .map(|meta| to_object(kind, meta, keys)),
        );
        match page.continue_token {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}

/// The namespaces a scope covers (`None`: cluster-wide), and how the report names them.
pub fn scope_namespaces(scope: &NamespaceScope) -> Vec<Option<String>> {
    match scope {
        NamespaceScope::Single(ns) => vec![Some(ns.clone())],
        NamespaceScope::Multi(list) => list.iter().cloned().map(Some).collect(),
        NamespaceScope::ClusterWide => vec![None],
    }
}

/// Every managed pod, Deployment, StatefulSet and Job in the scope (one LIST per kind and
/// namespace, selector `<prefix>/managed=true`).
pub async fn list_managed(
    client: &Client,
    scope: &NamespaceScope,
    label_prefix: &str,
) -> Result<Vec<ManagedObject>, K8sError> {
    let keys = LabelKeys::new(label_prefix);
    let mut objects = Vec::new();
    for namespace in scope_namespaces(scope) {
        let ns = namespace.as_deref();
        objects.extend(list_kind::<Pod>(client, ns, ProviderApi::Pod, &keys).await?);
        objects.extend(list_kind::<Deployment>(client, ns, ProviderApi::Deployment, &keys).await?);
        objects
            .extend(list_kind::<StatefulSet>(client, ns, ProviderApi::StatefulSet, &keys).await?);
        objects.extend(list_kind::<Job>(client, ns, ProviderApi::Job, &keys).await?);
    }
    Ok(objects)
}

async fn delete_object<K>(client: &Client, orphan: &Orphan) -> Result<(), kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + fmt::Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), &orphan.namespace);
    // The UID precondition keeps a newer object of the same name (a new request) safe; the
    // background policy lets the garbage collector remove a controller's pods.
    let params = DeleteParams {
        preconditions: orphan.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        propagation_policy: (orphan.kind != ProviderApi::Pod)
            .then_some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(&orphan.name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or replaced by another object of that name: ours is gone.
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes one orphan; a 404 counts as deleted.
pub async fn delete_orphan(client: &Client, orphan: &Orphan) -> Result<(), K8sError> {
    let result = match orphan.kind {
        ProviderApi::Pod => delete_object::<Pod>(client, orphan).await,
        ProviderApi::Deployment => delete_object::<Deployment>(client, orphan).await,
        ProviderApi::StatefulSet => delete_object::<StatefulSet>(client, orphan).await,
        ProviderApi::Job => delete_object::<Job>(client, orphan).await,
    };
    result.map_err(|e| K8sError::api(format!("deleting orphaned {orphan}"), e))
}

/// What a GC pass did with its orphans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcOutcome {
    pub reported: Vec<Orphan>,
    pub deleted: Vec<Orphan>,
    pub failed: Vec<(Orphan, String)>,
}

/// Counts (report-only) or deletes the plan's orphans, in `orphans{kind,action}`. The
/// caller writes the WARNING line of each from the outcome.
pub async fn act_on_orphans(
    client: &Client,
    orphans: Vec<Orphan>,
    delete: bool,
    metrics: &K8sMetrics,
) -> GcOutcome {
    let count = |orphan: &Orphan, action: &'static str| {
        metrics
            .orphans
            .get_or_create(&OrphanLabels {
                kind: kind_label(orphan.kind),
                action,
            })
            .inc();
    };
    let mut outcome = GcOutcome::default();
    if !delete {
        for orphan in orphans {
            count(&orphan, "reported");
            outcome.reported.push(orphan);
        }
        return outcome;
    }
    let results: Vec<(Orphan, Result<(), K8sError>)> = stream::iter(orphans)
        .map(|orphan| async move {
            let result = delete_orphan(client, &orphan).await;
            (orphan, result)
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .collect()
        .await;
    for (orphan, result) in results {
        match result {
            Ok(()) => {
                count(&orphan, "deleted");
                outcome.deleted.push(orphan);
            }
            Err(e) => outcome.failed.push((orphan, e.to_string())),
        }
    }
    outcome
}

/// Counts a plan's adopted objects in `adopted{kind}`.
pub fn count_adopted(plan: &Plan, metrics: &K8sMetrics) {
    for (kind, n) in &plan.adopted {
        metrics
            .adopted
            .get_or_create(&KindLabels {
                kind: kind_label(*kind),
            })
            .inc_by(*n as u64);
    }
}

/// The start-up reconciliation's findings, logged and shown by `/readyz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconcileReport {
    /// The namespaces listed (`*` for cluster-wide).
    pub namespaces: Vec<String>,
    /// Managed objects seen, by kind.
    pub objects_seen: BTreeMap<String, usize>,
    /// Objects of a request orb tracks, by kind.
    pub adopted: BTreeMap<String, usize>,
    /// Interrupted acquires resumed (or failed explicitly), with what became of each.
    pub resumed: Vec<String>,
    pub orphans: Vec<Orphan>,
    pub duration_ms: u64,
    /// Set when the reconciliation could not finish (e.g. the LIST failed).
    pub error: Option<String>,
}

impl ReconcileReport {
    /// An empty report over `scope`'s namespaces.
    pub fn for_scope(scope: &NamespaceScope) -> Self {
        Self {
            namespaces: scope_namespaces(scope)
                .into_iter()
                .map(|n| n.unwrap_or_else(|| "*".into()))
                .collect(),
            ..Self::default()
        }
    }

    /// Fills the counts and orphans from a plan (young orphans count as orphans here: the
    /// report says what exists, the GC decides what to act on).
    pub fn record_plan(&mut self, plan: &Plan) {
        let by_label = |m: &BTreeMap<ProviderApi, usize>| {
            m.iter()
                .map(|(k, n)| (kind_label(*k).to_string(), *n))
                .collect()
        };
        self.objects_seen = by_label(&plan.seen);
        self.adopted = by_label(&plan.adopted);
        self.orphans = plan
            .orphans
            .iter()
            .chain(plan.young.iter())
            .cloned()
            .collect();
    }

    /// One line for the log and `/readyz`.
    pub fn summary(&self) -> String {
        if let Some(error) = &self.error {
            return format!("reconciliation failed: {error}");
        }
        let total = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
        let mut line = format!(
            "reconciled {} in {} ms: {} managed objects seen, {} adopted, {} orphans",
            self.namespaces.join(","),
            self.duration_ms,
            total(&self.objects_seen),
            total(&self.adopted),
            self.orphans.len()
        );
        if !self.resumed.is_empty() {
            line.push_str(&format!(
                ", {} interrupted acquires settled ({})",
                self.resumed.len(),
                self.resumed.join("; ")
            ));
        }
        if !self.orphans.is_empty() {
            let first: Vec<String> = self.orphans.iter().take(5).map(|o| o.to_string()).collect();
            line.push_str(&format!(
                " ({}{})",
                first.join("; "),
                if self.orphans.len() > 5 { "; …" } else { "" }
            ));
        }
        line
    }
}

/// What the background tasks tell the HTTP layer (`/readyz`) and other tasks: the start-up
/// reconciliation's report and this replica's leadership.
#[derive(Debug, Default)]
pub struct DaemonStatus {
    reconciliation: std::sync::RwLock<Option<ReconcileReport>>,
    leadership: std::sync::OnceLock<crate::daemon::leader::Leadership>,
}

impl DaemonStatus {
    pub fn set_reconciliation(&self, report: ReconcileReport) {
        *self
            .reconciliation
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(report);
    }

    /// `None` until the start-up reconciliation has finished.
    pub fn reconciliation(&self) -> Option<ReconcileReport> {
        self.reconciliation
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_leadership(&self, leadership: crate::daemon::leader::Leadership) -> bool {
        self.leadership.set(leadership).is_ok()
    }

    pub fn leadership(&self) -> Option<&crate::daemon::leader::Leadership> {
        self.leadership.get()
    }

    /// Whether this replica runs the cluster-wide chores now.
    pub fn is_leader(&self) -> bool {
        self.leadership.get().is_some_and(|l| l.is_leader())
    }
}

#[cfg(test)]
mod tests;
