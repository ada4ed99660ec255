//! HostFactory camelCase ↔ orb snake_case for templates, plus the lenient value shapes
//! HostFactory files use (`instanceTags` as `"k=v;k=v"` or an object, env as a list or a map,
//! `imagePullSecret` as one string).
//!
//! Only top-level keys are renamed: nested objects (labels, node selectors, pod spec
//! overrides) are Kubernetes data and keep their spelling.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{EnvVar, Template, TemplateError};

/// HostFactory or legacy key → internal key, for names that camel→snake alone would not map.
/// The bool marks legacy names that still load but deserve a warning.
const KEY_ALIASES: &[(&str, &str, bool)] = &[
    ("templateId", "template_id", false),
    ("maxNumber", "max_machines", false),
    ("max_number", "max_machines", false),
    ("max_instances", "max_machines", true),
    ("imageId", "container_image", false),
    ("image_id", "container_image", true),
    ("machine_image", "container_image", false),
    ("machineImage", "container_image", false),
    ("instanceTags", "tags", false),
    ("instance_tags", "tags", false),
    ("imagePullSecret", "image_pull_secrets", false),
    ("image_pull_secret", "image_pull_secrets", false),
    ("env", "environment_variables", false),
    ("environment", "environment_variables", false),
    ("runtimeClassName", "runtime_class", false),
    ("serviceAccountName", "service_account", false),
];

/// Internal key → HostFactory key where the generic snake→camel rule is not the HF name.
const HF_NAMES: &[(&str, &str)] = &[
    ("max_machines", "maxNumber"),
    ("container_image", "imageId"),
    ("tags", "instanceTags"),
    ("environment_variables", "env"),
];

/// A parsed template plus the warnings its spelling produced (legacy names, duplicates).
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedTemplate {
    pub template: Template,
    pub warnings: Vec<String>,
}

pub fn camel_to_snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

pub fn snake_to_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper_next = false;
    for c in key.chars() {
        if c == '_' && !out.is_empty() {
            upper_next = true;
        } else if upper_next {
            out.push(c.to_ascii_uppercase());
            upper_next = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The internal name for a key as written in a template file, and whether it is legacy.
pub fn internal_key(key: &str) -> (String, bool) {
    if let Some((_, internal, legacy)) = KEY_ALIASES.iter().find(|(k, _, _)| *k == key) {
        return ((*internal).to_string(), *legacy);
    }
    if key.starts_with('_') {
        return (key.to_string(), false);
    }
    (camel_to_snake(key), false)
}

pub fn hostfactory_key(internal: &str) -> String {
    HF_NAMES
        .iter()
        .find(|(k, _)| *k == internal)
        .map(|(_, hf)| (*hf).to_string())
        .unwrap_or_else(|| snake_to_camel(internal))
}

/// Renames the top-level keys of one template object to internal names. When a canonical key
/// and an alias of it are both present, the canonical spelling wins.
pub fn normalize_keys(
    object: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut from_alias: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in object {
        let (internal, legacy) = internal_key(key);
        let canonical = internal == *key || hostfactory_key(&internal) == *key;
        if legacy {
            warnings.push(format!(
                "key {key:?} is a legacy name; write {:?} (HostFactory) or {internal:?} instead",
                hostfactory_key(&internal)
            ));
        }
        match (out.contains_key(&internal), canonical) {
            (false, _) => {
                if !canonical {
                    from_alias.insert(internal.clone(), key.clone());
                }
                out.insert(internal, value.clone());
            }
            (true, true) if from_alias.contains_key(&internal) => {
                let alias = from_alias.remove(&internal).unwrap_or_default();
                warnings.push(format!("both {alias:?} and {key:?} are set; using {key:?}"));
                out.insert(internal, value.clone());
            }
            (true, _) => {
                warnings.push(format!(
                    "{key:?} repeats {internal:?}, which is already set; ignoring {key:?}"
                ));
            }
        }
    }
    out
}

/// Parses one template object written in either spelling, layered over `defaults`
/// (provider `template_defaults`; the template's own values win).
pub fn template_from_value(
    value: &Value,
    defaults: Option<&Map<String, Value>>,
    label: &str,
) -> Result<NormalizedTemplate, TemplateError> {
    let Some(object) = value.as_object() else {
        return Err(TemplateError::Malformed {
            label: label.to_string(),
            message: format!("expected a JSON object, got {}", kind_of(value)),
        });
    };
    let mut warnings = Vec::new();
    let mut merged = match defaults {
        Some(defaults) => normalize_keys(defaults, &mut warnings),
        None => Map::new(),
    };
    merged.extend(normalize_keys(object, &mut warnings));
    let label = merged
        .get("template_id")
        .and_then(Value::as_str)
        .map(|id| format!("{id:?}"))
        .unwrap_or_else(|| label.to_string());
    let template: Template =
        serde_json::from_value(Value::Object(merged)).map_err(|e| TemplateError::Malformed {
            label,
            message: e.to_string(),
        })?;
    Ok(NormalizedTemplate { template, warnings })
}

/// The template in HostFactory spelling (camelCase keys, `instanceTags` as `k=v;k=v`).
pub fn template_to_hostfactory(template: &Template) -> Map<String, Value> {
    let internal = serde_json::to_value(template).unwrap_or(Value::Null);
    let mut out = Map::new();
    if let Value::Object(fields) = internal {
        for (key, value) in fields {
            let value = if key == "tags" {
                Value::String(tags_to_string(&template.tags))
            } else {
                value
            };
            let hf_key = if key.starts_with('_') || key.contains('.') {
                key
            } else {
                hostfactory_key(&key)
            };
            out.insert(hf_key, value);
        }
    }
    out
}

pub fn tags_to_string(tags: &BTreeMap<String, String>) -> String {
    // Written into one buffer: HostFactory lists carry thousands of machines, each with its
    // labels as tags, and a `format!` per pair was a twentieth of a status read through the
    // daemon at 5,000 machines.
    let len = tags.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = String::with_capacity(len);
    for (k, v) in tags {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

pub fn parse_tag_string(raw: &str) -> Result<BTreeMap<String, String>, String> {
    let mut tags = BTreeMap::new();
    for pair in raw.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!(
                "instanceTags entry {pair:?} has no '='; write tags as \"key=value;key2=value2\""
            ));
        };
        tags.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(tags)
}

pub(super) fn tags_from_string_or_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::String(s)) => parse_tag_string(&s).map_err(serde::de::Error::custom),
        Some(Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                Value::Number(_) | Value::Bool(_) => Ok((k, v.to_string())),
                other => Err(serde::de::Error::custom(format!(
                    "instanceTags value for {k:?} must be text, got {other}"
                ))),
            })
            .collect(),
        Some(other) => Err(serde::de::Error::custom(format!(
            "instanceTags must be \"k=v;k=v\" or an object, got {}",
            kind_of(&other)
        ))),
    }
}

pub(super) fn env_from_list_or_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<EnvVar>>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(list @ Value::Array(_)) => serde_json::from_value(list)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("env list entries need a name: {e}"))),
        Some(Value::Object(map)) => Ok(Some(
            map.into_iter()
                .map(|(name, v)| EnvVar {
                    name,
                    value: Some(match v {
                        Value::String(s) => s,
                        other => other.to_string(),
                    }),
                    value_from: None,
                })
                .collect(),
        )),
        Some(other) => Err(serde::de::Error::custom(format!(
            "env must be a list of {{name, value}} or a {{name: value}} map, got {}",
            kind_of(&other)
        ))),
    }
}

pub(super) fn strings_from_string_or_list<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s])),
        Some(list @ Value::Array(_)) => serde_json::from_value(list)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(other) => Err(serde::de::Error::custom(format!(
            "expected a secret name or a list of names, got {}",
            kind_of(&other)
        ))),
    }
}

pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{ProviderApi, ResourceSpec};
    use pretty_assertions::assert_eq;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("templateId", "template_id")]
    #[case("maxNumber", "max_machines")]
    #[case("imageId", "container_image")]
    #[case("instanceTags", "tags")]
    #[case("imagePullSecret", "image_pull_secrets")]
    #[case("nodeSelector", "node_selector")]
    #[case("resourceRequests", "resource_requests")]
    #[case("podSpecOverride", "pod_spec_override")]
    #[case("nativeSpecPath", "native_spec_path")]
    #[case("terminationGracePeriodSeconds", "termination_grace_period_seconds")]
    #[case("environment_variables", "environment_variables")]
    #[case("_comment", "_comment")]
    fn keys_map_to_internal_names(#[case] key: &str, #[case] internal: &str) {
        assert_eq!(internal_key(key).0, internal);
    }

    #[rstest]
    #[case("template_id", "templateId")]
    #[case("max_machines", "maxNumber")]
    #[case("container_image", "imageId")]
    #[case("provider_api", "providerApi")]
    #[case("ttl_seconds_after_finished", "ttlSecondsAfterFinished")]
    fn internal_names_map_to_hostfactory_keys(#[case] internal: &str, #[case] hf: &str) {
        assert_eq!(hostfactory_key(internal), hf);
    }

    #[test]
    fn a_hostfactory_template_parses_into_internal_fields() {
        let value = json!({
            "templateId": "worker",
            "maxNumber": 5,
            "imageId": "busybox:1.36",
            "providerApi": "Deployment",
            "instanceTags": "team=hpc;tier=batch",
            "resourceRequests": {"cpu": 2, "memory": "4Gi"},
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "env": {"MODE": "fast"},
            "imagePullSecret": "regcred",
            "vmType": "ignored-but-kept"
        });
        let parsed = template_from_value(&value, None, "#0").unwrap();
        let t = parsed.template;
        assert_eq!(t.template_id, "worker");
        assert_eq!(t.max_machines, Some(5));
        assert_eq!(t.container_image.as_deref(), Some("busybox:1.36"));
        assert_eq!(t.api(), ProviderApi::Deployment);
        assert_eq!(t.tags.get("tier").map(String::as_str), Some("batch"));
        assert_eq!(
            t.resource_requests,
            Some(ResourceSpec {
                cpu: Some("2".into()),
                memory: Some("4Gi".into()),
                ..Default::default()
            })
        );
        assert_eq!(t.image_pull_secrets, Some(vec!["regcred".to_string()]));
        let env = t.environment_variables.unwrap();
        assert_eq!(
            (env[0].name.as_str(), env[0].value.as_deref()),
            ("MODE", Some("fast"))
        );
        assert_eq!(t.extra.get("vm_type"), Some(&json!("ignored-but-kept")));
        assert!(parsed.warnings.is_empty());
    }

    #[test]
    fn snake_case_templates_parse_too() {
        let value = json!({"template_id": "w", "container_image": "img", "provider_api": "Job",
                           "image_pull_secrets": ["a", "b"]});
        let t = template_from_value(&value, None, "#0").unwrap().template;
        assert_eq!(t.api(), ProviderApi::Job);
        assert_eq!(t.image_pull_secrets.unwrap().len(), 2);
    }

    #[test]
    fn legacy_names_load_with_a_warning_and_canonical_names_win() {
        let value =
            json!({"template_id": "w", "image_id": "old", "imageId": "new", "max_instances": 3});
        let parsed = template_from_value(&value, None, "#0").unwrap();
        assert_eq!(parsed.template.container_image.as_deref(), Some("new"));
        assert_eq!(parsed.template.max_machines, Some(3));
        assert!(
            parsed
                .warnings
                .iter()
                .any(|w| w.contains("\"image_id\" is a legacy"))
        );
        assert!(
            parsed
                .warnings
                .iter()
                .any(|w| w.contains("ignoring \"image_id\"")),
            "{:?}",
            parsed.warnings
        );
    }

    #[test]
    fn provider_defaults_fill_gaps_but_never_override() {
        let defaults = json!({"machine_image": "busybox:latest", "provider_api": "Pod", "price_type": "ondemand"});
        let value = json!({"templateId": "w", "providerApi": "StatefulSet"});
        let t = template_from_value(&value, defaults.as_object(), "#0")
            .unwrap()
            .template;
        assert_eq!(t.container_image.as_deref(), Some("busybox:latest"));
        assert_eq!(t.api(), ProviderApi::StatefulSet);
        assert_eq!(t.price_type.as_deref(), Some("ondemand"));
    }

    #[rstest]
    #[case::not_object(json!([1]), "expected a JSON object")]
    #[case::bad_tags(json!({"templateId": "w", "instanceTags": "novalue"}), "has no '='")]
    #[case::bad_api(json!({"templateId": "w", "providerApi": "CronJob"}), "CronJob")]
    #[case::bad_quantity(json!({"templateId": "w", "resourceRequests": {"cpu": [1]}}), "quantity")]
    #[case::no_id(json!({"imageId": "x"}), "template_id")]
    fn malformed_templates_say_what_is_wrong(#[case] value: Value, #[case] needle: &str) {
        let err = template_from_value(&value, None, "#3")
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{err}");
    }

    #[test]
    fn hostfactory_spelling_round_trips() {
        let value = json!({"templateId": "w", "maxNumber": 2, "imageId": "img",
                           "instanceTags": "a=1;b=2", "priceType": "spot", "keyName": "k"});
        let t = template_from_value(&value, None, "#0").unwrap().template;
        let hf = Value::Object(template_to_hostfactory(&t));
        assert_eq!(hf, value);
    }
}
