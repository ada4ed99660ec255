//! Every `pdboperator.io/*` key, event reason and metric name in one place, so the controller,
//! the docs and the dashboards cannot drift apart.

/// Annotation and label keys read from workloads and written on managed PDBs (note §7).
pub mod keys {
    pub const AVAILABILITY_CLASS: &str = "pdboperator.io/availability-class";
    pub const WORKLOAD_FUNCTION: &str = "pdboperator.io/workload-function";
    pub const WORKLOAD_NAME: &str = "pdboperator.io/workload-name";
    pub const MAINTENANCE_WINDOW: &str = "pdboperator.io/maintenance-window";
    pub const OVERRIDE_REASON: &str = "pdboperator.io/override-reason";
    pub const MANAGED_BY: &str = "pdboperator.io/managed-by";
    pub const WORKLOAD: &str = "pdboperator.io/workload";
    pub const CREATED_BY: &str = "pdboperator.io/created-by";
    pub const CREATION_TIME: &str = "pdboperator.io/creation-time";
    pub const DESCRIPTION: &str = "pdboperator.io/description";
    pub const POLICY_SOURCE: &str = "pdboperator.io/policy-source";
    pub const ENFORCEMENT_MODE: &str = "pdboperator.io/enforcement-mode";
    pub const LAST_MODIFIED: &str = "pdboperator.io/last-modified";
    pub const MAINTENANCE_MODE: &str = "pdboperator.io/maintenance-mode";
    pub const MAINTENANCE_START: &str = "pdboperator.io/maintenance-start";
    /// On a Workload's PDB: the highest count of live pods seen in each PodGroup
    /// (`<podgroup>=<n>,...`), so a drain or a restart never shrinks the gang the budget is for.
    pub const GANG_SIZES: &str = "pdboperator.io/gang-sizes";
    /// Legacy finalizer of the reference operator; never added, stripped when found.
    pub const LEGACY_WORKLOAD_FINALIZER: &str = "pdboperator.io/pdb-cleanup";
    /// Legacy finalizer of the reference policy controller; never added, stripped when found.
    pub const LEGACY_POLICY_FINALIZER: &str = "pdbpolicy.pdboperator.io/finalizer";
    /// Foreign label: pods and StatefulSets owned by a LeaderWorkerSet.
    pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
    /// Value of the managed-by label and the created-by annotation; also the SSA field manager.
    pub const OPERATOR_NAME: &str = "pdb-operator";
}

/// Event reasons (note §12). Posted through events.k8s.io/v1 with action = reason.
pub mod reasons {
    pub const PDB_CREATED: &str = "PDBCreated";
    pub const PDB_UPDATED: &str = "PDBUpdated";
    pub const PDB_DELETED: &str = "PDBDeleted";
    pub const PDB_CREATION_FAILED: &str = "PDBCreationFailed";
    pub const PDB_UPDATE_FAILED: &str = "PDBUpdateFailed";
    pub const PDB_DELETION_FAILED: &str = "PDBDeletionFailed";
    pub const PDB_CONFLICT: &str = "PDBConflict";
    pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
    pub const DEPLOYMENT_SKIPPED: &str = "DeploymentSkipped";
    pub const STATEFULSET_SKIPPED: &str = "StatefulSetSkipped";
    pub const LEADERWORKERSET_SKIPPED: &str = "LeaderWorkerSetSkipped";
    pub const DEPLOYMENT_UNMANAGED: &str = "DeploymentUnmanaged";
    pub const STATEFULSET_UNMANAGED: &str = "StatefulSetUnmanaged";
    pub const LEADERWORKERSET_UNMANAGED: &str = "LeaderWorkerSetUnmanaged";
    pub const WORKLOAD_UNMANAGED: &str = "WorkloadUnmanaged";
    pub const WORKLOAD_PDB_DEFERRED: &str = "WorkloadPDBDeferred";
    pub const WORKLOAD_SELECTOR_UNRESOLVABLE: &str = "WorkloadSelectorUnresolvable";
    pub const WORKLOAD_UNSUPPORTED: &str = "WorkloadUnsupported";
    pub const WORKLOAD_SKIPPED: &str = "WorkloadSkipped";
    /// A gang has fewer live pods than its PDB was written for: no eviction is possible until
    /// they are back (Warning; says which groups and how to shrink a gang on purpose).
    pub const WORKLOAD_DRAIN_BLOCKED: &str = "WorkloadDrainBlocked";
    /// Members missing for longer than the wait were counted out of their group's size
    /// (Warning; says which groups, from which size to which).
    pub const WORKLOAD_MEMBERS_COUNTED_OUT: &str = "WorkloadMembersCountedOut";
    /// The gang's pods belong to a LeaderWorkerSet that has no PDB (Warning).
    pub const WORKLOAD_LWS_UNCOVERED: &str = "WorkloadLeaderWorkerSetUncovered";
    pub const POLICY_ENFORCED: &str = "PolicyEnforced";
    pub const BELOW_MINIMUM: &str = "BelowMinimum";
    pub const ANNOTATION_ACCEPTED: &str = "AnnotationAccepted";
    pub const OVERRIDE_REQUIRES_ANNOTATION: &str = "OverrideRequiresAnnotation";
    pub const OVERRIDE_REQUIRES_REASON: &str = "OverrideRequiresReason";
    pub const POLICY_CONFLICT: &str = "PolicyConflict";
    pub const POLICY_APPLIED: &str = "PolicyApplied";
    pub const POLICY_UPDATED: &str = "PolicyUpdated";
    pub const POLICY_REMOVED: &str = "PolicyRemoved";
    pub const POLICY_INVALID: &str = "PolicyInvalid";
    pub const BUDGET_CLAMPED: &str = "BudgetClamped";
    pub const MAINTENANCE_WINDOW_ACTIVE: &str = "MaintenanceWindowActive";
    pub const MAINTENANCE_WINDOW_ENDED: &str = "MaintenanceWindowEnded";
}

/// Metric names (note §13) with the corrected semantics described next to each one.
/// Names and label keys match the reference so dashboards keep working.
pub mod metrics {
    /// counter {namespace, availability_class, workload_function}
    pub const PDBS_CREATED_TOTAL: &str = "pdb_operator_pdbs_created_total";
    /// counter {namespace, availability_class}; the class label carries the real class.
    pub const PDBS_UPDATED_TOTAL: &str = "pdb_operator_pdbs_updated_total";
    /// counter {namespace, reason}; reasons include `unmanaged`, `insufficient_replicas`, `single_group`.
    pub const PDBS_DELETED_TOTAL: &str = "pdb_operator_pdbs_deleted_total";
    /// histogram {controller, result}; buckets [`RECONCILE_BUCKETS`].
    pub const RECONCILIATION_DURATION_SECONDS: &str =
        "pdb_operator_reconciliation_duration_seconds";
    /// counter {controller, error_type}; error_type is the API status reason, not `unknown`.
    pub const RECONCILIATION_ERRORS_TOTAL: &str = "pdb_operator_reconciliation_errors_total";
    /// gauges {namespace, availability_class}: workloads that currently HAVE a managed PDB,
    /// whether configured by annotation or by policy.
    pub const DEPLOYMENTS_MANAGED: &str = "pdb_operator_deployments_managed";
    pub const STATEFULSETS_MANAGED: &str = "pdb_operator_statefulsets_managed";
    pub const LEADERWORKERSETS_MANAGED: &str = "pdb_operator_leaderworkersets_managed";
    pub const WORKLOADS_MANAGED: &str = "pdb_operator_workloads_managed";
    /// gauge 1/0 {namespace, deployment, kind, reason}; series deleted with the workload.
    pub const COMPLIANCE_STATUS: &str = "pdb_operator_compliance_status";
    /// gauge {namespace}: number of valid policies per namespace (one writer).
    pub const POLICIES_ACTIVE: &str = "pdb_operator_policies_active";
    /// gauge {namespace, deployment, kind}: 1 while a maintenance window relaxes the workload's PDB.
    pub const MAINTENANCE_WINDOW_ACTIVE: &str = "pdb_operator_maintenance_window_active";
    /// gauge = 1 {version, git_commit, build_date}
    pub const INFO: &str = "pdb_operator_info";
    /// counter {enforcement_mode, decision, namespace}
    pub const ENFORCEMENT_DECISIONS_TOTAL: &str = "pdb_operator_enforcement_decisions_total";
    /// counter {result, reason, namespace}; see [`crate::enforcement::OverrideOutcome`].
    pub const OVERRIDE_ATTEMPTS_TOTAL: &str = "pdb_operator_override_attempts_total";
    /// counter {enforcement_mode, namespace}: once per resolution in which a policy took part.
    pub const POLICY_EVALUATIONS_TOTAL: &str = "pdb_operator_policy_evaluations_total";
    /// counter {resolution, enforcement_mode, namespace}: decision-table rows 4, 7 and 9-11.
    pub const POLICY_CONFLICTS_TOTAL: &str = "pdb_operator_policy_conflicts_total";
    /// counter {namespace, policy_count}
    pub const MULTI_POLICY_MATCHES_TOTAL: &str = "pdb_operator_multi_policy_matches_total";
    /// counter {namespace, resolution_method}; resolution_method is `alphabetical`.
    pub const POLICY_TIE_BREAKS_TOTAL: &str = "pdb_operator_policy_tie_breaks_total";
    /// gauge: workloads waiting for a reconcile (triggered by a change, not started yet).
    pub const RECONCILE_QUEUE_LENGTH: &str = "pdb_operator_reconcile_queue_length";
    /// counter {operation, error_type, attempt}: a write failed transiently and is tried again.
    pub const RETRY_ATTEMPTS_TOTAL: &str = "pdb_operator_retry_attempts_total";
    /// counter {operation, final_error_type}: every attempt failed; the reconcile retries in 30 s.
    pub const RETRY_EXHAUSTED_TOTAL: &str = "pdb_operator_retry_exhausted_total";
    /// counter {operation, attempts_required}: a write that succeeded after a retry.
    pub const RETRY_SUCCESS_AFTER_RETRY_TOTAL: &str =
        "pdb_operator_retry_success_after_retry_total";
    /// gauge {status, reason}
    pub const WEBHOOK_STATUS: &str = "pdb_operator_webhook_status";

    /// Histogram buckets for [`RECONCILIATION_DURATION_SECONDS`], in seconds.
    pub const RECONCILE_BUCKETS: [f64; 8] = [0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0];

    /// Every metric this operator registers; alert rules must reference only these.
    pub const ALL: [&str; 24] = [
        PDBS_CREATED_TOTAL,
        PDBS_UPDATED_TOTAL,
        PDBS_DELETED_TOTAL,
        RECONCILIATION_DURATION_SECONDS,
        RECONCILIATION_ERRORS_TOTAL,
        DEPLOYMENTS_MANAGED,
        STATEFULSETS_MANAGED,
        LEADERWORKERSETS_MANAGED,
        WORKLOADS_MANAGED,
        COMPLIANCE_STATUS,
        POLICIES_ACTIVE,
        MAINTENANCE_WINDOW_ACTIVE,
        INFO,
        ENFORCEMENT_DECISIONS_TOTAL,
        OVERRIDE_ATTEMPTS_TOTAL,
        POLICY_EVALUATIONS_TOTAL,
        POLICY_CONFLICTS_TOTAL,
        MULTI_POLICY_MATCHES_TOTAL,
        POLICY_TIE_BREAKS_TOTAL,
        RECONCILE_QUEUE_LENGTH,
        RETRY_ATTEMPTS_TOTAL,
        RETRY_EXHAUSTED_TOTAL,
        RETRY_SUCCESS_AFTER_RETRY_TOTAL,
        WEBHOOK_STATUS,
    ];
}

#[cfg(test)]
mod tests {
    use super::metrics;

    #[test]
    fn metric_names_are_unique_and_prefixed() {
        let mut seen = std::collections::BTreeSet::new();
        for name in metrics::ALL {
            assert!(name.starts_with("pdb_operator_"), "{name} lacks the prefix");
            assert!(seen.insert(name), "{name} listed twice");
        }
    }
}
