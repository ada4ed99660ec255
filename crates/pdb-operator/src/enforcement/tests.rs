use super::*;
use crate::budget::BudgetValue::{Count, Percent};
use crate::crd::PDBPolicySpec;
use rstest::rstest;
use serde_json::json;

fn spec(v: serde_json::Value) -> PDBPolicySpec {
    let mut base = json!({"workloadSelector": {"matchLabels": {"app": "a"}}});
    for (k, val) in v.as_object().unwrap() {
        base[k] = val.clone();
    }
    serde_json::from_value(base).unwrap()
}

fn workload(name: &str, annotations: &[(&str, &str)]) -> WorkloadMeta {
    WorkloadMeta {
        namespace: "default".into(),
        name: name.into(),
        labels: [("app".to_string(), "a".to_string())].into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn resolve(policy: Option<serde_json::Value>, annotations: &[(&str, &str)]) -> Resolved {
    resolve_named("web", policy, annotations)
}

fn resolve_named(
    name: &str,
    policy: Option<serde_json::Value>,
    annotations: &[(&str, &str)],
) -> Resolved {
    let s = policy.map(spec);
    let refs: Vec<PolicyRef<'_>> = s
        .iter()
        .map(|s| PolicyRef {
            namespace: Some("default"),
            name: "p",
            spec: s,
        })
        .collect();
    resolve_configuration(&workload(name, annotations), &refs, false)
}

fn min_pct(p: u32) -> BudgetRule {
    BudgetRule::MinAvailable(Percent(p))
}

const CLASS: &str = keys::AVAILABILITY_CLASS;

// Note §5 decision table, rows 1–12, and scenarios 18–23.
#[rstest]
#[case::row1_annotation_only(None, &[(CLASS, "standard")], ConfigSource::AnnotationNoPolicy, min_pct(50), None)]
#[case::row3_strict(Some(json!({"availabilityClass": "mission-critical", "enforcement": "strict"})), &[], ConfigSource::PolicyStrict, min_pct(90), None)]
#[case::row4_strict_blocks(Some(json!({"availabilityClass": "mission-critical", "enforcement": "strict"})), &[(CLASS, "non-critical")], ConfigSource::PolicyStrict, min_pct(90), Some(reasons::POLICY_ENFORCED))]
#[case::row5_flexible(Some(json!({"availabilityClass": "standard", "enforcement": "flexible"})), &[], ConfigSource::PolicyFlexible, min_pct(50), None)]
#[case::row6_meets_minimum(Some(json!({"availabilityClass": "standard", "enforcement": "flexible", "minimumClass": "standard"})), &[(CLASS, "mission-critical")], ConfigSource::AnnotationFlexible, min_pct(90), Some(reasons::ANNOTATION_ACCEPTED))]
#[case::row6_ha_min_standard(Some(json!({"availabilityClass": "high-availability", "enforcement": "flexible", "minimumClass": "standard"})), &[(CLASS, "standard")], ConfigSource::AnnotationFlexible, min_pct(50), Some(reasons::ANNOTATION_ACCEPTED))]
#[case::row7_below_minimum(Some(json!({"availabilityClass": "standard", "enforcement": "flexible", "minimumClass": "standard"})), &[(CLASS, "non-critical")], ConfigSource::PolicyFlexibleMinimum, min_pct(50), Some(reasons::BELOW_MINIMUM))]
#[case::row7_uses_minimum_not_class(Some(json!({"availabilityClass": "high-availability", "enforcement": "flexible", "minimumClass": "standard"})), &[(CLASS, "non-critical")], ConfigSource::PolicyFlexibleMinimum, min_pct(50), Some(reasons::BELOW_MINIMUM))]
#[case::row7_custom_never_meets(Some(json!({"availabilityClass": "mission-critical", "enforcement": "flexible", "minimumClass": "mission-critical"})), &[(CLASS, "custom")], ConfigSource::PolicyFlexibleMinimum, min_pct(90), Some(reasons::BELOW_MINIMUM))]
#[case::row8_advisory(Some(json!({"availabilityClass": "standard"})), &[], ConfigSource::PolicyAdvisory, min_pct(50), None)]
#[case::row9_no_override(Some(json!({"availabilityClass": "standard", "allowOverride": false})), &[(CLASS, "mission-critical")], ConfigSource::PolicyAdvisoryNoOverride, min_pct(50), None)]
#[case::row10_missing_annotation(Some(json!({"availabilityClass": "standard", "overrideRequiresAnnotation": "approved-by"})), &[(CLASS, "mission-critical")], ConfigSource::PolicyAdvisoryMissingAnnotation, min_pct(50), Some(reasons::OVERRIDE_REQUIRES_ANNOTATION))]
#[case::row10_empty_annotation(Some(json!({"availabilityClass": "standard", "overrideRequiresAnnotation": "approved-by"})), &[(CLASS, "mission-critical"), ("approved-by", "")], ConfigSource::PolicyAdvisoryMissingAnnotation, min_pct(50), Some(reasons::OVERRIDE_REQUIRES_ANNOTATION))]
#[case::row10_satisfied(Some(json!({"availabilityClass": "standard", "overrideRequiresAnnotation": "approved-by"})), &[(CLASS, "mission-critical"), ("approved-by", "alice")], ConfigSource::AnnotationAdvisory, min_pct(90), None)]
#[case::row11_missing_reason(Some(json!({"availabilityClass": "standard", "overrideRequiresReason": true})), &[(CLASS, "mission-critical")], ConfigSource::PolicyAdvisoryMissingReason, min_pct(50), Some(reasons::OVERRIDE_REQUIRES_REASON))]
#[case::row11_with_reason(Some(json!({"availabilityClass": "standard", "overrideRequiresReason": true})), &[(CLASS, "mission-critical"), (keys::OVERRIDE_REASON, "launch week")], ConfigSource::AnnotationAdvisory, min_pct(90), None)]
#[case::row12_override(Some(json!({"availabilityClass": "standard"})), &[(CLASS, "mission-critical")], ConfigSource::AnnotationAdvisory, min_pct(90), None)]
fn decision_table(
    #[case] policy: Option<serde_json::Value>,
    #[case] annotations: &[(&str, &str)],
    #[case] source: ConfigSource,
    #[case] rule: BudgetRule,
    #[case] event: Option<&str>,
) {
    let r = resolve(policy, annotations);
    let c = r.config.expect("a configuration");
    assert_eq!(c.source, source);
    assert_eq!(c.rule, rule);
    let reasons: Vec<&str> = r.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, event.into_iter().collect::<Vec<_>>());
}

#[test]
fn row2_nothing_configured() {
    let r = resolve(None, &[]);
    assert!(r.config.is_none());
    assert!(r.events.is_empty());
}

#[test]
fn invalid_annotation_alone_gives_no_config_and_a_warning() {
    // Scenario 5.
    let r = resolve(None, &[(CLASS, "super-duper-critical")]);
    assert!(r.config.is_none());
    assert_eq!(r.events[0].reason, reasons::INVALID_CONFIGURATION);
    assert!(r.events[0].message.contains("invalid availability class"));
}

#[test]
fn invalid_annotation_does_not_block_a_valid_policy() {
    // Scenario 6.
    let r = resolve(
        Some(json!({"availabilityClass": "standard"})),
        &[(CLASS, "super-duper-critical")],
    );
    assert_eq!(r.config.unwrap().rule, min_pct(50));
    assert_eq!(r.events[0].reason, reasons::INVALID_CONFIGURATION);
}

// Scenario 4 and 27: security boost on both paths.
#[rstest]
#[case::annotation_security(None, "web", &[(CLASS, "standard"), (keys::WORKLOAD_FUNCTION, "security")], 75)]
#[case::annotation_path_no_name_inference(None, "oauth-proxy", &[(CLASS, "standard")], 50)]
#[case::policy_path_name_inference(Some(json!({"availabilityClass": "standard"})), "oauth-proxy", &[], 75)]
#[case::non_critical_security(None, "web", &[(CLASS, "non-critical"), (keys::WORKLOAD_FUNCTION, "security")], 50)]
#[case::management_changes_nothing(None, "web", &[(CLASS, "high-availability"), (keys::WORKLOAD_FUNCTION, "management")], 75)]
#[case::invalid_function_is_core(Some(json!({"availabilityClass": "standard"})), "auth", &[(keys::WORKLOAD_FUNCTION, "wizard")], 50)]
fn function_boost(
    #[case] policy: Option<serde_json::Value>,
    #[case] name: &str,
    #[case] annotations: &[(&str, &str)],
    #[case] pct: u32,
) {
    let r = resolve_named(name, policy, annotations);
    assert_eq!(r.config.unwrap().rule, min_pct(pct));
}

#[test]
fn custom_policy_values_and_eviction_policy_are_carried() {
    // Scenario 29.
    let r = resolve(
        Some(
            json!({"availabilityClass": "custom", "customPDBConfig": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
        ),
        &[],
    );
    let c = r.config.unwrap();
    assert_eq!(c.rule, BudgetRule::MaxUnavailable(Count(1)));
    assert_eq!(
        c.unhealthy_pod_eviction_policy,
        Some(UnhealthyPodEvictionPolicy::AlwaysAllow)
    );
    let r = resolve(
        Some(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": 3}})),
        &[],
    );
    assert_eq!(r.config.unwrap().rule, BudgetRule::MinAvailable(Count(3)));
}

#[test]
fn custom_annotation_without_policy_is_fifty_percent() {
    let r = resolve(None, &[(CLASS, "custom")]);
    assert_eq!(r.config.unwrap().rule, min_pct(50));
}
