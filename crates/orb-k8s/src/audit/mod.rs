//! The high-risk pod field audit (seed 001 "Security audit"). It runs on the final body of
//! every create, typed or native, after every merge, so no escape hatch bypasses it.
//! [`audit_workload_body`] finds; [`enforce_audit_policy`] applies the configured mode:
//! reject (default) fails before any API call listing every finding, warn lets the request
//! proceed with warnings, off is silent. The checks cover the Kubernetes Pod Security
//! Standards profile the operator chose (`pod_security_profile`: baseline or restricted), seed
//! 001's list and orb's own rules; docs/security-audit.md lists them with the field each reads.

mod findings;
mod pod_checks;
#[cfg(test)]
mod tests;

pub use findings::{AuditFinding, HighRiskField, audit_pod_spec, audit_workload_body};
pub use pod_checks::SAFE_ADDED_CAPABILITIES;

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
    /// The operator's whole audit policy (mode, profile, label prefix): what
    /// [`enforce_audit_policy`] needs, so a caller passing this on gets the profile too.
    pub fn from_config(cfg: &K8sProviderConfig) -> AuditPolicy {
        AuditPolicy::from_config(cfg)
    }
}

/// Which Pod Security Standards profile the audit enforces (`pod_security_profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodSecurityProfile {
    /// The default: the standard's "baseline" checks.
    #[default]
    Baseline,
    /// "baseline" plus the standard's "restricted" checks.
    Restricted,
}

impl PodSecurityProfile {
    pub const NAMES: [&str; 2] = ["baseline", "restricted"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

impl std::str::FromStr for PodSecurityProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "baseline" => Ok(Self::Baseline),
            "restricted" => Ok(Self::Restricted),
            other => Err(format!(
                "{other:?} is not a Pod Security Standards profile orb audits against \
                 (\"privileged\" is what reject_high_risk_pod_fields=false is for)"
            )),
        }
    }
}

/// What the audit checks and what it does with findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPolicy {
    pub mode: AuditMode,
    pub profile: PodSecurityProfile,
    /// orb's own `label_prefix`: identity labels under another prefix are findings.
    pub label_prefix: String,
}

impl AuditPolicy {
    pub fn from_config(cfg: &K8sProviderConfig) -> Self {
        let mode = match (
            cfg.audit_high_risk_pod_fields,
            cfg.reject_high_risk_pod_fields,
        ) {
            (false, _) => AuditMode::Off,
            (true, false) => AuditMode::Warn,
            (true, true) => AuditMode::Reject,
        };
        Self {
            mode,
            // The config rules refuse an unknown name before a provider exists.
            profile: cfg.pod_security_profile.parse().unwrap_or_default(),
            label_prefix: cfg.label_prefix.clone(),
        }
    }
}

/// A bare mode audits with the defaults: profile baseline, label prefix `orb.io`.
impl From<AuditMode> for AuditPolicy {
    fn from(mode: AuditMode) -> Self {
        let defaults = K8sProviderConfig::default();
        Self {
            mode,
            ..Self::from_config(&defaults)
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

/// Applies `policy` to `body`. `Ok` holds the findings to log as warnings (always empty in
/// [`AuditMode::Off`] and [`AuditMode::Reject`]).
pub fn enforce_audit_policy(
    policy: impl Into<AuditPolicy>,
    body: &Value,
) -> Result<Vec<AuditFinding>, AuditRejection> {
    let policy = policy.into();
    if policy.mode == AuditMode::Off {
        return Ok(Vec::new());
    }
    let findings = audit_workload_body(body, &policy);
    if policy.mode == AuditMode::Reject && !findings.is_empty() {
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
