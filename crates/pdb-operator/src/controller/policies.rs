//! PDBPolicy / ClusterPDBPolicy: reflector stores the workload controllers read, a trigger that
//! re-reconciles every workload when a policy's spec, labels or existence change (so workloads
//! matched by the old OR the new spec are looked at), and the status writer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use super::{Context, Scope};
use crate::crd::{ClusterPDBPolicy, PDBPolicy, PDBPolicySpec, PDBPolicyStatus};
use crate::enforcement::EventNote;
use crate::names::{keys, reasons};
use crate::status::{VALIDATED, policy_status};
use crate::validation::{PolicyScope, validate_policy_spec};

/// Fan-out of "some policy changed" to every controller.
#[derive(Clone)]
pub struct PolicyTrigger(broadcast::Sender<()>);

impl Default for PolicyTrigger {
    fn default() -> Self {
        Self(broadcast::channel(64).0)
    }
}

impl PolicyTrigger {
    pub fn fire(&self) {
        let _ = self.0.send(());
    }

    /// A stream that yields once per change (lagging receivers just yield once more).
    pub fn subscribe(&self) -> impl Stream<Item = ()> + Send + 'static {
        let rx = self.0.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => Some(((), rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
    }
}

/// What about a policy matters to workloads: spec generation and labels.
fn fingerprint<K: Resource>(o: &K) -> (Option<i64>, BTreeMap<String, String>) {
    (
        o.meta().generation,
        o.meta().labels.clone().unwrap_or_default(),
    )
}

/// Posts Normal `PolicyRemoved` about a policy the watch saw deleted. Best effort: a policy
/// deleted while the watch was away is only noticed by its absence, and a failed post is logged.
fn announce_removal<K>(recorder: &Recorder, o: &K)
where
    K: Resource<DynamicType = ()>,
{
    let name = o.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&());
    let event = Event {
        type_: EventType::Normal,
        reason: reasons::POLICY_REMOVED.into(),
        note: Some(format!(
            "{kind} {name} was deleted; the workloads it selected are decided again from their annotations and the remaining policies"
        )),
        action: reasons::POLICY_REMOVED.into(),
        secondary: None,
    };
    let (recorder, reference) = (recorder.clone(), o.object_ref(&()));
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(policy = %name, error = %e, "posting PolicyRemoved failed");
        }
    });
}

/// Watches `api` into a store; fires `trigger` (and wakes the status writer) on relevant changes,
/// and posts `PolicyRemoved` through `recorder` when a policy is deleted. Status-only updates
/// (our own status writes) fire nothing.
pub fn watch_policies<K>(
    api: Api<K>,
    trigger: PolicyTrigger,
    status_changed: Arc<tokio::sync::Notify>,
    recorder: Recorder,
) -> (Store<K>, impl std::future::Future<Output = ()> + Send)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let fut = async move {
        let mut seen: BTreeMap<String, (Option<i64>, BTreeMap<String, String>)> = BTreeMap::new();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o| o.meta_mut().managed_fields = None)
            .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let changed = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let uid = o.uid().unwrap_or_default();
                    let fp = fingerprint(&o);
                    seen.insert(uid, fp.clone()) != Some(fp)
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.remove(&o.uid().unwrap_or_default());
                    announce_removal(&recorder, &o);
                    true
                }
                Ok(watcher::Event::InitDone) => true,
                Ok(watcher::Event::Init) => false,
                Err(e) => {
                    tracing::warn!(error = %e, "policy watch error; retrying");
                    false
                }
            };
            if changed {
                trigger.fire();
                status_changed.notify_one();
            }
        }
    };
    (reader, fut)
}

fn significant(s: &PDBPolicyStatus) -> PDBPolicyStatus {
    let mut s = s.clone();
    s.last_applied_time = None;
    for c in &mut s.conditions {
        c.last_transition_time =
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
    }
    s
}

/// One policy of either kind, as the status writer needs it.
struct PolicyTarget<'a> {
    kind: &'static str,
    key: String,
    spec: &'a PDBPolicySpec,
    scope: PolicyScope,
    previous: Option<&'a PDBPolicyStatus>,
}

async fn write_one<K>(ctx: &Context, api: Api<K>, obj: &K, target: PolicyTarget<'_>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Serialize,
{
    let PolicyTarget {
        kind,
        key,
        spec,
        scope,
        previous,
    } = target;
    let report = validate_policy_spec(spec, &scope);
    let outcome = ctx.outcomes.policy_outcome(kind, &key);
    let status = policy_status(
        &report,
        &outcome,
        obj.meta().generation,
        Timestamp::now(),
        previous,
    );
    if previous.map(significant) == Some(significant(&status)) {
        return;
    }
    let name = obj.name_any();
    let patch = serde_json::json!({
        "apiVersion": format!("{}/{}", crate::crd::GROUP, crate::crd::VERSION),
        "kind": kind,
        "status": status,
    });
    let params = PatchParams::apply(keys::OPERATOR_NAME).force();
    if let Err(e) = api
        .patch_status(&name, &params, &Patch::Apply(&patch))
        .await
    {
        tracing::warn!(policy = %key, error = %e, "writing policy status failed");
        return;
    }
    let reference = obj.object_ref(&());
    let was_invalid = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == VALIDATED))
        .is_some_and(|c| c.status == "False");
    if let Some(err) = report.errors.first()
        && !was_invalid
    {
        let note = EventNote::warning(reasons::POLICY_INVALID, format!("Policy is invalid: {err}"));
        ctx.publish(&reference, &note).await;
    }
    let before = previous.map_or(0, |p| p.workload_count);
    if status.workload_count != before {
        let note = if status.workload_count > before {
            EventNote::normal(
                reasons::POLICY_APPLIED,
                format!("Policy is applied to {} workloads", status.workload_count),
            )
        } else {
            EventNote::normal(
                reasons::POLICY_UPDATED,
                format!(
                    "Workload count changed from {before} to {}",
                    status.workload_count
                ),
            )
        };
        ctx.publish(&reference, &note).await;
    }
}

/// One pass over every policy in scope: status and the `policies_active` gauge.
pub async fn write_statuses(ctx: &Context) {
    ctx.metrics.policies_active.clear();
    for p in ctx.namespaced_policies.state() {
        let ns = p.namespace().unwrap_or_default();
        let scope = PolicyScope::Namespaced(ns.clone());
        if validate_policy_spec(&p.spec, &scope).is_valid() {
            ctx.metrics
                .policies_active
                .get_or_create(&vec![("namespace", ns.clone())])
                .inc();
        }
        let api: Api<PDBPolicy> = Api::namespaced(ctx.client.clone(), &ns);
        let key = format!("{ns}/{}", p.name_any());
        let target = PolicyTarget {
            kind: "PDBPolicy",
            key,
            spec: &p.spec,
            scope,
            previous: p.status.as_ref(),
        };
        write_one(ctx, api, p.as_ref(), target).await;
    }
    for p in ctx.cluster_policies.state() {
        if !ctx.scope.writes_cluster_policy_status(&p) {
            continue;
        }
        if matches!(ctx.scope, Scope::AllNamespaces)
            && validate_policy_spec(&p.spec.0, &PolicyScope::Cluster).is_valid()
        {
            ctx.metrics
                .policies_active
                .get_or_create(&vec![("namespace", String::new())])
                .inc();
        }
        let api: Api<ClusterPDBPolicy> = Api::all(ctx.client.clone());
        let key = p.name_any();
        let target = PolicyTarget {
            kind: "ClusterPDBPolicy",
            key,
            spec: &p.spec.0,
            scope: PolicyScope::Cluster,
            previous: p.status.as_ref(),
        };
        write_one(ctx, api, p.as_ref(), target).await;
    }
}

/// Writes policy status whenever outcomes or policies change (debounced by `debounce`) and at
/// least every `resync`.
pub async fn run_status_writer(ctx: Arc<Context>, debounce: Duration, resync: Duration) {
    loop {
        let _ = tokio::time::timeout(resync, ctx.status_changed.notified()).await;
        tokio::time::sleep(debounce).await;
        write_statuses(&ctx).await;
    }
}
