//! The checked-in manifests must match what the code generates and what the controllers need.

use pdb_operator::crd::crds_yaml;

const CHECKED_IN_CRDS: &str = include_str!("../deploy/crds.yaml");
const RBAC: &str = include_str!("../deploy/rbac.yaml");
const ADMISSION_POLICY: &str = include_str!("../deploy/admission-policy.yaml");

#[test]
fn checked_in_crds_match_the_generated_ones() {
    let generated = crds_yaml().expect("CRDs render");
    pretty_assertions::assert_eq!(
        CHECKED_IN_CRDS,
        generated,
        "deploy/crds.yaml is stale; regenerate it with `cargo run -p pdb-operator -- crd > crates/pdb-operator/deploy/crds.yaml`"
    );
}

#[test]
fn crds_parse_back_as_custom_resource_definitions() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(CHECKED_IN_CRDS).expect("valid YAML");
    let names: Vec<_> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "pdbpolicies.availability.pdboperator.io",
            "clusterpdbpolicies.availability.pdboperator.io"
        ]
    );
    assert_eq!(crds[0].spec.scope, "Namespaced");
    assert_eq!(crds[1].spec.scope, "Cluster");
    let columns: Vec<_> = crds[0].spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert!(
        columns.contains(&("Workloads", ".status.workloadCount")),
        "{columns:?}"
    );
}

#[test]
fn cluster_role_grants_what_the_gang_controller_needs() {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(RBAC).expect("valid YAML");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "pdb-operator")
        .expect("ClusterRole pdb-operator");
    let grants = |group: &str, resource: &str, verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            let has = |field: &str, v: &str| r[field].as_array().unwrap().iter().any(|x| x == v);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for (g, r, v) in [
        ("scheduling.k8s.io", "workloads", "watch"),
        ("scheduling.k8s.io", "podgroups", "list"),
        ("scheduling.k8s.io", "workloads/finalizers", "update"),
        ("", "pods", "watch"),
        ("policy", "poddisruptionbudgets", "patch"),
        ("policy", "poddisruptionbudgets", "delete"),
        ("events.k8s.io", "events", "create"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets", "watch"),
        ("availability.pdboperator.io", "pdbpolicies/status", "patch"),
        ("availability.pdboperator.io", "clusterpdbpolicies", "list"),
    ] {
        assert!(grants(g, r, v), "ClusterRole lacks {v} on {g}/{r}");
    }
}

#[test]
fn admission_policy_guards_namespaced_policies_and_is_bound() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(ADMISSION_POLICY).expect("valid YAML");
    assert_eq!(
        docs.len(),
        4,
        "the namespace-reach policy and its binding, then the warnings policy and its binding"
    );
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(docs[0].clone()).unwrap();
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(docs[1].clone()).unwrap();
    let spec = policy.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["availability.pdboperator.io".to_string()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["pdbpolicies".to_string()][..]),
        "only the namespaced kind; a ClusterPDBPolicy may list any namespace"
    );
    assert_eq!(
        rules[0].operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
    );
    let message = spec.validations.unwrap()[0]
        .message_expression
        .clone()
        .unwrap();
    assert!(message.contains("use a ClusterPDBPolicy"), "{message}");
    let bspec = binding.spec;
    assert_eq!(Some(bspec.policy_name), policy.metadata.name);
    assert_eq!(bspec.validation_actions, ["Deny"]);
}

#[test]
fn the_deployment_runs_the_image_this_project_builds() {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(include_str!("../deploy/deployment.yaml")).expect("valid YAML");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("localhost/pdb-operator:{}", env!("CARGO_PKG_VERSION")),
        "deploy/deployment.yaml must name the image scripts/build-images.sh builds (Cargo version)"
    );
}

/// The Warn-only admission policy tells users exactly what the controller's validation warns
/// about; a sentence changed in one place only would fail here.
#[test]
fn admission_warnings_carry_the_validation_sentences() {
    use pdb_operator::validation::{
        CHANGED_CLASS_WARNING, DELETE_WARNING, PolicyScope, update_warnings, validate_policy_spec,
    };
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(ADMISSION_POLICY).expect("valid YAML");
    let warnings = docs
        .iter()
        .find(|d| {
            d["kind"] == "ValidatingAdmissionPolicy"
                && d["metadata"]["name"] == "pdb-operator-policy-warnings"
        })
        .expect("ValidatingAdmissionPolicy pdb-operator-policy-warnings");
    let messages: Vec<&str> = warnings["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["message"].as_str())
        .collect();
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "ValidatingAdmissionPolicyBinding"
                && d["spec"]["policyName"] == "pdb-operator-policy-warnings"
        })
        .expect("its binding");
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Warn"])
    );
    let spec = |v: serde_json::Value| -> pdb_operator::crd::PDBPolicySpec {
        serde_json::from_value(v).unwrap()
    };
    let base = serde_json::json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"app": "a"}}});
    let mut produced = validate_policy_spec(&spec(base.clone()), &PolicyScope::Cluster).warnings;
    let mut flexible = base.clone();
    flexible["enforcement"] = "flexible".into();
    flexible["enforceMinReplicas"] = false.into();
    produced.extend(
        validate_policy_spec(
            &spec(flexible.clone()),
            &PolicyScope::Namespaced("d".into()),
        )
        .warnings,
    );
    produced.extend(update_warnings(&spec(base), &spec(flexible)));
    assert_eq!(produced.len(), 4, "{produced:?}");
    produced.push(DELETE_WARNING.to_string());
    assert!(produced.contains(&CHANGED_CLASS_WARNING.to_string()));
    for w in &produced {
        assert!(
            messages.contains(&w.as_str()),
            "{w:?} is not in {messages:?}"
        );
    }
    assert_eq!(
        messages.len(),
        produced.len(),
        "a warning only the YAML knows: {messages:?}"
    );
}
