//! What the controllers last decided for each workload. Policy status and the state gauges are
//! computed from this table, and the events of a decision are posted only when they differ from
//! the ones posted last time for the same workload (a periodic requeue does not re-post them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::desired::WorkloadKind;
use crate::metrics::{Gauges, Labels, Metrics};
use crate::status::PolicyOutcome;

/// Key of one workload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl WorkloadKey {
    pub fn new(kind: WorkloadKind, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.kind(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// The last decision for one workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Effective availability class while a managed PDB exists.
    pub managed_class: Option<String>,
    /// `(kind, key)` of the policy that won resolution, if any.
    pub policy: Option<(&'static str, String)>,
    /// Name of the PDB written for the workload.
    pub pdb: Option<String>,
    /// Compliance: `None` = compliant (PDB in place); `Some(reason)` otherwise.
    pub not_compliant: Option<String>,
    /// The PDB in force over the workload's pods when it is not the workload's own: the one it
    /// yields to (reason `pdb_conflict`). Counted as protecting it, in the compliance gauge
    /// (1 with that reason) and in the policy's PDBConflict condition.
    pub covered_by: Option<String>,
    /// Whether the workload is configured at all (unconfigured workloads have no compliance).
    pub configured: bool,
    pub window_open: bool,
    /// `(reason, message)` of the events posted for this decision.
    pub events: BTreeSet<(String, String)>,
}

/// The outcome table.
#[derive(Default)]
pub struct Outcomes {
    inner: Mutex<Table>,
}

/// The outcomes, and when each was recorded (a count of records, see [`Outcomes::mark`]).
#[derive(Default)]
struct Table {
    map: BTreeMap<WorkloadKey, Outcome>,
    recorded: BTreeMap<WorkloadKey, u64>,
    records: u64,
}

/// A point in the table's history, taken by [`Outcomes::mark`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark(u64);

impl Outcomes {
    /// Records `new`, moves the state gauges of this one workload to it, and returns the events
    /// in it that were not posted last time.
    ///
    /// The gauges change by the difference between the old and the new outcome, under the
    /// table's lock: rebuilding them from the whole table on every reconcile was the largest
    /// CPU cost of a 1,000-Deployment burst (bench `operator_scale`), O(n) per reconcile.
    pub fn record(
        &self,
        key: WorkloadKey,
        new: Outcome,
        metrics: &Metrics,
    ) -> BTreeSet<(String, String)> {
        let mut table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let old = table.map.get(&key);
        let fresh = match old {
            Some(old) => new.events.difference(&old.events).cloned().collect(),
            None => new.events.clone(),
        };
        move_gauges(metrics, &key, old, Some(&new));
        table.records += 1;
        let at = table.records;
        table.recorded.insert(key.clone(), at);
        table.map.insert(key, new);
        fresh
    }

    /// The table's present point: an outcome recorded after it is newer than anything looked
    /// up since (see [`Outcomes::retain`]).
    pub fn mark(&self) -> Mark {
        Mark(self.inner.lock().unwrap_or_else(|e| e.into_inner()).records)
    }

    /// Marks one event of the recorded outcome as not posted (its post failed).
    pub fn forget_event(&self, key: &WorkloadKey, event: &(String, String)) {
        let mut table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = table.map.get_mut(key) {
            o.events.remove(event);
        }
    }

    /// Forgets workloads that no longer exist (`alive` says which do, from a list taken after
    /// `since`) and takes them out of the state gauges. An outcome recorded after `since` is
    /// kept whatever `alive` says: its workload may have been created after the list was
    /// taken (this forgot 5 of 1,000 Deployments created at 20 a second, whose gauge then stayed
    /// low until their next change). Returns whether any was forgotten.
    pub fn retain(
        &self,
        since: Mark,
        alive: impl Fn(&WorkloadKey) -> bool,
        metrics: &Metrics,
    ) -> bool {
        let mut table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Table { map, recorded, .. } = &mut *table;
        let before = map.len();
        map.retain(|k, o| {
            let keep = recorded.get(k).is_some_and(|at| Mark(*at) > since) || alive(k);
            if !keep {
                move_gauges(metrics, k, Some(o), None);
            }
            keep
        });
        recorded.retain(|k, _| map.contains_key(k));
        before != map.len()
    }

    pub fn get(&self, key: &WorkloadKey) -> Option<Outcome> {
        let table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        table.map.get(key).cloned()
    }

    /// Status inputs for the policy `(kind, key)`.
    pub fn policy_outcome(&self, kind: &str, key: &str) -> PolicyOutcome {
        let table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = PolicyOutcome::default();
        for (w, o) in table.map.iter() {
            if o.policy
                .as_ref()
                .is_some_and(|(k, p)| *k == kind && p == key)
            {
                out.applied_to_workloads
                    .push(format!("{}/{}/{}", w.namespace, w.kind, w.name));
                if let Some(pdb) = &o.pdb {
                    out.pdbs_managed.push(format!("{}/{pdb}", w.namespace));
                }
                if o.not_compliant.as_deref() == Some("pdb_conflict") {
                    let to = match &o.covered_by {
                        Some(pdb) => format!("to {}/{pdb}", w.namespace),
                        None => "its PDB's name is taken".into(),
                    };
                    out.yielding
                        .push(format!("{}/{}/{} ({to})", w.namespace, w.kind, w.name));
                }
            }
        }
        out
    }

    /// Sets the state gauges (managed counts, compliance, open windows) of a fresh `metrics`
    /// from the whole table, with the same series as [`move_gauges`] writes.
    /// [`Outcomes::record`] and [`Outcomes::retain`] keep them current one workload at a time;
    /// this is the reference they are tested against.
    #[cfg(test)]
    fn rebuild_gauges(&self, metrics: &Metrics) {
        let table = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (w, o) in table.map.iter() {
            if let Some(class) = &o.managed_class {
                managed_family(metrics, w.kind)
                    .get_or_create(&managed_labels(w, class.clone()))
                    .inc();
            }
            if let Some((labels, value)) = compliance_labels(w, o) {
                metrics.compliance_status.get_or_create(&labels).set(value);
            }
            if let Some(labels) = window_labels(w, o) {
                metrics
                    .maintenance_window_active
                    .get_or_create(&labels)
                    .set(1);
            }
        }
    }
}

fn managed_family<'a>(metrics: &'a Metrics, kind: &str) -> &'a Gauges {
    match kind {
        "Deployment" => &metrics.deployments_managed,
        "StatefulSet" => &metrics.statefulsets_managed,
        "LeaderWorkerSet" => &metrics.leaderworkersets_managed,
        _ => &metrics.workloads_managed,
    }
}

fn managed_labels(w: &WorkloadKey, class: String) -> Labels {
    vec![
        ("namespace", w.namespace.clone()),
        ("availability_class", class),
    ]
}

fn compliance_labels(w: &WorkloadKey, o: &Outcome) -> Option<(Labels, i64)> {
    if !o.configured {
        return None;
    }
    let (value, reason) = match &o.not_compliant {
        None => (1, "compliant".to_string()),
        // Protected all the same, by the PDB it yields to.
        Some(r) if o.covered_by.is_some() => (1, r.clone()),
        Some(r) => (0, r.clone()),
    };
    let labels = vec![
        ("namespace", w.namespace.clone()),
        ("deployment", w.name.clone()),
        ("kind", w.kind.to_string()),
        ("reason", reason),
    ];
    Some((labels, value))
}

fn window_labels(w: &WorkloadKey, o: &Outcome) -> Option<Labels> {
    o.window_open.then(|| {
        vec![
            ("namespace", w.namespace.clone()),
            ("deployment", w.name.clone()),
            ("kind", w.kind.to_string()),
        ]
    })
}

/// Moves the state gauges of workload `w` from `old` to `new` (`None`: not in the table). A
/// managed count that drops to zero loses its series, as a rebuild from the table would.
/// Callers hold the outcome table's lock, so two workloads never race on one series.
fn move_gauges(metrics: &Metrics, w: &WorkloadKey, old: Option<&Outcome>, new: Option<&Outcome>) {
    let family = managed_family(metrics, w.kind);
    let class_of = |o: Option<&Outcome>| o.and_then(|o| o.managed_class.clone());
    let (was, is) = (class_of(old), class_of(new));
    if was != is {
        if let Some(class) = was {
            let labels = managed_labels(w, class);
            if family.get_or_create(&labels).dec() <= 1 {
                family.remove(&labels);
            }
        }
        if let Some(class) = is {
            family.get_or_create(&managed_labels(w, class)).inc();
        }
    }
    let was = old.and_then(|o| compliance_labels(w, o));
    let is = new.and_then(|o| compliance_labels(w, o));
    if let Some((labels, _)) = &was
        && is.as_ref().is_none_or(|(l, _)| l != labels)
    {
        metrics.compliance_status.remove(labels);
    }
    if let Some((labels, value)) = is {
        metrics.compliance_status.get_or_create(&labels).set(value);
    }
    let was = old.and_then(|o| window_labels(w, o));
    let is = new.and_then(|o| window_labels(w, o));
    if let Some(labels) = &was
        && is.as_ref() != Some(labels)
    {
        metrics.maintenance_window_active.remove(labels);
    }
    if let Some(labels) = is {
        metrics
            .maintenance_window_active
            .get_or_create(&labels)
            .set(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(r: &str) -> (String, String) {
        (r.to_string(), format!("{r} message"))
    }

    #[test]
    fn only_new_events_are_returned() {
        let t = Outcomes::default();
        let m = Metrics::new();
        let key = WorkloadKey::new(WorkloadKind::Deployment, "ns", "a");
        let first = Outcome {
            events: [ev("BudgetClamped")].into(),
            ..Default::default()
        };
        assert_eq!(t.record(key.clone(), first.clone(), &m).len(), 1);
        assert!(
            t.record(key.clone(), first, &m).is_empty(),
            "same decision again"
        );
        let second = Outcome {
            events: [ev("BudgetClamped"), ev("PolicyConflict")].into(),
            ..Default::default()
        };
        assert_eq!(
            t.record(key, second, &m),
            BTreeSet::from([ev("PolicyConflict")])
        );
    }

    #[test]
    fn policy_outcome_lists_only_workloads_it_won() {
        let t = Outcomes::default();
        let m = Metrics::new();
        let won = Outcome {
            policy: Some(("PDBPolicy", "ns/p".into())),
            pdb: Some("a-pdb".into()),
            ..Default::default()
        };
        t.record(
            WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"),
            won,
            &m,
        );
        t.record(
            WorkloadKey::new(WorkloadKind::StatefulSet, "ns", "b"),
            Outcome::default(),
            &m,
        );
        let o = t.policy_outcome("PDBPolicy", "ns/p");
        assert_eq!(o.applied_to_workloads, vec!["ns/Deployment/a"]);
        assert_eq!(o.pdbs_managed, vec!["ns/a-pdb"]);
    }

    #[test]
    fn an_outcome_recorded_after_the_list_survives_a_sweep_that_did_not_see_it() {
        let t = Outcomes::default();
        let m = Metrics::new();
        let key = |n: &str| WorkloadKey::new(WorkloadKind::Deployment, "ns", n);
        t.record(key("gone"), Outcome::default(), &m);
        let listed = t.mark();
        // Created (and reconciled) after the sweep's list was taken.
        t.record(key("new"), Outcome::default(), &m);
        assert!(t.retain(listed, |_| false, &m));
        assert!(t.get(&key("new")).is_some(), "newer than the list");
        assert!(t.get(&key("gone")).is_none());
        assert!(!t.retain(t.mark(), |k| k.name == "new", &m));
        assert!(
            t.retain(t.mark(), |_| false, &m),
            "a later sweep forgets it"
        );
    }

    /// Every series of the state gauges, as `/metrics` prints them.
    fn state_gauges(m: &Metrics) -> Vec<String> {
        let families = [
            "deployments_managed",
            "statefulsets_managed",
            "leaderworkersets_managed",
            "workloads_managed",
            "compliance_status",
            "maintenance_window_active",
        ];
        let mut lines: Vec<String> = m
            .render()
            .lines()
            .filter(|l| !l.starts_with('#') && families.iter().any(|f| l.contains(f)))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn gauges_moved_one_workload_at_a_time_equal_a_rebuild_from_the_table() {
        let incremental = Metrics::new();
        let t = Outcomes::default();
        let managed = |class: &str| Outcome {
            managed_class: Some(class.into()),
            pdb: Some("x-pdb".into()),
            configured: true,
            ..Default::default()
        };
        let not_compliant = |why: &str, window: bool| Outcome {
            configured: true,
            not_compliant: Some(why.into()),
            window_open: window,
            ..Default::default()
        };
        let d = |n: &str| WorkloadKey::new(WorkloadKind::Deployment, "ns", n);
        let s = |n: &str| WorkloadKey::new(WorkloadKind::StatefulSet, "other", n);
        let steps: Vec<(WorkloadKey, Outcome)> = vec![
            (d("a"), managed("standard")),
            (d("b"), managed("standard")),
            (s("c"), managed("high-availability")),
            (d("a"), managed("standard")),
            (d("b"), managed("mission-critical")),
            (d("a"), not_compliant("maintenance_window", true)),
            (s("c"), Outcome::default()),
            (d("e"), not_compliant("pdb_conflict", false)),
            (d("a"), managed("standard")),
            (d("e"), managed("standard")),
        ];
        for (i, (key, outcome)) in steps.into_iter().enumerate() {
            t.record(key, outcome, &incremental);
            let rebuilt = Metrics::new();
            t.rebuild_gauges(&rebuilt);
            assert_eq!(
                state_gauges(&incremental),
                state_gauges(&rebuilt),
                "after step {i}"
            );
        }
        assert!(
            state_gauges(&incremental)
                .iter()
                .any(|l| l.contains("deployments_managed") && l.ends_with(" 2")),
            "two Deployments share the standard class: {:?}",
            state_gauges(&incremental)
        );
        let now = t.mark();
        t.retain(now, |k| k.name != "a", &incremental);
        let rebuilt = Metrics::new();
        t.rebuild_gauges(&rebuilt);
        assert_eq!(
            state_gauges(&incremental),
            state_gauges(&rebuilt),
            "after retain"
        );
        assert!(
            !state_gauges(&incremental)
                .iter()
                .any(|l| l.contains("deployment=\"a\"")),
            "a forgotten workload leaves no series"
        );
    }
}
