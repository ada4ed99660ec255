//! Which policy applies to a workload: matching on the workload object's labels and
//! pdboperator.io annotations, namespace reach, priority and a deterministic tie-break (note §4).

use std::collections::BTreeMap;

use crate::class::WorkloadFunction;
use crate::crd::{
    ClusterPDBPolicy, PDBPolicy, PDBPolicySpec, SelectorOperator, WorkloadSelectorRequirement,
};
use crate::names::keys;
use crate::validation::{PolicyScope, validate_policy_spec};

/// The parts of a workload object (any kind) that policy resolution reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadMeta {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl WorkloadMeta {
    /// Non-empty annotation value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// `pdboperator.io/workload-name` if set, else the object name.
    pub fn effective_name(&self) -> &str {
        self.annotation(keys::WORKLOAD_NAME).unwrap_or(&self.name)
    }

    /// Function used for `workloadFunctions` matching: the annotation if valid, else core
    /// (never name inference).
    pub fn annotated_function(&self) -> WorkloadFunction {
        self.annotation(keys::WORKLOAD_FUNCTION)
            .and_then(|f| f.parse().ok())
            .unwrap_or(WorkloadFunction::Core)
    }
}

/// A policy of either kind, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyRef<'a> {
    /// Namespace for a PDBPolicy, `None` for a ClusterPDBPolicy.
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub spec: &'a PDBPolicySpec,
}

impl<'a> PolicyRef<'a> {
    pub fn scope(&self) -> PolicyScope {
        match self.namespace {
            Some(ns) => PolicyScope::Namespaced(ns.to_string()),
            None => PolicyScope::Cluster,
        }
    }

    /// `namespace/name` for a PDBPolicy, `name` for a ClusterPDBPolicy.
    pub fn key(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.to_string(),
        }
    }

    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            "PDBPolicy"
        } else {
            "ClusterPDBPolicy"
        }
    }
}

/// Borrows both kinds into one candidate list.
pub fn policy_refs<'a>(
    namespaced: &'a [PDBPolicy],
    cluster: &'a [ClusterPDBPolicy],
) -> Vec<PolicyRef<'a>> {
    let mut out: Vec<PolicyRef<'a>> = namespaced
        .iter()
        .map(|p| PolicyRef {
            namespace: Some(p.metadata.namespace.as_deref().unwrap_or("default")),
            name: p.metadata.name.as_deref().unwrap_or(""),
            spec: &p.spec,
        })
        .collect();
    out.extend(cluster.iter().map(|p| PolicyRef {
        namespace: None,
        name: p.metadata.name.as_deref().unwrap_or(""),
        spec: &p.spec.0,
    }));
    out
}

fn requirement_holds(req: &WorkloadSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    match req.operator {
        SelectorOperator::In => value.is_some_and(|v| req.values.contains(v)),
        SelectorOperator::NotIn => value.is_none_or(|v| !req.values.contains(v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
    }
}

/// Whether `policy` selects `w`. Every non-empty criterion must hold. A PDBPolicy reaches only
/// its own namespace unless `legacy_cross_namespace` restores the reference semantics.
pub fn policy_matches(
    policy: &PolicyRef<'_>,
    w: &WorkloadMeta,
    legacy_cross_namespace: bool,
) -> bool {
    let sel = &policy.spec.workload_selector;
    let in_reach = match policy.namespace {
        Some(own) if !legacy_cross_namespace => own == w.namespace,
        _ => true,
    };
    in_reach
        && (sel.namespaces.is_empty() || sel.namespaces.contains(&w.namespace))
        && (sel.workload_names.is_empty()
            || sel.workload_names.iter().any(|n| n == w.effective_name()))
        && (sel.workload_functions.is_empty()
            || sel.workload_functions.contains(&w.annotated_function()))
        && sel
            .match_labels
            .iter()
            .all(|(k, v)| w.labels.get(k) == Some(v))
        && sel
            .match_expressions
            .iter()
            .all(|r| requirement_holds(r, &w.labels))
        && !(sel.match_labels.is_empty()
            && sel.match_expressions.is_empty()
            && sel.workload_names.is_empty()
            && sel.workload_functions.is_empty())
}

/// Outcome of choosing among matching policies.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyChoice<'a> {
    pub winner: Option<PolicyRef<'a>>,
    /// Valid policies that matched, in the order they were ranked (winner first).
    pub matched: Vec<PolicyRef<'a>>,
    /// Set when several policies share the top priority; text of the `PolicyConflict` event.
    pub tie_break: Option<String>,
}

/// Picks the winner: highest priority; at equal top priority a PDBPolicy beats a
/// ClusterPDBPolicy, then the smallest key. Invalid policies never take part.
pub fn choose_policy<'a>(
    candidates: &[PolicyRef<'a>],
    w: &WorkloadMeta,
    legacy_cross_namespace: bool,
) -> PolicyChoice<'a> {
    let mut matched: Vec<PolicyRef<'a>> = candidates
        .iter()
        .copied()
        .filter(|p| validate_policy_spec(p.spec, &p.scope()).is_valid())
        .filter(|p| policy_matches(p, w, legacy_cross_namespace))
        .collect();
    matched.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then(a.namespace.is_none().cmp(&b.namespace.is_none()))
            .then_with(|| a.key().cmp(&b.key()))
    });
    let winner = matched.first().copied();
    let tie_break = winner.and_then(|top| {
        let tied = matched.iter().filter(|p| p.spec.priority == top.spec.priority).count();
        (tied > 1).then(|| {
            format!(
                "Multiple policies ({tied}) match at priority {}, selected {} via alphabetical tie-break",
                top.spec.priority,
                top.key()
            )
        })
    });
    PolicyChoice {
        winner,
        matched,
        tie_break,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PDBPolicySpec {
        serde_json::from_value(v).unwrap()
    }

    fn meta(
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> WorkloadMeta {
        WorkloadMeta {
            namespace: ns.into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn matches(selector: serde_json::Value, w: &WorkloadMeta) -> bool {
        let s = spec(json!({"availabilityClass": "standard", "workloadSelector": selector}));
        let p = PolicyRef {
            namespace: Some("default"),
            name: "p",
            spec: &s,
        };
        policy_matches(&p, w, false)
    }

    // Scenario 28 and the criteria of note §4.
    #[rstest]
    #[case::labels(json!({"matchLabels": {"tier": "frontend"}}), &[("tier", "frontend")], true)]
    #[case::labels_wrong_value(json!({"matchLabels": {"tier": "frontend"}}), &[("tier", "backend")], false)]
    #[case::in_listed(json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}), &[("env", "prod")], true)]
    #[case::in_absent(json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}), &[], false)]
    #[case::notin_absent(json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}), &[], true)]
    #[case::notin_listed(json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}), &[("env", "dev")], false)]
    #[case::exists(json!({"matchExpressions": [{"key": "env", "operator": "Exists"}]}), &[("env", "x")], true)]
    #[case::does_not_exist(json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}), &[("env", "x")], false)]
    #[case::anded(json!({"matchLabels": {"tier": "frontend"}, "matchExpressions": [{"key": "env", "operator": "Exists"}]}), &[("tier", "frontend")], false)]
    #[case::namespaces_only_never_matches(json!({"namespaces": ["default"]}), &[], false)]
    fn label_criteria(
        #[case] selector: serde_json::Value,
        #[case] labels: &[(&str, &str)],
        #[case] want: bool,
    ) {
        assert_eq!(
            matches(selector, &meta("default", "web", labels, &[])),
            want
        );
    }

    #[test]
    fn workload_names_use_the_annotation() {
        let w = meta(
            "default",
            "web-7",
            &[],
            &[(keys::WORKLOAD_NAME, "webapp-component")],
        );
        assert!(matches(json!({"workloadNames": ["webapp-component"]}), &w));
        assert!(!matches(json!({"workloadNames": ["web-7"]}), &w));
    }

    #[test]
    fn workload_functions_never_use_name_inference() {
        // Scenario 27: auth-svc without the annotation is `core` for matching.
        let w = meta("default", "auth-svc", &[], &[]);
        assert!(!matches(json!({"workloadFunctions": ["security"]}), &w));
        let annotated = meta(
            "default",
            "auth-svc",
            &[],
            &[(keys::WORKLOAD_FUNCTION, "security")],
        );
        assert!(matches(
            json!({"workloadFunctions": ["security"]}),
            &annotated
        ));
    }

    #[test]
    fn namespaced_policy_stays_in_its_namespace() {
        // Scenario 24.
        let s = spec(
            json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let ns_policy = PolicyRef {
            namespace: Some("team-a"),
            name: "p",
            spec: &s,
        };
        let cluster_policy = PolicyRef {
            namespace: None,
            name: "p",
            spec: &s,
        };
        let w = meta("team-b", "a", &[("app", "a")], &[]);
        assert!(!policy_matches(&ns_policy, &w, false));
        assert!(
            policy_matches(&ns_policy, &w, true),
            "legacy flag restores cross-namespace reach"
        );
        assert!(policy_matches(&cluster_policy, &w, false));
    }

    #[test]
    fn highest_priority_wins() {
        let low = spec(
            json!({"availabilityClass": "non-critical", "priority": 10, "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let high = spec(
            json!({"availabilityClass": "mission-critical", "priority": 100, "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let c = [
            PolicyRef {
                namespace: Some("default"),
                name: "low",
                spec: &low,
            },
            PolicyRef {
                namespace: Some("default"),
                name: "high",
                spec: &high,
            },
        ];
        let choice = choose_policy(&c, &meta("default", "a", &[("app", "a")], &[]), false);
        assert_eq!(choice.winner.unwrap().name, "high");
        assert_eq!(choice.matched.len(), 2);
        assert_eq!(choice.tie_break, None);
    }

    #[test]
    fn tie_break_is_alphabetical_and_reported() {
        // Scenario 17.
        let b = spec(
            json!({"availabilityClass": "mission-critical", "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let a = spec(
            json!({"availabilityClass": "non-critical", "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let c = [
            PolicyRef {
                namespace: Some("default"),
                name: "b-policy",
                spec: &b,
            },
            PolicyRef {
                namespace: Some("default"),
                name: "a-policy",
                spec: &a,
            },
        ];
        let choice = choose_policy(&c, &meta("default", "a", &[("app", "a")], &[]), false);
        assert_eq!(choice.winner.unwrap().name, "a-policy");
        assert_eq!(
            choice.tie_break.as_deref(),
            Some(
                "Multiple policies (2) match at priority 50, selected default/a-policy via alphabetical tie-break"
            )
        );
    }

    #[test]
    fn namespaced_beats_cluster_at_equal_priority() {
        let s = spec(
            json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let c = [
            PolicyRef {
                namespace: None,
                name: "aaa",
                spec: &s,
            },
            PolicyRef {
                namespace: Some("default"),
                name: "zzz",
                spec: &s,
            },
        ];
        let choice = choose_policy(&c, &meta("default", "a", &[("app", "a")], &[]), false);
        assert_eq!(choice.winner.unwrap().key(), "default/zzz");
    }

    #[test]
    fn invalid_policies_do_not_take_part() {
        let bad = spec(
            json!({"availabilityClass": "custom", "priority": 999, "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let good = spec(
            json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"app": "a"}}}),
        );
        let c = [
            PolicyRef {
                namespace: Some("default"),
                name: "bad",
                spec: &bad,
            },
            PolicyRef {
                namespace: Some("default"),
                name: "good",
                spec: &good,
            },
        ];
        let choice = choose_policy(&c, &meta("default", "a", &[("app", "a")], &[]), false);
        assert_eq!(choice.winner.unwrap().name, "good");
    }
}
