//! The Prometheus registry (names from [`crate::names::metrics`], OpenMetrics text). Gauges that
//! describe current state (managed workloads, compliance, open windows) are rebuilt from the
//! controller's outcome table, so a deleted workload's series disappear with it.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::names::metrics as m;

/// Label set: `(key, value)` pairs in a fixed order.
pub type Labels = Vec<(&'static str, String)>;

type Counters = Family<Labels, Counter>;
pub type Gauges = Family<Labels, Gauge>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    Histogram::new(m::RECONCILE_BUCKETS)
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub pdbs_created: Counters,
    pub pdbs_updated: Counters,
    pub pdbs_deleted: Counters,
    pub reconcile_duration: Histograms,
    pub reconcile_errors: Counters,
    pub deployments_managed: Gauges,
    pub statefulsets_managed: Gauges,
    pub leaderworkersets_managed: Gauges,
    pub workloads_managed: Gauges,
    pub compliance_status: Gauges,
    pub policies_active: Gauges,
    pub maintenance_window_active: Gauges,
    pub info: Gauges,
    pub enforcement_decisions: Counters,
    pub override_attempts: Counters,
    pub policy_evaluations: Counters,
    pub policy_conflicts: Counters,
    pub multi_policy_matches: Counters,
    pub policy_tie_breaks: Counters,
    pub reconcile_queue_length: Gauge,
    pub retry_attempts: Counters,
    pub retry_exhausted: Counters,
    pub retry_success_after_retry: Counters,
    pub webhook_status: Gauges,
}

/// prometheus-client appends `_total` to counters itself.
fn counter_name(full: &str) -> &str {
    full.strip_suffix("_total").unwrap_or(full)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::default();
        let mut counter = |name: &str, help: &str| {
            let c = Counters::default();
            r.register(counter_name(name), help, c.clone());
            c
        };
        let pdbs_created = counter(m::PDBS_CREATED_TOTAL, "PDBs created");
        let pdbs_updated = counter(m::PDBS_UPDATED_TOTAL, "PDBs updated");
        let pdbs_deleted = counter(m::PDBS_DELETED_TOTAL, "PDBs deleted, by reason");
        let reconcile_errors = counter(
            m::RECONCILIATION_ERRORS_TOTAL,
            "Reconcile errors by API status reason",
        );
        let enforcement_decisions = counter(
            m::ENFORCEMENT_DECISIONS_TOTAL,
            "Enforcement decisions by mode and decision-table source",
        );
        let override_attempts = counter(
            m::OVERRIDE_ATTEMPTS_TOTAL,
            "Annotation override attempts against a policy",
        );
        let policy_evaluations = counter(
            m::POLICY_EVALUATIONS_TOTAL,
            "Resolutions in which a policy took part",
        );
        let policy_conflicts = counter(
            m::POLICY_CONFLICTS_TOTAL,
            "Annotation/policy conflicts (blocked, below minimum, missing annotation or reason)",
        );
        let multi_policy_matches = counter(
            m::MULTI_POLICY_MATCHES_TOTAL,
            "Resolutions where more than one policy matched",
        );
        let policy_tie_breaks = counter(
            m::POLICY_TIE_BREAKS_TOTAL,
            "Resolutions where the top priority was shared",
        );
        let retry_attempts = counter(
            m::RETRY_ATTEMPTS_TOTAL,
            "API writes that failed transiently and were tried again, by attempt that failed",
        );
        let retry_exhausted = counter(
            m::RETRY_EXHAUSTED_TOTAL,
            "API writes that failed on every attempt (the reconcile is retried in 30 s)",
        );
        let retry_success_after_retry = counter(
            m::RETRY_SUCCESS_AFTER_RETRY_TOTAL,
            "API writes that succeeded after at least one retry",
        );
        let mut gauge = |name: &str, help: &str| {
            let g = Gauges::default();
            r.register(name, help, g.clone());
            g
        };
        let deployments_managed = gauge(
            m::DEPLOYMENTS_MANAGED,
            "Deployments that currently have a managed PDB",
        );
        let statefulsets_managed = gauge(
            m::STATEFULSETS_MANAGED,
            "StatefulSets that currently have a managed PDB",
        );
        let leaderworkersets_managed = gauge(
            m::LEADERWORKERSETS_MANAGED,
            "LeaderWorkerSets that currently have a managed PDB",
        );
        let workloads_managed = gauge(
            m::WORKLOADS_MANAGED,
            "Workload API gangs that currently have a managed PDB",
        );
        let compliance_status = gauge(
            m::COMPLIANCE_STATUS,
            "1 when a configured workload has its PDB, 0 with the reason when it has none",
        );
        let policies_active = gauge(m::POLICIES_ACTIVE, "Valid policies per namespace");
        let maintenance_window_active = gauge(
            m::MAINTENANCE_WINDOW_ACTIVE,
            "1 while a maintenance window relaxes the workload's PDB",
        );
        let info = gauge(m::INFO, "Build information");
        let webhook_status = gauge(m::WEBHOOK_STATUS, "Admission webhook state");
        let reconcile_duration = Histograms::new_with_constructor(reconcile_histogram);
        r.register(
            m::RECONCILIATION_DURATION_SECONDS,
            "Reconcile duration by controller and result",
            reconcile_duration.clone(),
        );
        let reconcile_queue_length = Gauge::default();
        r.register(
            m::RECONCILE_QUEUE_LENGTH,
            "Workloads waiting for a reconcile: triggered by a change and not started yet",
            reconcile_queue_length.clone(),
        );
        info.get_or_create(&vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            (
                "git_commit",
                option_env!("GIT_COMMIT").unwrap_or("unknown").to_string(),
            ),
            (
                "build_date",
                option_env!("BUILD_DATE").unwrap_or("unknown").to_string(),
            ),
        ])
        .set(1);
        // No admission webhook in this build: policies are validated by the CRD's CEL rules.
        webhook_status
            .get_or_create(&vec![
                ("status", "disabled".to_string()),
                ("reason", "by_configuration".to_string()),
            ])
            .set(1);
        Self {
            registry: r,
            pdbs_created,
            pdbs_updated,
            pdbs_deleted,
            reconcile_duration,
            reconcile_errors,
            deployments_managed,
            statefulsets_managed,
            leaderworkersets_managed,
            workloads_managed,
            compliance_status,
            policies_active,
            maintenance_window_active,
            info,
            enforcement_decisions,
            override_attempts,
            policy_evaluations,
            policy_conflicts,
            multi_policy_matches,
            policy_tie_breaks,
            reconcile_queue_length,
            retry_attempts,
            retry_exhausted,
            retry_success_after_retry,
            webhook_status,
        }
    }

    /// OpenMetrics text exposition (ends in `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_metric_is_exported() {
        let metrics = Metrics::new();
        // Families without series are not printed; give each one a series.
        let one = vec![("namespace", "a".to_string())];
        for c in [
            &metrics.pdbs_created,
            &metrics.pdbs_updated,
            &metrics.pdbs_deleted,
            &metrics.reconcile_errors,
            &metrics.enforcement_decisions,
            &metrics.override_attempts,
            &metrics.policy_evaluations,
            &metrics.policy_conflicts,
            &metrics.multi_policy_matches,
            &metrics.policy_tie_breaks,
            &metrics.retry_attempts,
            &metrics.retry_exhausted,
            &metrics.retry_success_after_retry,
        ] {
            c.get_or_create(&one).inc();
        }
        for g in [
            &metrics.deployments_managed,
            &metrics.statefulsets_managed,
            &metrics.leaderworkersets_managed,
            &metrics.workloads_managed,
            &metrics.compliance_status,
            &metrics.policies_active,
            &metrics.maintenance_window_active,
        ] {
            g.get_or_create(&one).set(1);
        }
        metrics
            .reconcile_duration
            .get_or_create(&vec![("controller", "x".into())])
            .observe(0.2);
        let text = metrics.render();
        for name in m::ALL {
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{name} missing from\n{text}"
            );
        }
        assert!(text.contains("pdb_operator_pdbs_created_total{namespace=\"a\"} 1"));
        assert!(text.ends_with("# EOF\n"));
    }
}
