//! The high-risk pod field audit (seed 001 "Security audit"). It runs on the final body of
//! every create, typed or native, after every merge, so no escape hatch bypasses it.
//! [`audit_workload_body`] finds; [`enforce_audit_policy`] applies the configured mode:
//! reject (default) fails before any API call listing every finding, warn lets the request
//! proceed with warnings, off is silent. docs/security-audit.md lists the fields.

mod findings;
#[cfg(test)]
mod tests;

pub use findings::{
    AuditFinding, HighRiskField, SAFE_ADDED_CAPABILITIES, audit_pod_spec, audit_workload_body,
};

use serde_json::Value;

use crate::config::K8sProviderConfig;

/// What the audit does with findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditMode {
    /// `audit_high_risk_pod_fields=false`: nothing is checked or logged.
    Off,
    /// `reject_high_risk_pod_fields=false`: findings are returned as warnings.
    Warn,
    /// The default: any finding fails the request before anything is created.
    Reject,
}

impl AuditMode {
    pub fn from_config(cfg: &K8sProviderConfig) -> Self {
        match (
            cfg.audit_high_risk_pod_fields,
            cfg.reject_high_risk_pod_fields,
        ) {
            (false, _) => Self::Off,
            (true, false) => Self::Warn,
            (true, true) => Self::Reject,
        }
    }
}

/// The request was refused because the body holds high-risk fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "request rejected before anything was created: the {kind} body contains {} high-risk pod \
     field{}:\n{}\nRemove or fix these fields, or, if this workload really needs them, set \
     reject_high_risk_pod_fields=false (ORB_K8S_REJECT_HIGH_RISK_POD_FIELDS=false) to let \
     them through with warnings",
    findings.len(),
    if findings.len() == 1 { "" } else { "s" },
    findings.iter().map(|f| format!("  - {f}")).collect::<Vec<_>>().join("\n")
)]
pub struct AuditRejection {
    /// `kind` of the body (`Pod`, `Deployment`, …), or `workload` when it has none.
    pub kind: String,
    pub findings: Vec<AuditFinding>,
}

/// Applies `mode` to `body`. `Ok` holds the findings to log as warnings (always empty in
/// [`AuditMode::Off`] and [`AuditMode::Reject`]).
pub fn enforce_audit_policy(
    mode: AuditMode,
    body: &Value,
) -> Result<Vec<AuditFinding>, AuditRejection> {
    if mode == AuditMode::Off {
        return Ok(Vec::new());
    }
    let findings = audit_workload_body(body);
    if mode == AuditMode::Reject && !findings.is_empty() {
        return Err(AuditRejection {
            kind: body
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("workload")
                .to_string(),
            findings,
        });
    }
    Ok(findings)
}
