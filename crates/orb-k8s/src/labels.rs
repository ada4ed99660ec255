//! orb's identifying labels, all derived from one `label_prefix`, and the merge with template
//! labels in which orb's keys always win.
//!
//! Identity lives in these labels, not in names: the reconciler, orphan GC, cancel and the
//! HostFactory adapter select by them, so a template must never be able to change them.

use std::collections::BTreeMap;

use orb_core::ProviderApi;

use crate::validation;

/// Legacy request-id label for coexistence with the `orb.k8s_legacy` watcher.
pub const LEGACY_REQUEST_ID_LABEL: &str = "symphony/open-resource-broker-reqid";

/// The label keys under one prefix (`orb.io` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelKeys {
    prefix: String,
}

impl LabelKeys {
    pub fn new(label_prefix: &str) -> Self {
        Self {
            prefix: label_prefix.to_string(),
        }
    }
    pub fn managed(&self) -> String {
        format!("{}/managed", self.prefix)
    }
    pub fn request_id(&self) -> String {
        format!("{}/request-id", self.prefix)
    }
    pub fn machine_id(&self) -> String {
        format!("{}/machine-id", self.prefix)
    }
    pub fn provider_api(&self) -> String {
        format!("{}/provider-api", self.prefix)
    }
    pub fn template_id(&self) -> String {
        format!("{}/template-id", self.prefix)
    }

    /// Every key orb may stamp; templates can set none of them.
    pub fn reserved(&self) -> [String; 6] {
        [
            self.managed(),
            self.request_id(),
            self.machine_id(),
            self.provider_api(),
            self.template_id(),
            LEGACY_REQUEST_ID_LABEL.to_string(),
        ]
    }

    /// Selector string for everything orb manages: `<prefix>/managed=true`.
    pub fn managed_selector(&self) -> String {
        format!("{}=true", self.managed())
    }

    /// Selector string for one request's objects.
    pub fn request_selector(&self, request_id: &str) -> String {
        format!(
            "{},{}={request_id}",
            self.managed_selector(),
            self.request_id()
        )
    }

    /// `matchLabels` of a Deployment/StatefulSet/Job created for a request.
    pub fn controller_selector(
        &self,
        request_id: &str,
        kind: ProviderApi,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (self.request_id(), request_id.to_string()),
            (self.provider_api(), kind.as_str().to_string()),
        ])
    }
}

/// What orb knows about the object being labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrbLabelValues<'a> {
    pub request_id: &'a str,
    /// Set for pods orb names itself (bare pods); controllers' pods get theirs from status.
    pub machine_id: Option<&'a str>,
    pub provider_api: ProviderApi,
    pub template_id: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label {key}={value:?} is invalid: {problems}; {fix}")]
pub struct LabelError {
    pub key: String,
    pub value: String,
    pub problems: String,
    pub fix: String,
}

fn check_value(key: &str, value: &str, fix: &str) -> Result<(), LabelError> {
    let problems = validation::label_value_problems(value);
    if problems.is_empty() {
        return Ok(());
    }
    Err(LabelError {
        key: key.to_string(),
        value: value.to_string(),
        problems: format!("the value {}", problems.join(" and ")),
        fix: fix.to_string(),
    })
}

/// orb's labels for one object. Fails (before anything is created) when an id cannot be a
/// label value, e.g. a template id with spaces or longer than 63 characters.
pub fn orb_labels(
    label_prefix: &str,
    emit_legacy_labels: bool,
    values: &OrbLabelValues<'_>,
) -> Result<BTreeMap<String, String>, LabelError> {
    let keys = LabelKeys::new(label_prefix);
    let mut labels = BTreeMap::new();
    labels.insert(keys.managed(), "true".to_string());
    check_value(
        &keys.request_id(),
        values.request_id,
        "request ids must be label-safe",
    )?;
    labels.insert(keys.request_id(), values.request_id.to_string());
    if let Some(machine_id) = values.machine_id {
        check_value(
            &keys.machine_id(),
            machine_id,
            "machine ids are pod names and must be label-safe",
        )?;
        labels.insert(keys.machine_id(), machine_id.to_string());
    }
    labels.insert(
        keys.provider_api(),
        values.provider_api.as_str().to_string(),
    );
    if let Some(template_id) = values.template_id {
        check_value(
            &keys.template_id(),
            template_id,
            "rename the template to at most 63 letters, digits, '-', '_' or '.'",
        )?;
        labels.insert(keys.template_id(), template_id.to_string());
    }
    if emit_legacy_labels {
        labels.insert(
            LEGACY_REQUEST_ID_LABEL.to_string(),
            values.request_id.to_string(),
        );
    }
    Ok(labels)
}

/// Template labels merged under orb's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedLabels {
    pub labels: BTreeMap<String, String>,
    /// Template keys dropped because orb reserves them (worth a warning to the operator).
    pub ignored_template_keys: Vec<String>,
}

/// Merges `template` labels with orb's. Any reserved key (see [`LabelKeys::reserved`]) in the
/// template is dropped, even the legacy key when orb does not emit it, so a template can never
/// impersonate another request.
pub fn merge_labels(
    label_prefix: &str,
    template: &BTreeMap<String, String>,
    orb: &BTreeMap<String, String>,
) -> MergedLabels {
    let reserved = LabelKeys::new(label_prefix).reserved();
    let mut labels = BTreeMap::new();
    let mut ignored_template_keys = Vec::new();
    for (key, value) in template {
        if reserved.contains(key) || orb.contains_key(key) {
            ignored_template_keys.push(key.clone());
        } else {
            labels.insert(key.clone(), value.clone());
        }
    }
    labels.extend(orb.iter().map(|(k, v)| (k.clone(), v.clone())));
    MergedLabels {
        labels,
        ignored_template_keys,
    }
}

/// Checks a template's labels (key and value syntax), returning every problem.
pub fn validate_template_labels(template: &BTreeMap<String, String>) -> Vec<LabelError> {
    let mut errors = Vec::new();
    for (key, value) in template {
        let key_problems = validation::qualified_name_problems(key);
        if !key_problems.is_empty() {
            errors.push(LabelError {
                key: key.clone(),
                value: value.clone(),
                problems: format!("the key {}", key_problems.join(" and ")),
                fix: "use a key like \"team\" or \"example.com/team\"".into(),
            });
        }
        if let Err(err) = check_value(
            key,
            value,
            "use at most 63 letters, digits, '-', '_' or '.'",
        ) {
            errors.push(err);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

    fn values(template_id: Option<&'static str>) -> OrbLabelValues<'static> {
        OrbLabelValues {
            request_id: REQ,
            machine_id: Some("orb-fe4cda5c019444bc981b-0000"),
            provider_api: ProviderApi::Pod,
            template_id,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn default_labels_match_the_seed() {
        let labels = orb_labels("orb.io", true, &values(Some("tpl-1"))).unwrap();
        assert_eq!(
            labels,
            map(&[
                ("orb.io/managed", "true"),
                ("orb.io/request-id", REQ),
                ("orb.io/machine-id", "orb-fe4cda5c019444bc981b-0000"),
                ("orb.io/provider-api", "Pod"),
                ("orb.io/template-id", "tpl-1"),
                ("symphony/open-resource-broker-reqid", REQ),
            ])
        );
    }

    #[test]
    fn custom_prefix_applies_to_every_key_and_legacy_can_be_switched_off() {
        let labels = orb_labels("orb.example.com", false, &values(None)).unwrap();
        assert!(
            labels.keys().all(|k| k.starts_with("orb.example.com/")),
            "{labels:?}"
        );
        assert!(!labels.contains_key(LEGACY_REQUEST_ID_LABEL));
        assert_eq!(labels["orb.example.com/provider-api"], "Pod");
    }

    #[test]
    fn template_id_that_is_not_a_label_value_is_refused_with_a_fix() {
        let err = orb_labels("orb.io", true, &values(Some("my template"))).unwrap_err();
        assert_eq!(err.key, "orb.io/template-id");
        assert!(err.to_string().contains("rename the template"), "{err}");
    }

    #[test]
    fn template_labels_can_never_override_orbs() {
        let orb = orb_labels("orb.io", false, &values(Some("tpl-1"))).unwrap();
        let template = map(&[
            ("team", "hpc"),
            ("orb.io/request-id", "req-someone-else"),
            ("orb.io/managed", "false"),
            ("symphony/open-resource-broker-reqid", "req-someone-else"),
        ]);
        let merged = merge_labels("orb.io", &template, &orb);
        assert_eq!(merged.labels["orb.io/request-id"], REQ);
        assert_eq!(merged.labels["orb.io/managed"], "true");
        assert_eq!(merged.labels["team"], "hpc");
        assert!(!merged.labels.contains_key(LEGACY_REQUEST_ID_LABEL));
        assert_eq!(
            merged.ignored_template_keys,
            vec![
                "orb.io/managed",
                "orb.io/request-id",
                "symphony/open-resource-broker-reqid"
            ]
        );
    }

    #[test]
    fn selectors_use_the_configured_prefix() {
        let keys = LabelKeys::new("orb.example.com");
        assert_eq!(keys.managed_selector(), "orb.example.com/managed=true");
        assert_eq!(
            keys.request_selector("req-1"),
            "orb.example.com/managed=true,orb.example.com/request-id=req-1"
        );
        assert_eq!(
            keys.controller_selector("req-1", ProviderApi::Deployment),
            map(&[
                ("orb.example.com/provider-api", "Deployment"),
                ("orb.example.com/request-id", "req-1")
            ])
        );
    }

    #[test]
    fn template_label_validation_reports_key_and_value_problems() {
        let errors = validate_template_labels(&map(&[("bad key", "ok"), ("team", "has space")]));
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].key, "bad key");
        assert_eq!(errors[1].value, "has space");
    }
}
