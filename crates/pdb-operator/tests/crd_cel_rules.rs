//! The CRD's CEL rules (`x-kubernetes-validations`) evaluated client-side with kube's CEL
//! engine: every rule compiles, the note's admission rejections are rejected with the expected
//! wording, and valid policies pass. (The OpenAPI `pattern` on customPDBConfig values, which
//! rejects "3" and "120%", is the API server's job and is not exercised here.)

use kube::CustomResourceExt;
use kube::core::cel::{Validator, compile_schema};
use pdb_operator::crd::{ClusterPDBPolicy, PDBPolicy};
use rstest::rstest;
use serde_json::{Value, json};

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

fn policy(spec: Value) -> Value {
    let mut base = json!({
        "availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"app": "a"}},
    });
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1",
        "kind": "PDBPolicy",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": base,
    })
}

fn errors(object: &Value) -> Vec<String> {
    match Validator::new().validate(&schema::<PDBPolicy>(), object, None) {
        Ok(()) => vec![],
        Err(e) => e.into_vec().into_iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn every_rule_compiles_in_both_crds() {
    for s in [schema::<PDBPolicy>(), schema::<ClusterPDBPolicy>()] {
        let compiled = compile_schema(&s);
        assert!(
            !compiled.has_errors(),
            "{:?}",
            compiled.compilation_errors()
        );
    }
}

// Scenario 37 (the parts CEL owns) and the messages of note §2.2.
#[rstest]
#[case::custom_without_config(json!({"availabilityClass": "custom"}), "custom availability class requires customPDBConfig")]
#[case::custom_without_values(json!({"availabilityClass": "custom", "customPDBConfig": {}}), "must specify either minAvailable or maxUnavailable")]
#[case::custom_both(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": 1, "maxUnavailable": 1}}), "cannot specify both minAvailable and maxUnavailable")]
#[case::negative_min(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": -1}}), "must be an integer >= 0")]
#[case::selector_namespaces_only(json!({"workloadSelector": {"namespaces": ["default"]}}), "must specify at least one selection criteria")]
#[case::priority_1001(json!({"priority": 1001}), "priority must be between 0 and 1000")]
#[case::priority_negative(json!({"priority": -1}), "priority must be between 0 and 1000")]
#[case::window_25(json!({"maintenanceWindows": [{"start": "25:00", "end": "04:00"}]}), "must be in HH:MM format")]
#[case::day_7(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [7]}]}), "must be between 0 (Sunday) and 6 (Saturday)")]
#[case::bad_class(json!({"availabilityClass": "super-duper-critical"}), "must be one of: non-critical, standard, high-availability, mission-critical, custom")]
#[case::bad_enforcement(json!({"enforcement": "lenient"}), "must be one of: strict, flexible, advisory")]
#[case::bad_function(json!({"workloadSelector": {"workloadFunctions": ["wizard"]}}), "must be one of: core, management, security")]
#[case::minimum_above_class(json!({"enforcement": "flexible", "minimumClass": "mission-critical"}), "minimumClass cannot be higher than availabilityClass")]
#[case::strict_with_reason(json!({"enforcement": "strict", "overrideRequiresReason": true}), "only applicable for advisory enforcement mode")]
#[case::flexible_with_annotation(json!({"enforcement": "flexible", "overrideRequiresAnnotation": "approved-by"}), "only applicable for advisory enforcement mode")]
#[case::annotation_without_override(json!({"allowOverride": false, "overrideRequiresAnnotation": "approved-by"}), "cannot require annotation when AllowOverride is false")]
// An unknown IANA zone (`Mars/Olympus`) is not among these: kube's client-side CEL engine does
// not fail `getHours(zone)` on it as the apiserver's does, so that rejection is checked live
// (`live_scenarios::admission`). The two below fail the rule's pattern, before any zone lookup.
#[case::offset_timezone(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "+01:00"}]}), "must be an IANA time zone name")]
#[case::local_timezone(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "Local"}]}), "must be an IANA time zone name")]
#[case::in_without_values(json!({"workloadSelector": {"matchExpressions": [{"key": "env", "operator": "In"}]}}), "values must be non-empty for In and NotIn")]
fn rejected_by_cel(#[case] spec: Value, #[case] message: &str) {
    let errs = errors(&policy(spec));
    assert!(
        errs.iter().any(|e| e.contains(message)),
        "wanted {message:?} in {errs:?}"
    );
}

#[rstest]
#[case::minimal(json!({}))]
#[case::custom_min(json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "50%"}}))]
#[case::custom_max(json!({"availabilityClass": "custom", "customPDBConfig": {"maxUnavailable": 0}}))]
#[case::flexible_min_below(json!({"availabilityClass": "high-availability", "enforcement": "flexible", "minimumClass": "standard"}))]
#[case::advisory_options(json!({"overrideRequiresAnnotation": "approved-by", "overrideRequiresReason": true}))]
#[case::strict_allow_override_default(json!({"enforcement": "strict"}))]
#[case::window(json!({"maintenanceWindows": [{"start": "2:00", "end": "04:00", "timezone": "Europe/Berlin", "daysOfWeek": [0, 6]}]}))]
#[case::expressions(json!({"workloadSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}, {"key": "tier", "operator": "NotIn", "values": ["batch"]}]}}))]
#[case::window_utc(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "UTC"}]}))]
#[case::window_new_york(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "America/New_York"}]}))]
#[case::priority_zero(json!({"priority": 0}))]
fn accepted_by_cel(#[case] spec: Value) {
    assert_eq!(errors(&policy(spec)), Vec::<String>::new());
}
