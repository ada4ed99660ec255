//! The provider settings as a JSON Schema (draft 2020-12), built from the field table and the
//! model's defaults, so `GET /api/v1/providers/{name}/schema` cannot drift from what the
//! provider accepts: a field added to [`FIELDS`] appears here without another edit.

use serde_json::{Map, Value, json};

use super::model::K8sProviderConfig;
use super::schema::{self, ENV_PREFIX, FIELDS, FieldKind, FieldSpec, LEGACY_KEYS};
use super::template_keys::PER_TEMPLATE_KEYS;

pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The JSON types of a field as written in a config file.
fn type_of(kind: FieldKind) -> Value {
    match kind {
        FieldKind::Bool => json!({"type": "boolean"}),
        FieldKind::OptionalBool => json!({"type": ["boolean", "null"]}),
        FieldKind::String => json!({"type": "string"}),
        FieldKind::OptionalString => json!({"type": ["string", "null"]}),
        FieldKind::UInt { min, max } => {
            json!({"type": "integer", "minimum": min, "maximum": max})
        }
        FieldKind::Float { min } => json!({"type": "number", "minimum": min}),
        FieldKind::StringList => json!({"type": ["array", "null"], "items": {"type": "string"}}),
        FieldKind::StringMap => json!({
            "type": ["object", "null"],
            "additionalProperties": {"type": "string"}
        }),
        FieldKind::Tolerations => json!({
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "description": "a Kubernetes Toleration (key, operator, value, effect, tolerationSeconds)"
            }
        }),
    }
}

fn default_of(defaults: &Value, spec: &FieldSpec) -> Value {
    spec.path
        .split('.')
        .try_fold(defaults, |node, part| node.get(part))
        .cloned()
        .unwrap_or(Value::Null)
}

fn per_template(spec: &FieldSpec) -> bool {
    let top = spec.path.split('.').next().unwrap_or(spec.path);
    PER_TEMPLATE_KEYS.iter().any(|k| k.key == top)
}

fn property(spec: &FieldSpec, defaults: &Value) -> Value {
    let mut property = type_of(spec.kind);
    let env = spec.env_var();
    property["default"] = default_of(defaults, spec);
    property["description"] = Value::String(format!(
        "{} (docs/configuration.md); environment variable {env}{}",
        spec.group,
        if per_template(spec) {
            "; a template's providerConfig may set it too"
        } else {
            ""
        }
    ));
    property["x-orb-env"] = Value::String(env);
    property["x-orb-group"] = Value::String(spec.group.to_string());
    property["x-orb-per-template"] = Value::Bool(per_template(spec));
    property
}

/// The schema of a Kubernetes provider's `config` block in config.json. Unknown keys are
/// refused (`additionalProperties: false`), as the provider refuses them; the older key
/// names it still accepts are listed as deprecated.
pub fn provider_settings_schema() -> Value {
    let defaults = serde_json::to_value(K8sProviderConfig::default()).unwrap_or(Value::Null);
    let mut properties = Map::new();
    for spec in FIELDS {
        match spec.path.split_once('.') {
            None => {
                properties.insert(spec.path.to_string(), property(spec, &defaults));
            }
            Some((container, leaf)) => {
                let group = properties.entry(container.to_string()).or_insert_with(|| {
                    json!({
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {},
                        "description": format!("{} (docs/configuration.md)", spec.group),
                    })
                });
                group["properties"][leaf] = property(spec, &defaults);
            }
        }
    }
    for (legacy, canonical) in LEGACY_KEYS {
        let Some(spec) = schema::field_spec(canonical) else {
            continue;
        };
        let mut property = type_of(spec.kind);
        property["deprecated"] = Value::Bool(true);
        property["description"] = Value::String(format!(
            "the older name of {canonical}; accepted with a warning, write {canonical} instead"
        ));
        properties.insert(legacy.to_string(), property);
    }
    json!({
        "$schema": SCHEMA_DIALECT,
        "title": "Kubernetes provider settings",
        "description": format!(
            "The config block of a provider of type k8s in config.json. Each setting can also \
             come from an environment variable ({ENV_PREFIX}<NAME>, nesting written as __), \
             which wins over the file; orb also accepts the text forms those variables use \
             (\"true\", \"240\")."
        ),
        "type": "object",
        "additionalProperties": false,
        "properties": Value::Object(properties),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(schema: &'a Value, path: &str) -> &'a Value {
        match path.split_once('.') {
            None => &schema["properties"][path],
            Some((container, leaf)) => &schema["properties"][container]["properties"][leaf],
        }
    }

    #[test]
    fn every_field_of_the_table_is_in_the_schema_with_its_default_and_variable() {
        let schema = provider_settings_schema();
        let defaults = serde_json::to_value(K8sProviderConfig::default()).unwrap();
        for spec in FIELDS {
            let property = lookup(&schema, spec.path);
            assert!(property.is_object(), "{} missing", spec.path);
            assert_eq!(
                property["default"],
                default_of(&defaults, spec),
                "{}",
                spec.path
            );
            assert_eq!(property["x-orb-env"], spec.env_var());
        }
        let top_level = schema["properties"].as_object().unwrap().len();
        assert_eq!(
            top_level,
            schema::keys_under(None).len() + LEGACY_KEYS.len(),
            "only table keys and legacy names are properties"
        );
    }

    #[test]
    fn bounds_and_optional_types_follow_the_field_kinds() {
        let schema = provider_settings_schema();
        let uuid = lookup(&schema, "naming.uuid_chars");
        assert_eq!(uuid["type"], "integer");
        assert_eq!(
            (uuid["minimum"].as_u64(), uuid["maximum"].as_u64()),
            (Some(8), Some(32))
        );
        assert_eq!(
            lookup(&schema, "namespace")["type"],
            json!(["string", "null"])
        );
        assert_eq!(lookup(&schema, "pod_timeout_seconds")["minimum"], 1);
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["pod_timeout"]["deprecated"], true);
    }
}
