//! What the controllers last decided for each workload. Policy status and the state gauges are
//! computed from this table, and the events of a decision are posted only when they differ from
//! the ones posted last time for the same workload (a periodic requeue does not re-post them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::desired::WorkloadKind;
use crate::metrics::Metrics;
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
    /// Whether the workload is configured at all (unconfigured workloads have no compliance).
    pub configured: bool,
    pub window_open: bool,
    /// `(reason, message)` of the events posted for this decision.
    pub events: BTreeSet<(String, String)>,
}

/// The outcome table.
#[derive(Default)]
pub struct Outcomes {
    inner: Mutex<BTreeMap<WorkloadKey, Outcome>>,
}

impl Outcomes {
    /// Records `new` and returns the events in it that were not posted last time.
    pub fn record(&self, key: WorkloadKey, new: Outcome) -> BTreeSet<(String, String)> {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = match map.get(&key) {
            Some(old) => new.events.difference(&old.events).cloned().collect(),
            None => new.events.clone(),
        };
        map.insert(key, new);
        fresh
    }

    /// Marks one event of the recorded outcome as not posted (its post failed).
    pub fn forget_event(&self, key: &WorkloadKey, event: &(String, String)) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = map.get_mut(key) {
            o.events.remove(event);
        }
    }

    /// Forgets workloads that no longer exist (`alive` says which do).
    pub fn retain(&self, alive: impl Fn(&WorkloadKey) -> bool) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let before = map.len();
        map.retain(|k, _| alive(k));
        before != map.len()
    }

    pub fn get(&self, key: &WorkloadKey) -> Option<Outcome> {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).cloned()
    }

    /// Status inputs for the policy `(kind, key)`.
    pub fn policy_outcome(&self, kind: &str, key: &str) -> PolicyOutcome {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = PolicyOutcome::default();
        for (w, o) in map.iter() {
            if o.policy
                .as_ref()
                .is_some_and(|(k, p)| *k == kind && p == key)
            {
                out.applied_to_workloads
                    .push(format!("{}/{}/{}", w.namespace, w.kind, w.name));
                if let Some(pdb) = &o.pdb {
                    out.pdbs_managed.push(format!("{}/{pdb}", w.namespace));
                }
            }
        }
        out
    }

    /// Rebuilds the state gauges (managed counts, compliance, open windows) from the table.
    pub fn refresh_gauges(&self, metrics: &Metrics) {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for g in [
            &metrics.deployments_managed,
            &metrics.statefulsets_managed,
            &metrics.leaderworkersets_managed,
            &metrics.workloads_managed,
            &metrics.compliance_status,
            &metrics.maintenance_window_active,
        ] {
            g.clear();
        }
        for (w, o) in map.iter() {
            if let Some(class) = &o.managed_class {
                let family = match w.kind {
                    "Deployment" => &metrics.deployments_managed,
                    "StatefulSet" => &metrics.statefulsets_managed,
                    "LeaderWorkerSet" => &metrics.leaderworkersets_managed,
                    _ => &metrics.workloads_managed,
                };
                family
                    .get_or_create(&vec![
                        ("namespace", w.namespace.clone()),
                        ("availability_class", class.clone()),
                    ])
                    .inc();
            }
            if o.configured {
                let (value, reason) = match &o.not_compliant {
                    None => (1, "compliant".to_string()),
                    Some(r) => (0, r.clone()),
                };
                metrics
                    .compliance_status
                    .get_or_create(&vec![
                        ("namespace", w.namespace.clone()),
                        ("deployment", w.name.clone()),
                        ("kind", w.kind.to_string()),
                        ("reason", reason),
                    ])
                    .set(value);
            }
            if o.window_open {
                metrics
                    .maintenance_window_active
                    .get_or_create(&vec![
                        ("namespace", w.namespace.clone()),
                        ("deployment", w.name.clone()),
                        ("kind", w.kind.to_string()),
                    ])
                    .set(1);
            }
        }
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
        let key = WorkloadKey::new(WorkloadKind::Deployment, "ns", "a");
        let first = Outcome {
            events: [ev("BudgetClamped")].into(),
            ..Default::default()
        };
        assert_eq!(t.record(key.clone(), first.clone()).len(), 1);
        assert!(
            t.record(key.clone(), first).is_empty(),
            "same decision again"
        );
        let second = Outcome {
            events: [ev("BudgetClamped"), ev("PolicyConflict")].into(),
            ..Default::default()
        };
        assert_eq!(
            t.record(key, second),
            BTreeSet::from([ev("PolicyConflict")])
        );
    }

    #[test]
    fn policy_outcome_lists_only_workloads_it_won() {
        let t = Outcomes::default();
        let won = Outcome {
            policy: Some(("PDBPolicy", "ns/p".into())),
            pdb: Some("a-pdb".into()),
            ..Default::default()
        };
        t.record(WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"), won);
        t.record(
            WorkloadKey::new(WorkloadKind::StatefulSet, "ns", "b"),
            Outcome::default(),
        );
        let o = t.policy_outcome("PDBPolicy", "ns/p");
        assert_eq!(o.applied_to_workloads, vec!["ns/Deployment/a"]);
        assert_eq!(o.pdbs_managed, vec!["ns/a-pdb"]);
    }
}
