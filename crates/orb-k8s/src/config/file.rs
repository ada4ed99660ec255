//! Finding the Kubernetes provider's block inside `config.json`.
//!
//! Three layouts are accepted: the seed's `{"providers": {"<name>": {...}}}` map, the flat list
//! `{"providers": [{"name": "<name>", "type": "k8s", "config": {...}}]}` (orb-core's
//! `AppConfig`), and the reference's `{"provider": {"providers": [...]}}`. In each, an entry
//! may hold the fields directly or under `config`; entry bookkeeping keys (`type`,
//! `provider_type`, `name`, `enabled`, `default`, `template_defaults`) are not provider fields
//! and are left to whoever reads provider entries.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::layers::FileLayer;

/// Keys of a provider entry that describe the entry rather than configure the provider.
pub const ENTRY_KEYS: &[&str] = &[
    "type",
    "provider_type",
    "name",
    "enabled",
    "default",
    "template_defaults",
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read {}: {source}; check the path (--config, ORB_CONFIG_FILE or ORB_CONFIG_DIR) and its permissions", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not valid JSON: {source}; fix the syntax at the reported line and column", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: provider {name:?} not found; configured providers: {available}; pass one of these names or add a providers.{name} block", path.display())]
    ProviderNotFound {
        path: PathBuf,
        name: String,
        available: String,
    },
    #[error("{}: {location} must be a JSON object, found {found}", path.display())]
    NotAnObject {
        path: PathBuf,
        location: String,
        found: String,
    },
}

/// Reads `path` and extracts the block of provider `name`. `Ok(None)` when the file configures
/// no providers at all (defaults and env vars then apply).
pub fn read_provider_block(path: &Path, name: &str) -> Result<Option<FileLayer>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let document: Value = serde_json::from_str(&text).map_err(|source| ConfigFileError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    provider_block(path, &document, name)
}

fn kind_of(value: &Value) -> String {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
    .to_string()
}

/// Records every entry name of a provider list and the first entry called `name`.
fn search_list<'a>(
    list: &'a [Value],
    location: &str,
    name: &str,
    names: &mut Vec<String>,
    entry: &mut Option<(String, &'a Value)>,
) {
    for (index, item) in list.iter().enumerate() {
        let item_name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        names.push(item_name.to_string());
        if entry.is_none() && item_name == name {
            *entry = Some((format!("{location}[{index}]"), item));
        }
    }
}

/// Pure part of [`read_provider_block`]: `path` is only used to label errors and origins.
pub fn provider_block<'a>(
    path: &Path,
    document: &'a Value,
    name: &str,
) -> Result<Option<FileLayer>, ConfigFileError> {
    let not_object = |location: String, found: &Value| ConfigFileError::NotAnObject {
        path: path.to_path_buf(),
        location,
        found: kind_of(found),
    };
    let mut names: Vec<String> = Vec::new();
    let mut entry: Option<(String, &'a Value)> = None;

    match document.get("providers") {
        Some(Value::Object(map)) => {
            names.extend(map.keys().cloned());
            entry = map.get(name).map(|e| (format!("providers.{name}"), e));
        }
        Some(Value::Array(list)) => search_list(list, "providers", name, &mut names, &mut entry),
        Some(other) => return Err(not_object("providers".into(), other)),
        None => {}
    }
    if let Some(list) = document
        .pointer("/provider/providers")
        .and_then(Value::as_array)
    {
        search_list(list, "provider.providers", name, &mut names, &mut entry);
    }

    let Some((location, entry)) = entry else {
        if names.is_empty() {
            return Ok(None);
        }
        return Err(ConfigFileError::ProviderNotFound {
            path: path.to_path_buf(),
            name: name.to_string(),
            available: names.join(", "),
        });
    };
    let Value::Object(entry) = entry else {
        return Err(not_object(location, entry));
    };
    let block: Map<String, Value> = match entry.get("config") {
        Some(Value::Object(config)) => config.clone(),
        Some(other) => return Err(not_object(format!("{location}.config"), other)),
        None => entry
            .iter()
            .filter(|(k, _)| !ENTRY_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    Ok(Some(FileLayer {
        path: path.to_path_buf(),
        block,
    }))
}

/// A layer from a provider entry's `config` value that the caller already parsed (e.g. orb-core's
/// `ProviderEntry::config`); `null` means an empty block.
pub fn layer_from_config_value(path: &Path, config: &Value) -> Result<FileLayer, ConfigFileError> {
    match config {
        Value::Null => Ok(FileLayer {
            path: path.to_path_buf(),
            block: Map::new(),
        }),
        Value::Object(block) => Ok(FileLayer {
            path: path.to_path_buf(),
            block: block.clone(),
        }),
        other => Err(ConfigFileError::NotAnObject {
            path: path.to_path_buf(),
            location: "the provider's config".into(),
            found: kind_of(other),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path() -> &'static Path {
        Path::new("/etc/orb/config.json")
    }

    #[test]
    fn seed_layout_drops_entry_keys() {
        let doc = json!({"providers": {"k8s": {"provider_type": "k8s", "namespace": "orb"}}});
        let layer = provider_block(path(), &doc, "k8s").unwrap().unwrap();
        assert_eq!(
            layer.block,
            *json!({"namespace": "orb"}).as_object().unwrap()
        );
    }

    #[test]
    fn orb_layout_uses_the_config_object() {
        let doc = json!({"provider": {"providers": [
            {"name": "aws", "type": "aws", "config": {}},
            {"name": "k8s", "type": "k8s", "enabled": true, "config": {"context": "prod"}}
        ]}});
        let layer = provider_block(path(), &doc, "k8s").unwrap().unwrap();
        assert_eq!(
            layer.block,
            *json!({"context": "prod"}).as_object().unwrap()
        );
    }

    #[test]
    fn flat_list_layout_is_found_by_name() {
        let doc = json!({"providers": [
            {"name": "k8s", "type": "k8s", "config": {"namespace": "orb"}}
        ]});
        let layer = provider_block(path(), &doc, "k8s").unwrap().unwrap();
        assert_eq!(
            layer.block,
            *json!({"namespace": "orb"}).as_object().unwrap()
        );
    }

    #[test]
    fn an_already_parsed_config_value_becomes_a_layer() {
        let layer = layer_from_config_value(path(), &json!({"context": "dev"})).unwrap();
        assert_eq!(layer.block["context"], "dev");
        assert!(
            layer_from_config_value(path(), &Value::Null)
                .unwrap()
                .block
                .is_empty()
        );
        assert!(layer_from_config_value(path(), &json!("x")).is_err());
    }

    #[test]
    fn missing_provider_lists_the_configured_ones() {
        let doc = json!({"providers": {"aws": {}, "k8s-dev": {}}});
        let err = provider_block(path(), &doc, "k8s").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/etc/orb/config.json: provider \"k8s\" not found; configured providers: aws, \
             k8s-dev; pass one of these names or add a providers.k8s block"
        );
    }

    #[test]
    fn a_file_without_providers_contributes_nothing() {
        assert_eq!(
            provider_block(path(), &json!({"version": 2}), "k8s").unwrap(),
            None
        );
    }

    #[test]
    fn a_non_object_entry_is_refused() {
        let err = provider_block(path(), &json!({"providers": {"k8s": []}}), "k8s").unwrap_err();
        assert!(
            err.to_string()
                .contains("providers.k8s must be a JSON object, found a list")
        );
    }

    #[test]
    fn reading_reports_the_path_of_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("config.json");
        let err = read_provider_block(&missing, "k8s").unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("cannot read {}", missing.display()))
        );
    }

    #[test]
    fn reading_a_real_file_yields_its_block() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"providers":{"k8s":{"namespace":"orb"}}}"#).unwrap();
        let layer = read_provider_block(&file, "k8s").unwrap().unwrap();
        assert_eq!(layer.path, file);
        assert_eq!(layer.block["namespace"], "orb");
    }
}
