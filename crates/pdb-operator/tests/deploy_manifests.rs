//! The checked-in manifests must match what the code generates and what the controllers need.

use std::collections::BTreeSet;

use pdb_operator::crd::crds_yaml;
use pdb_operator::rbac;

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

/// The (group, resource, verb) entries of a list of RBAC rules.
fn rule_entries(rules: &serde_json::Value) -> BTreeSet<rbac::RuleEntry> {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in rules.as_array().expect("rules") {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    out.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    out
}

/// The `rules:` of the first object of a chart template (the lines from `rules:` on are plain
/// YAML, up to the next object).
fn chart_rules(template: &str) -> BTreeSet<rbac::RuleEntry> {
    let first = template.split("\n---").next().unwrap();
    let rules = &first[first.find("\nrules:").expect("rules:")..];
    let rules = rules
        .lines()
        .take_while(|l| !l.starts_with("{{"))
        .collect::<Vec<_>>();
    let doc: serde_json::Value = serde_saphyr::from_str(&rules.join("\n")).expect("valid YAML");
    rule_entries(&doc["rules"])
}

// Issue #52: the shipped RBAC grants exactly what the operator calls (src/rbac.rs), no more.
#[test]
fn shipped_rbac_is_exactly_the_operators_table() {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(RBAC).expect("valid YAML");
    let rules = |kind: &str, name: &str| {
        let d = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} in deploy/rbac.yaml"));
        rule_entries(&d["rules"])
    };
    let cluster = rbac::entries(rbac::CLUSTER_GRANTS);
    let lease = rbac::entries(rbac::LEASE_GRANTS);
    assert_eq!(
        rules("ClusterRole", "pdb-operator"),
        cluster,
        "deploy/rbac.yaml"
    );
    assert_eq!(
        rules("Role", "pdb-operator-leader-election"),
        lease,
        "deploy/rbac.yaml"
    );
    let chart = "deploy/helm/pdb-operator/templates";
    assert_eq!(
        chart_rules(include_str!(
            "../deploy/helm/pdb-operator/templates/clusterrole.yaml"
        )),
        cluster,
        "{chart}/clusterrole.yaml"
    );
    assert_eq!(
        chart_rules(include_str!(
            "../deploy/helm/pdb-operator/templates/leader-election-role.yaml"
        )),
        lease,
        "{chart}/leader-election-role.yaml"
    );
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
