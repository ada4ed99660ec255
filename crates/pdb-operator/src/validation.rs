//! Controller-side re-check of a policy spec: the CRD's CEL rules (so a policy stored before the
//! CRD was upgraded is still caught) plus the checks CEL cannot do — the IANA zone, and that a
//! namespaced policy lists only its own namespace (CEL cannot see metadata.namespace). The
//! first problem becomes the `Validated=False/PolicyInvalid` condition message.
//!
//! The warnings are shown to whoever creates, changes or deletes a policy by the Warn-only
//! ValidatingAdmissionPolicy `pdb-operator-policy-warnings` in `deploy/admission-policy.yaml`,
//! which carries the same sentences (a test keeps them equal).

use crate::budget::BudgetValue;
use crate::class::AvailabilityClass;
use crate::crd::{EnforcementMode, PDBPolicySpec, SelectorOperator};
use crate::windows::Window;

/// Where a policy lives, which decides how far it reaches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyScope {
    /// A PDBPolicy; reaches only workloads in this namespace.
    Namespaced(String),
    /// A ClusterPDBPolicy; `namespaces` empty = every namespace.
    Cluster,
}

/// Result of validation: hard errors and admission-style warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyReport {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

impl PolicyReport {
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Warning on an update that changes `availabilityClass` or `enforcement`.
pub const CHANGED_CLASS_WARNING: &str = "availabilityClass or enforcement changed: every workload this policy selects gets its PDB recomputed now";

/// Warning on deleting a policy.
pub const DELETE_WARNING: &str = "deleting this policy: the workloads it selected fall back to their annotations or other policies, and their PDBs are deleted where nothing applies any more";

/// Warnings of an update from `old` to `new` (besides [`validate_policy_spec`]'s for `new`).
pub fn update_warnings(old: &PDBPolicySpec, new: &PDBPolicySpec) -> Vec<String> {
    if old.availability_class != new.availability_class || old.enforcement != new.enforcement {
        vec![CHANGED_CLASS_WARNING.to_string()]
    } else {
        Vec::new()
    }
}

/// Checks `spec` as admission would, with the reference's wording (tests match substrings).
pub fn validate_policy_spec(spec: &PDBPolicySpec, scope: &PolicyScope) -> PolicyReport {
    let mut r = PolicyReport::default();
    let sel = &spec.workload_selector;
    if sel.match_labels.is_empty()
        && sel.match_expressions.is_empty()
        && sel.workload_names.is_empty()
        && sel.workload_functions.is_empty()
    {
        r.errors.push("workloadSelector: must specify at least one selection criteria (workloadNames, workloadFunctions, matchLabels, or matchExpressions)".into());
    }
    for (i, e) in sel.match_expressions.iter().enumerate() {
        let needs_values = matches!(e.operator, SelectorOperator::In | SelectorOperator::NotIn);
        if needs_values == e.values.is_empty() {
            r.errors.push(format!(
                "workloadSelector.matchExpressions[{i}] (key {:?}, operator {:?}): values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
                e.key, e.operator
            ));
        }
    }
    match scope {
        PolicyScope::Namespaced(own) => {
            if let Some(other) = sel.namespaces.iter().find(|n| *n != own) {
                r.errors.push(format!(
                    "workloadSelector.namespaces lists {other:?}, but a PDBPolicy in {own:?} only reaches its own namespace; remove it, or use a ClusterPDBPolicy for cluster-wide defaults"
                ));
            }
        }
        PolicyScope::Cluster => {
            if sel.namespaces.is_empty() {
                r.warnings.push("workloadSelector.namespaces is empty: this ClusterPDBPolicy applies to all namespaces".into());
            }
        }
    }
    if spec.availability_class == AvailabilityClass::Custom {
        match &spec.custom_pdb_config {
            None => r
                .errors
                .push("customPDBConfig: custom availability class requires customPDBConfig".into()),
            Some(c) if c.min_available.is_none() && c.max_unavailable.is_none() => r
                .errors
                .push("customPDBConfig: must specify either minAvailable or maxUnavailable".into()),
            Some(_) => {}
        }
    }
    if let Some(c) = &spec.custom_pdb_config {
        if c.min_available.is_some() && c.max_unavailable.is_some() {
            r.errors.push(
                "customPDBConfig: cannot specify both minAvailable and maxUnavailable".into(),
            );
        }
        for (field, value) in [
            ("minAvailable", &c.min_available),
            ("maxUnavailable", &c.max_unavailable),
        ] {
            if let Some(Err(e)) = value.as_ref().map(BudgetValue::from_int_or_string) {
                r.errors.push(format!("customPDBConfig.{field}: {e}"));
            }
        }
    }
    for (i, w) in spec.maintenance_windows.iter().enumerate() {
        if let Err(e) = Window::from_policy(w) {
            r.errors.push(format!("maintenanceWindows[{i}]: {e}"));
        }
        let mut days = w.days_of_week.clone();
        days.sort_unstable();
        if days.windows(2).any(|p| p[0] == p[1]) {
            r.errors.push(format!(
                "maintenanceWindows[{i}].daysOfWeek: Duplicate value: {:?}",
                w.days_of_week
            ));
        }
    }
    if !(0..=1000).contains(&spec.priority) {
        r.errors.push(format!(
            "priority: priority must be between 0 and 1000 (got {})",
            spec.priority
        ));
    }
    match spec.enforcement {
        EnforcementMode::Flexible => match spec.minimum_class {
            None => r.warnings.push(
                "flexible enforcement without minimumClass: availabilityClass is the minimum"
                    .into(),
            ),
            Some(min) if min.rank() > spec.availability_class.rank() => r.errors.push(format!(
                "minimumClass: minimumClass cannot be higher than availabilityClass ({min} > {})",
                spec.availability_class
            )),
            Some(_) => {}
        },
        EnforcementMode::Advisory => {
            if spec.override_requires_annotation.is_some() && !spec.allow_override {
                r.errors.push("overrideRequiresAnnotation: cannot require annotation when AllowOverride is false".into());
            }
        }
        EnforcementMode::Strict => {}
    }
    if spec.enforcement != EnforcementMode::Advisory
        && (spec.override_requires_annotation.is_some() || spec.override_requires_reason)
    {
        r.errors.push(format!(
            "overrideRequiresAnnotation/overrideRequiresReason: only applicable for advisory enforcement mode (enforcement is {})",
            spec.enforcement.as_str()
        ));
    }
    if !spec.enforce_min_replicas {
        r.warnings.push("enforceMinReplicas: false is ignored; a PDB is never written for fewer than 2 replicas".into());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::PDBPolicySpec;
    use rstest::rstest;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> PDBPolicySpec {
        let mut base = json!({
            "availabilityClass": "standard",
            "workloadSelector": {"matchLabels": {"app": "a"}},
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn ns() -> PolicyScope {
        PolicyScope::Namespaced("default".into())
    }

    #[rstest]
    #[case::custom_without_config(json!({"availabilityClass": "custom"}), "custom availability class requires customPDBConfig")]
    #[case::custom_empty(json!({"availabilityClass": "custom", "customPDBConfig": {}}), "must specify either minAvailable or maxUnavailable")]
    #[case::custom_both(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": 1, "maxUnavailable": 1}}), "cannot specify both minAvailable and maxUnavailable")]
    #[case::namespaces_only(json!({"workloadSelector": {"namespaces": ["default"]}}), "must specify at least one selection criteria")]
    #[case::priority_high(json!({"priority": 1001}), "priority must be between 0 and 1000")]
    #[case::priority_negative(json!({"priority": -1}), "priority must be between 0 and 1000")]
    #[case::hour_25(json!({"maintenanceWindows": [{"start": "25:00", "end": "04:00"}]}), "must be in HH:MM format")]
    #[case::mars(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "Mars/Olympus"}]}), "invalid timezone")]
    #[case::day_7(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [7]}]}), "must be between 0 (Sunday) and 6 (Saturday)")]
    #[case::day_dup(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [1, 1]}]}), "Duplicate value")]
    #[case::min_above_class(json!({"enforcement": "flexible", "minimumClass": "mission-critical"}), "minimumClass cannot be higher than availabilityClass")]
    #[case::strict_reason(json!({"enforcement": "strict", "overrideRequiresReason": true}), "only applicable for advisory enforcement mode")]
    #[case::annotation_without_override(json!({"allowOverride": false, "overrideRequiresAnnotation": "approved-by"}), "cannot require annotation when AllowOverride is false")]
    #[case::bare_number(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "3"}}), "not a percentage")]
    #[case::over_100(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "120%"}}), "above 100%")]
    #[case::negative(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": -1}}), "negative")]
    #[case::other_namespace(json!({"workloadSelector": {"matchLabels": {"a": "b"}, "namespaces": ["staging"]}}), "only reaches its own namespace")]
    fn rejected(#[case] extra: serde_json::Value, #[case] message: &str) {
        let report = validate_policy_spec(&spec(extra), &ns());
        assert!(
            report.errors.iter().any(|e| e.contains(message)),
            "{:?}",
            report.errors
        );
    }

    #[test]
    fn defaults_and_a_valid_policy() {
        let s = spec(json!({}));
        assert_eq!(s.priority, 50);
        assert_eq!(s.enforcement, EnforcementMode::Advisory);
        assert!(s.allow_override);
        assert!(s.enforce_min_replicas);
        assert!(validate_policy_spec(&s, &ns()).is_valid());
        let explicit_zero = spec(json!({"priority": 0}));
        assert_eq!(explicit_zero.priority, 0);
        let w = spec(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00"}]}));
        assert_eq!(w.maintenance_windows[0].timezone, "UTC");
        let c =
            spec(json!({"availabilityClass": "custom", "customPDBConfig": {"maxUnavailable": 1}}));
        assert_eq!(
            c.custom_pdb_config.unwrap().unhealthy_pod_eviction_policy,
            crate::crd::UnhealthyPodEvictionPolicy::IfHealthyBudget
        );
    }

    #[test]
    fn empty_enforcement_reads_as_advisory() {
        assert_eq!(
            spec(json!({"enforcement": ""})).enforcement,
            EnforcementMode::Advisory
        );
    }

    #[test]
    fn changing_class_or_enforcement_warns() {
        let old = spec(json!({}));
        assert!(update_warnings(&old, &spec(json!({"priority": 60}))).is_empty());
        for changed in [
            json!({"availabilityClass": "mission-critical"}),
            json!({"enforcement": "strict"}),
        ] {
            assert_eq!(
                update_warnings(&old, &spec(changed)),
                [CHANGED_CLASS_WARNING]
            );
        }
    }

    #[test]
    fn cluster_policy_without_namespaces_warns() {
        let r = validate_policy_spec(&spec(json!({})), &PolicyScope::Cluster);
        assert!(r.is_valid());
        assert!(r.warnings.iter().any(|w| w.contains("all namespaces")));
    }
}
