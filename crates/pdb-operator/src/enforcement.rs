//! The enforcement decision table (note §5): how a workload's pdboperator.io annotations combine
//! with the winning policy into one effective configuration, and which events that produces.

use crate::budget::{BudgetRule, BudgetValue, Step, step};
use crate::class::{AvailabilityClass, WorkloadFunction, infer_function_from_name};
use crate::crd::{
    CustomPdbConfig, EnforcementMode, MaintenanceWindow, PDBPolicySpec, UnhealthyPodEvictionPolicy,
};
use crate::names::{keys, reasons};
use crate::resolve::{PolicyChoice, PolicyRef, WorkloadMeta, choose_policy};

/// Kubernetes event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// An event the controller should post on the workload (reason is one of [`reasons`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

impl EventNote {
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            message: message.into(),
        }
    }
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            message: message.into(),
        }
    }
}

/// Which row of the decision table produced the configuration (`Source` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    AnnotationNoPolicy,
    PolicyStrict,
    PolicyFlexible,
    AnnotationFlexible,
    PolicyFlexibleMinimum,
    PolicyAdvisory,
    PolicyAdvisoryNoOverride,
    PolicyAdvisoryMissingAnnotation,
    PolicyAdvisoryMissingReason,
    AnnotationAdvisory,
}

impl ConfigSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AnnotationNoPolicy => "annotation-no-policy",
            Self::PolicyStrict => "policy-strict",
            Self::PolicyFlexible => "policy-flexible",
            Self::AnnotationFlexible => "annotation-flexible",
            Self::PolicyFlexibleMinimum => "policy-flexible-minimum",
            Self::PolicyAdvisory => "policy-advisory",
            Self::PolicyAdvisoryNoOverride => "policy-advisory-no-override",
            Self::PolicyAdvisoryMissingAnnotation => "policy-advisory-missing-annotation",
            Self::PolicyAdvisoryMissingReason => "policy-advisory-missing-reason",
            Self::AnnotationAdvisory => "annotation-advisory",
        }
    }
}

/// Labels of `pdb_operator_override_attempts_total` for one override attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverrideOutcome {
    pub result: &'static str,
    pub reason: &'static str,
}

const fn outcome(result: &'static str, reason: &'static str) -> Option<OverrideOutcome> {
    Some(OverrideOutcome { result, reason })
}

/// The winning policy, as recorded on the PDB and in metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInfo {
    pub kind: &'static str,
    pub name: String,
    pub key: String,
    pub enforcement: EnforcementMode,
}

/// Everything the budget math needs, after enforcement.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveConfig {
    pub class: AvailabilityClass,
    pub function: WorkloadFunction,
    /// Requested budget before the drain-safety clamp.
    pub rule: BudgetRule,
    pub source: ConfigSource,
    pub policy: Option<PolicyInfo>,
    pub unhealthy_pod_eviction_policy: Option<UnhealthyPodEvictionPolicy>,
    /// Maintenance windows of the winning policy (the annotation window is added later).
    pub policy_windows: Vec<MaintenanceWindow>,
    pub override_outcome: Option<OverrideOutcome>,
    /// Number of valid matching policies (for `multi_policy_matches_total` when > 1).
    pub matched_policies: usize,
    /// Set when the top priority was shared (`policy_tie_breaks_total`).
    pub tie_broken: bool,
}

/// Configuration (or none) plus the events and the reasoning that led to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub config: Option<EffectiveConfig>,
    pub events: Vec<EventNote>,
    pub steps: Vec<Step>,
}

fn budget_rule(
    class: AvailabilityClass,
    function: WorkloadFunction,
    custom: Option<&CustomPdbConfig>,
) -> BudgetRule {
    if class == AvailabilityClass::Custom
        && let Some(c) = custom
    {
        if let Some(v) = c
            .min_available
            .as_ref()
            .and_then(|v| BudgetValue::from_int_or_string(v).ok())
        {
            return BudgetRule::MinAvailable(v);
        }
        if let Some(v) = c
            .max_unavailable
            .as_ref()
            .and_then(|v| BudgetValue::from_int_or_string(v).ok())
        {
            return BudgetRule::MaxUnavailable(v);
        }
    }
    BudgetRule::MinAvailable(BudgetValue::Percent(class.min_available_percent(function)))
}

/// Runs policy choice and the decision table for one workload.
pub fn resolve_configuration(
    w: &WorkloadMeta,
    candidates: &[PolicyRef<'_>],
    legacy_cross_namespace: bool,
) -> Resolved {
    let mut events = Vec::new();
    let mut steps = Vec::new();

    let annotated_class = match w.annotation(keys::AVAILABILITY_CLASS) {
        None => None,
        Some(raw) => match raw.parse::<AvailabilityClass>() {
            Ok(c) => Some(c),
            Err(e) => {
                events.push(EventNote::warning(
                    reasons::INVALID_CONFIGURATION,
                    format!("Invalid configuration: {e}"),
                ));
                steps.push(step(
                    "annotation availability-class",
                    format!("{raw:?} is invalid, ignored"),
                ));
                None
            }
        },
    };
    if let Some(c) = annotated_class {
        steps.push(step("annotation availability-class", c));
    }
    let annotated_function = match w.annotation(keys::WORKLOAD_FUNCTION) {
        None => None,
        Some(raw) => match raw.parse::<WorkloadFunction>() {
            Ok(f) => Some(f),
            Err(e) => {
                events.push(EventNote::warning(
                    reasons::INVALID_CONFIGURATION,
                    format!("Invalid configuration: {e}; treated as core"),
                ));
                Some(WorkloadFunction::Core)
            }
        },
    };

    let PolicyChoice {
        winner,
        matched,
        tie_break,
    } = choose_policy(candidates, w, legacy_cross_namespace);
    let listed: Vec<String> = matched
        .iter()
        .map(|p| format!("{} {} (priority {})", p.kind(), p.key(), p.spec.priority))
        .collect();
    steps.push(step(
        "matching policies",
        if listed.is_empty() {
            "none".to_string()
        } else {
            listed.join(", ")
        },
    ));
    if let Some(msg) = &tie_break {
        events.push(EventNote::warning(reasons::POLICY_CONFLICT, msg.clone()));
        steps.push(step("tie-break", msg));
    }

    let Some(policy) = winner else {
        // Rows 1 and 2.
        let Some(class) = annotated_class else {
            return Resolved {
                config: None,
                events,
                steps,
            };
        };
        let function = annotated_function.unwrap_or(WorkloadFunction::Core);
        steps.push(step(
            "decision",
            "row 1: annotation, no policy (annotation-no-policy)",
        ));
        let config = EffectiveConfig {
            class,
            function,
            rule: budget_rule(class, function, None),
            source: ConfigSource::AnnotationNoPolicy,
            policy: None,
            unhealthy_pod_eviction_policy: None,
            policy_windows: Vec::new(),
            override_outcome: None,
            matched_policies: 0,
            tie_broken: false,
        };
        return Resolved {
            config: Some(config),
            events,
            steps,
        };
    };

    let spec: &PDBPolicySpec = policy.spec;
    let function = annotated_function.unwrap_or_else(|| infer_function_from_name(&w.name));
    let policy_class = spec.availability_class;
    steps.push(step(
        "winning policy",
        format!(
            "{} {} ({}, {})",
            policy.kind(),
            policy.key(),
            policy_class,
            spec.enforcement.as_str()
        ),
    ));
    let name = policy.name;
    let (class, source, override_outcome, row) = match (spec.enforcement, annotated_class) {
        (EnforcementMode::Strict, None) => (
            policy_class,
            ConfigSource::PolicyStrict,
            None,
            "row 3: strict, no annotation",
        ),
        (EnforcementMode::Strict, Some(_)) => {
            events.push(EventNote::warning(
                reasons::POLICY_ENFORCED,
                format!("Annotation override blocked by strict policy {name}"),
            ));
            (
                policy_class,
                ConfigSource::PolicyStrict,
                outcome("blocked", "strict-enforcement"),
                "row 4: strict policy blocks the annotation",
            )
        }
        (EnforcementMode::Flexible, None) => (
            policy_class,
            ConfigSource::PolicyFlexible,
            None,
            "row 5: flexible, no annotation",
        ),
        (EnforcementMode::Flexible, Some(a)) => {
            let minimum = spec.minimum_class.unwrap_or(policy_class);
            if a != AvailabilityClass::Custom && a.rank() >= minimum.rank() {
                events.push(EventNote::normal(
                    reasons::ANNOTATION_ACCEPTED,
                    format!(
                        "Annotation {a} accepted by flexible policy {name} (minimum {minimum})"
                    ),
                ));
                (
                    a,
                    ConfigSource::AnnotationFlexible,
                    outcome("accepted", "meets-minimum"),
                    "row 6: annotation meets the minimum",
                )
            } else {
                events.push(EventNote::warning(
                    reasons::BELOW_MINIMUM,
                    format!("Annotation {a} below minimum {minimum}, using {minimum}"),
                ));
                (
                    minimum,
                    ConfigSource::PolicyFlexibleMinimum,
                    outcome("rejected", "below-minimum"),
                    "row 7: annotation below the minimum",
                )
            }
        }
        (EnforcementMode::Advisory, None) => (
            policy_class,
            ConfigSource::PolicyAdvisory,
            None,
            "row 8: advisory, no annotation",
        ),
        (EnforcementMode::Advisory, Some(a)) => {
            let required = spec
                .override_requires_annotation
                .as_deref()
                .filter(|k| !k.is_empty());
            if !spec.allow_override {
                (
                    policy_class,
                    ConfigSource::PolicyAdvisoryNoOverride,
                    outcome("blocked", "override-not-allowed"),
                    "row 9: allowOverride is false",
                )
            } else if let Some(key) = required.filter(|k| w.annotation(k).is_none()) {
                events.push(EventNote::warning(
                    reasons::OVERRIDE_REQUIRES_ANNOTATION,
                    format!("Override to {a} requires a non-empty annotation {key} (policy {name}); using {policy_class}"),
                ));
                (
                    policy_class,
                    ConfigSource::PolicyAdvisoryMissingAnnotation,
                    outcome("blocked", "missing-required-annotation"),
                    "row 10: required annotation missing",
                )
            } else if spec.override_requires_reason && w.annotation(keys::OVERRIDE_REASON).is_none()
            {
                events.push(EventNote::warning(
                    reasons::OVERRIDE_REQUIRES_REASON,
                    format!("Override to {a} requires annotation {} (policy {name}); using {policy_class}", keys::OVERRIDE_REASON),
                ));
                (
                    policy_class,
                    ConfigSource::PolicyAdvisoryMissingReason,
                    outcome("blocked", "missing-reason"),
                    "row 11: override reason missing",
                )
            } else {
                (
                    a,
                    ConfigSource::AnnotationAdvisory,
                    outcome("accepted", "advisory-mode"),
                    "row 12: advisory override accepted",
                )
            }
        }
    };
    steps.push(step("decision", format!("{row} ({})", source.as_str())));
    steps.push(step(
        "effective class",
        format!("{class} (function {function})"),
    ));
    let custom = spec.custom_pdb_config.as_ref();
    let config = EffectiveConfig {
        class,
        function,
        rule: budget_rule(class, function, custom),
        source,
        policy: Some(PolicyInfo {
            kind: policy.kind(),
            name: name.to_string(),
            key: policy.key(),
            enforcement: spec.enforcement,
        }),
        unhealthy_pod_eviction_policy: custom.map(|c| c.unhealthy_pod_eviction_policy),
        policy_windows: spec.maintenance_windows.clone(),
        override_outcome,
        matched_policies: matched.len(),
        tie_broken: tie_break.is_some(),
    };
    Resolved {
        config: Some(config),
        events,
        steps,
    }
}

#[cfg(test)]
mod tests;
