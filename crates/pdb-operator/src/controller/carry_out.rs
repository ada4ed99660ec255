//! Carrying out a [`Decision`] for one workload: the conflict checks, server-side apply or
//! deletion of the PDB it owns, events, metrics and the outcome table. Shared by every kind.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;

use super::outcomes::{Outcome, WorkloadKey};
use super::pdb_cache::namespace_pdbs;
use super::retry::with_retries;
use super::{Context, Error};
use crate::desired::{Decision, DesiredPdb, NoPdb, RETRY_AFTER, WorkloadKind};
use crate::enforcement::{EffectiveConfig, EventNote};
use crate::names::{keys, reasons};
use crate::pdb::{find_pdb_conflict, is_owned_by, pdb_name, rfc3339};

/// The workload a decision is about.
pub struct Subject {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reference: ObjectReference,
    /// Labels of the workload's pods (template labels, or every gang member's labels).
    pub pod_labels: Vec<BTreeMap<String, String>>,
}

impl Subject {
    fn key(&self) -> WorkloadKey {
        WorkloadKey::new(self.kind, &self.namespace, &self.name)
    }
}

/// Carries out `decision`; returns when to look again.
pub async fn carry_out(ctx: &Context, s: &Subject, decision: Decision) -> Result<Action, Error> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &s.namespace);
    let name = pdb_name(&s.name);
    let existing = namespace_pdbs(
        ctx.pdbs.as_deref(),
        &ctx.recent_writes,
        &api,
        &s.namespace,
        &name,
        &s.pod_labels,
    )
    .await?;
    let owned = existing
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name.as_str()) && is_owned_by(p, &s.uid))
        .cloned();
    match decision {
        Decision::Apply(want) => apply(ctx, s, &api, &existing, owned, *want).await,
        Decision::NoPdb(none) => remove(ctx, s, &api, owned, none).await,
    }
}

fn note_set(notes: &[EventNote]) -> BTreeSet<(String, String)> {
    notes
        .iter()
        .map(|n| (n.reason.to_string(), n.message.clone()))
        .collect()
}

/// Posts the notes that were not posted for the previous decision and records `outcome`.
/// Returns false when a post failed (the caller retries in 30 s).
async fn record_and_publish(
    ctx: &Context,
    s: &Subject,
    notes: &[EventNote],
    mut outcome: Outcome,
) -> bool {
    outcome.events = note_set(notes);
    let fresh = ctx.outcomes.record(s.key(), outcome, &ctx.metrics);
    let mut all_posted = true;
    for n in notes {
        let id = (n.reason.to_string(), n.message.clone());
        // A note that could not be posted is forgotten, so the next reconcile posts it again.
        if fresh.contains(&id) && !ctx.publish(&s.reference, n).await {
            ctx.outcomes.forget_event(&s.key(), &id);
            all_posted = false;
        }
    }
    ctx.status_changed.notify_one();
    all_posted
}

/// `planned`, or the 30 s retry when an event could not be posted.
fn or_retry(all_posted: bool, planned: Action) -> Action {
    if all_posted {
        planned
    } else {
        Action::requeue(RETRY_AFTER)
    }
}

fn count_resolution(ctx: &Context, ns: &str, c: &EffectiveConfig) {
    let m = &ctx.metrics;
    if let Some(p) = &c.policy {
        let mode = p.enforcement.as_str().to_string();
        m.policy_evaluations
            .get_or_create(&vec![
                ("enforcement_mode", mode.clone()),
                ("namespace", ns.into()),
            ])
            .inc();
        m.enforcement_decisions
            .get_or_create(&vec![
                ("enforcement_mode", mode.clone()),
                ("decision", c.source.as_str().to_string()),
                ("namespace", ns.into()),
            ])
            .inc();
        if let Some(o) = c.override_outcome
            && o.result != "accepted"
        {
            m.policy_conflicts
                .get_or_create(&vec![
                    ("resolution", o.reason.to_string()),
                    ("enforcement_mode", mode),
                    ("namespace", ns.into()),
                ])
                .inc();
        }
    }
    if let Some(o) = c.override_outcome {
        m.override_attempts
            .get_or_create(&vec![
                ("result", o.result.to_string()),
                ("reason", o.reason.to_string()),
                ("namespace", ns.into()),
            ])
            .inc();
    }
    if c.matched_policies > 1 {
        m.multi_policy_matches
            .get_or_create(&vec![
                ("namespace", ns.into()),
                ("policy_count", c.matched_policies.to_string()),
            ])
            .inc();
    }
    if c.tie_broken {
        m.policy_tie_breaks
            .get_or_create(&vec![
                ("namespace", ns.into()),
                ("resolution_method", "alphabetical".into()),
            ])
            .inc();
    }
}

fn budget_text(p: &PodDisruptionBudget) -> String {
    let spec = p.spec.clone().unwrap_or_default();
    let show = |v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match v {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    };
    match (&spec.min_available, &spec.max_unavailable) {
        (Some(v), _) => format!("minAvailable: {}", show(v)),
        (None, Some(v)) => format!("maxUnavailable: {}", show(v)),
        _ => "no budget".into(),
    }
}

/// Whether the live PDB already carries everything `want` asks for.
fn up_to_date(live: &PodDisruptionBudget, want: &PodDisruptionBudget) -> bool {
    let subset = |w: &Option<BTreeMap<String, String>>, l: &Option<BTreeMap<String, String>>| {
        let l = l.clone().unwrap_or_default();
        w.iter().flatten().all(|(k, v)| l.get(k) == Some(v))
    };
    let live_ann = live.metadata.annotations.clone().unwrap_or_default();
    let want_ann = want.metadata.annotations.clone().unwrap_or_default();
    // Annotations we write only sometimes must also be gone when not wanted.
    let optional = [
        keys::MAINTENANCE_MODE,
        keys::MAINTENANCE_START,
        keys::POLICY_SOURCE,
        keys::ENFORCEMENT_MODE,
    ];
    let stale = optional
        .iter()
        .any(|k| live_ann.contains_key(*k) && !want_ann.contains_key(*k));
    let ws = want.spec.clone().unwrap_or_default();
    let ls = live.spec.clone().unwrap_or_default();
    !stale
        && ws.min_available == ls.min_available
        && ws.max_unavailable == ls.max_unavailable
        && ws.selector == ls.selector
        && ws.unhealthy_pod_eviction_policy == ls.unhealthy_pod_eviction_policy
        && subset(&want.metadata.labels, &live.metadata.labels)
        && subset(&want.metadata.annotations, &live.metadata.annotations)
        && live.metadata.owner_references == want.metadata.owner_references
}

async fn apply(
    ctx: &Context,
    s: &Subject,
    api: &Api<PodDisruptionBudget>,
    existing: &[PodDisruptionBudget],
    owned: Option<PodDisruptionBudget>,
    want: DesiredPdb,
) -> Result<Action, Error> {
    let name = pdb_name(&s.name);
    count_resolution(ctx, &s.namespace, &want.config);
    let class = want.config.class.as_str().to_string();
    let policy = want.config.policy.as_ref().map(|p| (p.kind, p.key.clone()));
    let mut notes = want.events.clone();
    let base = Outcome {
        policy: policy.clone(),
        configured: true,
        ..Outcome::default()
    };
    if let Some(conflict) = find_pdb_conflict(&s.uid, &name, &s.pod_labels, existing) {
        // Yield at once: while both exist every eviction of the shared pods fails.
        if let Some(live) = owned {
            delete_owned(ctx, s, api, live, "pdb_conflict").await?;
        }
        notes.push(conflict.note);
        let outcome = Outcome {
            not_compliant: Some("pdb_conflict".into()),
            covered_by: conflict.in_force,
            ..base
        };
        record_and_publish(ctx, s, &notes, outcome).await;
        return Ok(Action::requeue(RETRY_AFTER));
    }
    if want.only_if_exists && owned.is_none() {
        let outcome = Outcome {
            not_compliant: Some("maintenance_window".into()),
            window_open: true,
            ..base
        };
        let posted = record_and_publish(ctx, s, &notes, outcome).await;
        return Ok(or_retry(posted, Action::requeue(want.requeue_after)));
    }
    let mut pdb = want.pdb.clone();
    let now = jiff::Timestamp::now();
    let created_at = owned
        .as_ref()
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(keys::CREATION_TIME).cloned())
        .unwrap_or_else(|| rfc3339(now));
    let annotations = pdb.metadata.annotations.get_or_insert_default();
    annotations.insert(keys::CREATION_TIME.into(), created_at);
    let changed = match &owned {
        None => true,
        Some(live) => !up_to_date(live, &pdb),
    };
    if changed {
        if owned.is_some() {
            let ann = pdb.metadata.annotations.get_or_insert_default();
            ann.insert(keys::LAST_MODIFIED.into(), rfc3339(now));
        }
        // A create is not forced: a PDB of that name someone else made a moment ago (not in
        // the cache yet) makes it fail with a conflict instead of being taken over. The next
        // look, once the cache has it, reports the conflict.
        let params = match owned {
            Some(_) => PatchParams::apply(keys::OPERATOR_NAME).force(),
            None => PatchParams::apply(keys::OPERATOR_NAME),
        };
        let patch = Patch::Apply(&pdb);
        let apply = || api.patch(&name, &params, &patch);
        let written = match with_retries(&ctx.metrics, "apply_pdb", apply).await {
            Ok(w) => w,
            Err(kube::Error::Api(st)) if owned.is_none() && st.code == 409 => {
                tracing::info!(namespace = %s.namespace, pdb = %name,
                    "PodDisruptionBudget appeared before it was created; looking again in 1s");
                return Ok(Action::requeue(std::time::Duration::from_secs(1)));
            }
            Err(e) => {
                let reason = if owned.is_some() {
                    reasons::PDB_UPDATE_FAILED
                } else {
                    reasons::PDB_CREATION_FAILED
                };
                let note = EventNote::warning(
                    reason,
                    format!("Writing PodDisruptionBudget {name} failed: {e}; retrying in 30s"),
                );
                ctx.publish(&s.reference, &note).await;
                return Err(e.into());
            }
        };
        ctx.recent_writes.remember(&written);
        let labels = vec![
            ("namespace", s.namespace.clone()),
            ("availability_class", class.clone()),
        ];
        match &owned {
            None => {
                let mut l = labels;
                l.push(("workload_function", want.config.function.as_str().into()));
                ctx.metrics.pdbs_created.get_or_create(&l).inc();
                let msg = format!(
                    "Created PodDisruptionBudget {name} for {} {} (class: {class}, {})",
                    s.kind.kind(),
                    s.name,
                    budget_text(&pdb)
                );
                ctx.announce(&s.reference, EventNote::normal(reasons::PDB_CREATED, msg));
            }
            Some(live) => {
                ctx.metrics.pdbs_updated.get_or_create(&labels).inc();
                let msg = format!(
                    "Updated PodDisruptionBudget {name} ({} -> {})",
                    budget_text(live),
                    budget_text(&pdb)
                );
                ctx.announce(&s.reference, EventNote::normal(reasons::PDB_UPDATED, msg));
            }
        }
        if let Some(n) = want.window_transition_event(owned.as_ref()) {
            ctx.announce(&s.reference, n);
        }
        tracing::info!(kind = s.kind.kind(), namespace = %s.namespace, workload = %s.name,
            pdb = %name, budget = %budget_text(&pdb), "PodDisruptionBudget applied");
    }
    let outcome = Outcome {
        managed_class: Some(class),
        pdb: Some(name),
        window_open: want.window.open,
        ..base
    };
    let posted = record_and_publish(ctx, s, &notes, outcome).await;
    Ok(or_retry(posted, Action::requeue(want.requeue_after)))
}

/// Logs why a workload gets no PDB (note §11.2: every skip is also logged), once per change of
/// the reason: a periodic look that finds the same reason logs at debug level only.
fn log_skip(ctx: &Context, s: &Subject, none: &NoPdb) {
    let previous = ctx.outcomes.get(&s.key());
    let same = previous.is_some_and(|o| {
        o.not_compliant.as_deref() == Some(none.cause)
            && none.event.as_ref().is_none_or(|e| {
                o.events
                    .contains(&(e.reason.to_string(), e.message.clone()))
            })
    });
    let (reason, note) = none
        .event
        .as_ref()
        .map_or(("-", "-"), |e| (e.reason, e.message.as_str()));
    if same {
        tracing::debug!(kind = s.kind.kind(), namespace = %s.namespace, workload = %s.name,
            cause = none.cause, reason, note, "no PodDisruptionBudget (unchanged)");
    } else {
        tracing::info!(kind = s.kind.kind(), namespace = %s.namespace, workload = %s.name,
            cause = none.cause, reason, note, "no PodDisruptionBudget");
    }
}

async fn remove(
    ctx: &Context,
    s: &Subject,
    api: &Api<PodDisruptionBudget>,
    owned: Option<PodDisruptionBudget>,
    none: NoPdb,
) -> Result<Action, Error> {
    log_skip(ctx, s, &none);
    let mut notes: Vec<EventNote> = none.event.iter().cloned().collect();
    notes.extend(none.events.iter().cloned());
    if none.delete_owned_pdb
        && let Some(live) = owned
    {
        delete_owned(ctx, s, api, live, none.cause).await?;
    }
    let configured = none.cause != "unmanaged" && none.cause != "workload_deleted";
    let outcome = Outcome {
        configured,
        not_compliant: Some(none.cause.to_string()),
        ..Outcome::default()
    };
    let posted = record_and_publish(ctx, s, &notes, outcome).await;
    let planned = match none.retry_after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    };
    Ok(or_retry(posted, planned))
}

/// Deletes the workload's own PDB `live` (only that object: the uid is a precondition) for
/// `cause` and says so.
async fn delete_owned(
    ctx: &Context,
    s: &Subject,
    api: &Api<PodDisruptionBudget>,
    live: PodDisruptionBudget,
    cause: &str,
) -> Result<(), Error> {
    let name = pdb_name(&s.name);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match with_retries(&ctx.metrics, "delete_pdb", || api.delete(&name, &dp)).await {
        Ok(_) => {
            ctx.recent_writes.forget(&s.namespace, &name);
            ctx.metrics
                .pdbs_deleted
                .get_or_create(&vec![
                    ("namespace", s.namespace.clone()),
                    ("reason", cause.to_string()),
                ])
                .inc();
            let msg = format!(
                "Deleted PodDisruptionBudget {name} of {} {} ({})",
                s.kind.kind(),
                s.name,
                cause
            );
            ctx.announce(&s.reference, EventNote::normal(reasons::PDB_DELETED, msg));
        }
        Err(kube::Error::Api(st)) if st.code == 404 => {}
        Err(e) => {
            let note = EventNote::warning(
                reasons::PDB_DELETION_FAILED,
                format!("Deleting PodDisruptionBudget {name} failed: {e}; retrying in 30s"),
            );
            ctx.publish(&s.reference, &note).await;
            return Err(e.into());
        }
    }
    Ok(())
}
