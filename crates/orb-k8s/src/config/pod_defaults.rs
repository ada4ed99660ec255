//! Provider-level pod defaults combined with a template's own values. Template values always
//! win; defaults only fill what the template leaves open:
//! - `default_node_selector` is merged key by key (the template's value wins per key);
//! - `default_tolerations` are appended after the template's, except a default whose
//!   (key, effect) the template already tolerates;
//! - `default_image_pull_secret` is used only when the template names no pull secret.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LocalObjectReference, Toleration};

use super::model::K8sProviderConfig;

/// The placement-related pod fields of a template, before or after defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodPlacement {
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    /// Names of image pull Secrets.
    pub image_pull_secrets: Option<Vec<String>>,
}

impl PodPlacement {
    /// `spec.imagePullSecrets` in Kubernetes form.
    pub fn image_pull_secret_refs(&self) -> Option<Vec<LocalObjectReference>> {
        self.image_pull_secrets.as_ref().map(|names| {
            names
                .iter()
                .map(|name| LocalObjectReference { name: name.clone() })
                .collect()
        })
    }
}

pub fn merge_node_selector(
    provider_default: Option<&BTreeMap<String, String>>,
    template: Option<&BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    match (provider_default, template) {
        (None, None) => None,
        (defaults, template) => {
            let mut merged = defaults.cloned().unwrap_or_default();
            merged.extend(template.cloned().unwrap_or_default());
            Some(merged)
        }
    }
}

fn tolerates_same_taint(a: &Toleration, b: &Toleration) -> bool {
    a.key.as_deref().unwrap_or("") == b.key.as_deref().unwrap_or("")
        && a.effect.as_deref().unwrap_or("") == b.effect.as_deref().unwrap_or("")
}

pub fn merge_tolerations(
    provider_default: Option<&[Toleration]>,
    template: Option<&[Toleration]>,
) -> Option<Vec<Toleration>> {
    match (provider_default, template) {
        (None, None) => None,
        (defaults, template) => {
            let mut merged: Vec<Toleration> = template.map(<[_]>::to_vec).unwrap_or_default();
            for default in defaults.unwrap_or_default() {
                if !merged.iter().any(|t| tolerates_same_taint(t, default)) {
                    merged.push(default.clone());
                }
            }
            Some(merged)
        }
    }
}

pub fn merge_image_pull_secrets(
    provider_default: Option<&str>,
    template: Option<&[String]>,
) -> Option<Vec<String>> {
    match template {
        Some(names) if !names.is_empty() => Some(names.to_vec()),
        _ => provider_default.map(|name| vec![name.to_string()]),
    }
}

/// Applies every provider pod default of `cfg` to a template's placement fields.
pub fn apply_pod_defaults(cfg: &K8sProviderConfig, template: &PodPlacement) -> PodPlacement {
    PodPlacement {
        node_selector: merge_node_selector(
            cfg.default_node_selector.as_ref(),
            template.node_selector.as_ref(),
        ),
        tolerations: merge_tolerations(
            cfg.default_tolerations.as_deref(),
            template.tolerations.as_deref(),
        ),
        image_pull_secrets: merge_image_pull_secrets(
            cfg.default_image_pull_secret.as_deref(),
            template.image_pull_secrets.as_deref(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn tol(key: &str, effect: &str, value: Option<&str>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            effect: Some(effect.into()),
            operator: Some(if value.is_some() { "Equal" } else { "Exists" }.into()),
            value: value.map(str::to_string),
            ..Toleration::default()
        }
    }

    #[rstest]
    #[case::neither(None, None, None)]
    #[case::defaults_only(Some(map(&[("workload", "orb")])), None, Some(map(&[("workload", "orb")])))]
    #[case::template_only(None, Some(map(&[("gpu", "a100")])), Some(map(&[("gpu", "a100")])))]
    #[case::merged(Some(map(&[("workload", "orb")])), Some(map(&[("gpu", "a100")])),
        Some(map(&[("workload", "orb"), ("gpu", "a100")])))]
    #[case::template_wins_per_key(Some(map(&[("workload", "orb"), ("zone", "a")])), Some(map(&[("workload", "batch")])),
        Some(map(&[("workload", "batch"), ("zone", "a")])))]
    fn node_selector(
        #[case] defaults: Option<BTreeMap<String, String>>,
        #[case] template: Option<BTreeMap<String, String>>,
        #[case] expected: Option<BTreeMap<String, String>>,
    ) {
        assert_eq!(
            merge_node_selector(defaults.as_ref(), template.as_ref()),
            expected
        );
    }

    #[test]
    fn default_tolerations_are_appended_after_the_templates() {
        let merged = merge_tolerations(
            Some(&[tol("orb", "NoSchedule", None)]),
            Some(&[tol("gpu", "NoSchedule", None)]),
        )
        .unwrap();
        assert_eq!(
            merged,
            vec![
                tol("gpu", "NoSchedule", None),
                tol("orb", "NoSchedule", None)
            ]
        );
    }

    #[test]
    fn a_template_toleration_for_the_same_taint_replaces_the_default() {
        let merged = merge_tolerations(
            Some(&[
                tol("orb", "NoSchedule", None),
                tol("spot", "NoExecute", None),
            ]),
            Some(&[tol("orb", "NoSchedule", Some("batch"))]),
        )
        .unwrap();
        assert_eq!(
            merged,
            vec![
                tol("orb", "NoSchedule", Some("batch")),
                tol("spot", "NoExecute", None)
            ]
        );
    }

    #[rstest]
    #[case::default_used_when_template_has_none(Some("orb-registry"), None, Some(vec!["orb-registry"]))]
    #[case::default_used_when_template_list_empty(Some("orb-registry"), Some(vec![]), Some(vec!["orb-registry"]))]
    #[case::template_wins(Some("orb-registry"), Some(vec!["team-registry"]), Some(vec!["team-registry"]))]
    #[case::nothing(None, None, None)]
    fn image_pull_secret(
        #[case] default: Option<&str>,
        #[case] template: Option<Vec<&str>>,
        #[case] expected: Option<Vec<&str>>,
    ) {
        let template: Option<Vec<String>> =
            template.map(|v| v.into_iter().map(str::to_string).collect());
        let expected: Option<Vec<String>> =
            expected.map(|v| v.into_iter().map(str::to_string).collect());
        assert_eq!(
            merge_image_pull_secrets(default, template.as_deref()),
            expected
        );
    }

    #[test]
    fn apply_pod_defaults_combines_all_three_rules() {
        let cfg = K8sProviderConfig {
            default_node_selector: Some(map(&[("workload", "orb")])),
            default_tolerations: Some(vec![tol("orb", "NoSchedule", None)]),
            default_image_pull_secret: Some("orb-registry".into()),
            ..K8sProviderConfig::default()
        };
        let placed = apply_pod_defaults(&cfg, &PodPlacement::default());
        assert_eq!(placed.node_selector, Some(map(&[("workload", "orb")])));
        assert_eq!(
            placed.tolerations,
            Some(vec![tol("orb", "NoSchedule", None)])
        );
        assert_eq!(
            placed.image_pull_secret_refs(),
            Some(vec![LocalObjectReference {
                name: "orb-registry".into()
            }])
        );
    }
}
