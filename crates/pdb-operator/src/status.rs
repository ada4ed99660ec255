//! PDBPolicy / ClusterPDBPolicy status as a pure function of what the controllers decided, so the
//! status writer only server-side-applies the result (note §2.3): conditions set-or-replaced by
//! type, never duplicated; transition times kept while a condition's status is unchanged.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::PDBPolicyStatus;
use crate::validation::PolicyReport;

pub const READY: &str = "Ready";
pub const VALIDATED: &str = "Validated";
/// True while a workload this policy won has no PDB because another PDB selects its pods.
pub const PDB_CONFLICT: &str = "PDBConflict";

/// Inputs for one status computation.
#[derive(Clone, Debug, Default)]
pub struct PolicyOutcome {
    /// `namespace/Kind/name` of workloads for which this policy won resolution.
    pub applied_to_workloads: Vec<String>,
    /// `namespace/pdb-name` of PDBs written under this policy.
    pub pdbs_managed: Vec<String>,
    /// `namespace/Kind/name` of workloads among `applied_to_workloads` that have no PDB of their
    /// own because another PDB selects their pods (they yield to it).
    pub yielding: Vec<String>,
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    previous: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The status to apply for a policy with `report`, `outcome` and metadata.generation `generation`.
pub fn policy_status(
    report: &PolicyReport,
    outcome: &PolicyOutcome,
    generation: Option<i64>,
    now: Timestamp,
    previous: Option<&PDBPolicyStatus>,
) -> PDBPolicyStatus {
    let prev = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut applied = outcome.applied_to_workloads.clone();
    applied.sort();
    applied.dedup();
    let mut pdbs = outcome.pdbs_managed.clone();
    pdbs.sort();
    pdbs.dedup();
    let validated = match report.errors.first() {
        None => condition(
            VALIDATED,
            true,
            "PolicyValid",
            "Policy is valid".into(),
            generation,
            now,
            prev,
        ),
        Some(e) => condition(
            VALIDATED,
            false,
            "PolicyInvalid",
            e.clone(),
            generation,
            now,
            prev,
        ),
    };
    let n = if report.is_valid() { applied.len() } else { 0 };
    let ready = if n > 0 {
        condition(
            READY,
            true,
            "ComponentsMatched",
            format!("Policy is applied to {n} workloads"),
            generation,
            now,
            prev,
        )
    } else {
        condition(
            READY,
            false,
            "NoComponentsMatched",
            "Policy matches no workload".into(),
            generation,
            now,
            prev,
        )
    };
    let mut yielding = outcome.yielding.clone();
    yielding.sort();
    yielding.dedup();
    if !report.is_valid() {
        applied.clear();
        pdbs.clear();
        yielding.clear();
    }
    let conflict = if yielding.is_empty() {
        condition(
            PDB_CONFLICT,
            false,
            "NoConflict",
            "No other PodDisruptionBudget selects the pods of these workloads".into(),
            generation,
            now,
            prev,
        )
    } else {
        let shown: Vec<&str> = yielding.iter().take(10).map(String::as_str).collect();
        let more = yielding.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        condition(
            PDB_CONFLICT,
            true,
            "YieldsToAnotherPDB",
            format!(
                "{} workload(s) have no PDB of their own because another PodDisruptionBudget selects their pods (two over one pod make every eviction fail; see their PDBConflict events): {}{more}",
                yielding.len(),
                shown.join(", ")
            ),
            generation,
            now,
            prev,
        )
    };
    PDBPolicyStatus {
        conditions: vec![ready, validated, conflict],
        workload_count: applied.len() as i32,
        applied_to_workloads: applied,
        pdbs_managed: pdbs,
        last_applied_time: Some(Time(now)),
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn matched_policy_is_ready_and_counts_workloads() {
        let outcome = PolicyOutcome {
            applied_to_workloads: vec![
                "default/Deployment/web".into(),
                "default/Deployment/web".into(),
            ],
            pdbs_managed: vec!["default/web-pdb".into()],
            ..PolicyOutcome::default()
        };
        let s = policy_status(
            &PolicyReport::default(),
            &outcome,
            Some(3),
            t("2026-06-24T12:00:00Z"),
            None,
        );
        assert_eq!(s.workload_count, 1);
        assert_eq!(s.pdbs_managed, vec!["default/web-pdb"]);
        assert_eq!(s.observed_generation, Some(3));
        let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "ComponentsMatched")
        );
        assert_eq!(ready.message, "Policy is applied to 1 workloads");
    }

    #[test]
    fn invalid_policy_has_exactly_one_validated_condition() {
        let report = PolicyReport {
            errors: vec!["priority must be between 0 and 1000".into()],
            warnings: vec![],
        };
        let s = policy_status(
            &report,
            &PolicyOutcome::default(),
            Some(1),
            t("2026-06-24T12:00:00Z"),
            None,
        );
        let again = policy_status(
            &report,
            &PolicyOutcome::default(),
            Some(1),
            t("2026-06-24T12:05:00Z"),
            Some(&s),
        );
        let validated: Vec<_> = again
            .conditions
            .iter()
            .filter(|c| c.type_ == VALIDATED)
            .collect();
        assert_eq!(validated.len(), 1);
        assert_eq!(
            (validated[0].status.as_str(), validated[0].reason.as_str()),
            ("False", "PolicyInvalid")
        );
        assert_eq!(
            validated[0].last_transition_time,
            Time(t("2026-06-24T12:00:00Z")),
            "unchanged status keeps its time"
        );
    }

    #[test]
    fn a_workload_that_yields_to_another_pdb_is_named_in_a_condition() {
        let condition_of = |yielding: Vec<String>| {
            let outcome = PolicyOutcome {
                applied_to_workloads: vec!["ns/Deployment/a".into()],
                yielding,
                ..PolicyOutcome::default()
            };
            let s = policy_status(
                &PolicyReport::default(),
                &outcome,
                None,
                t("2026-06-24T12:00:00Z"),
                None,
            );
            s.conditions
                .into_iter()
                .find(|c| c.type_ == PDB_CONFLICT)
                .unwrap()
        };
        let c = condition_of(vec!["ns/Deployment/a".into()]);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "YieldsToAnotherPDB")
        );
        assert!(
            c.message.contains("1 workload(s)") && c.message.ends_with("ns/Deployment/a"),
            "{}",
            c.message
        );
        let c = condition_of(vec![]);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NoConflict")
        );
    }

    #[test]
    fn no_match_is_not_ready() {
        let s = policy_status(
            &PolicyReport::default(),
            &PolicyOutcome::default(),
            None,
            t("2026-06-24T12:00:00Z"),
            None,
        );
        let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NoComponentsMatched")
        );
        assert_eq!(s.workload_count, 0);
    }
}
