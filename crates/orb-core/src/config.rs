//! `config.json`: the application configuration, as plain data.
//!
//! Each provider's own `config` block stays raw JSON here; the provider crate parses it
//! (orb-k8s owns the Kubernetes settings). Unknown top-level sections are kept so
//! `orb config show` prints the file faithfully.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::lifecycle::{DEFAULT_GRACE_SECS, DEFAULT_TIMEOUT_SECS};
use crate::template::DEFAULT_MAX_MACHINES;

pub const DEFAULT_MAX_MACHINES_PER_REQUEST: u32 = 100;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AppConfig {
    /// A list of entries, or a map from provider name to entry.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "providers_from_list_or_map"
    )]
    pub providers: Vec<ProviderEntry>,
    /// The reference's nesting: `{"provider": {"providers": [...]}}`. Merged into
    /// `providers` by [`AppConfig::provider_entries`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderSection>,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub request: RequestConfig,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub template: TemplateConfig,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProviderSection {
    #[serde(default, deserialize_with = "providers_from_list_or_map")]
    pub providers: Vec<ProviderEntry>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderEntry {
    pub name: String,
    #[serde(rename = "type")]
    pub provider_type: String,
    pub enabled: bool,
    pub default: bool,
    /// Provider-specific settings, parsed by the provider crate.
    pub config: Value,
    /// Template keys applied under every template of this provider.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub template_defaults: Map<String, Value>,
}

/// Keys of a provider entry that are orb's bookkeeping, not provider settings.
const ENTRY_KEYS: &[&str] = &[
    "name",
    "type",
    "provider_type",
    "enabled",
    "default",
    "config",
    "template_defaults",
];

impl ProviderEntry {
    /// Reads one entry. Settings may sit in `config` or directly on the entry (both are
    /// merged into `config`, so the provider sees and checks every key).
    pub fn from_value(name_hint: Option<&str>, value: &Value) -> Result<Self, String> {
        let Some(object) = value.as_object() else {
            return Err(format!("a provider entry must be an object, got {value}"));
        };
        let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
        let flag = |key: &str, default: bool| -> Result<bool, String> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(format!(
                    "provider \"{key}\" must be true or false, got {other}"
                )),
            }
        };
        let name = text("name")
            .or_else(|| name_hint.map(str::to_string))
            .ok_or("every provider needs a \"name\"")?;
        let provider_type = text("type")
            .or_else(|| text("provider_type"))
            .ok_or_else(|| format!("provider {name:?} needs a \"type\" (e.g. \"k8s\")"))?;
        let mut config = match object.get("config") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(format!(
                    "provider {name:?}: \"config\" must be an object, got {other}"
                ));
            }
        };
        for (key, v) in object {
            if !ENTRY_KEYS.contains(&key.as_str()) {
                config.insert(key.clone(), v.clone());
            }
        }
        let template_defaults = match object.get("template_defaults") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(format!(
                    "provider {name:?}: \"template_defaults\" must be an object, got {other}"
                ));
            }
        };
        Ok(Self {
            enabled: flag("enabled", true)?,
            default: flag("default", false)?,
            name,
            provider_type,
            config: Value::Object(config),
            template_defaults,
        })
    }
}

fn providers_from_list_or_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<ProviderEntry>, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|v| ProviderEntry::from_value(None, v).map_err(D::Error::custom))
            .collect(),
        Value::Object(map) => map
            .iter()
            .map(|(name, v)| ProviderEntry::from_value(Some(name), v).map_err(D::Error::custom))
            .collect(),
        other => Err(D::Error::custom(format!(
            "\"providers\" must be a list or a map of provider entries, got {other}"
        ))),
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StorageConfig {
    /// `sqlite://…` or `postgres://…`. Unset: `<work dir>/orb.db`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestConfig {
    #[serde(default = "default_timeout")]
    pub default_timeout: u64,
    #[serde(default = "default_grace")]
    pub default_grace_period: u64,
    #[serde(default = "default_per_request")]
    pub max_machines_per_request: u32,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Default for RequestConfig {
    fn default() -> Self {
        Self {
            default_timeout: DEFAULT_TIMEOUT_SECS,
            default_grace_period: DEFAULT_GRACE_SECS,
            max_machines_per_request: DEFAULT_MAX_MACHINES_PER_REQUEST,
            other: BTreeMap::new(),
        }
    }
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}
fn default_grace() -> u64 {
    DEFAULT_GRACE_SECS
}
fn default_per_request() -> u32 {
    DEFAULT_MAX_MACHINES_PER_REQUEST
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// `default` or `hostfactory` (`hf` accepted).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub scheduler_type: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateConfig {
    #[serde(default = "default_max_number")]
    pub max_number: i64,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl Default for TemplateConfig {
    fn default() -> Self {
        Self {
            max_number: DEFAULT_MAX_MACHINES,
            other: BTreeMap::new(),
        }
    }
}

fn default_max_number() -> i64 {
    DEFAULT_MAX_MACHINES
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{file} is not a valid orb configuration: {message}")]
    Invalid { file: String, message: String },
    #[error(
        "no provider is configured; add one to \"providers\" in {file} (run `orb init` to write a working config)"
    )]
    NoProvider { file: String },
    #[error("provider {wanted:?} is not in {file}; configured providers: {known}")]
    UnknownProvider {
        wanted: String,
        file: String,
        known: String,
    },
}

impl AppConfig {
    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        let config: Self = serde_json::from_str(text).map_err(|e| ConfigError::Invalid {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        let mut names = std::collections::BTreeSet::new();
        for entry in config.provider_entries() {
            if entry.name.trim().is_empty() || entry.provider_type.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    message: "every provider needs a non-empty \"name\" and \"type\"".into(),
                });
            }
            if !names.insert(entry.name.as_str()) {
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    message: format!(
                        "provider name {:?} is used twice; names must be unique",
                        entry.name
                    ),
                });
            }
        }
        Ok(config)
    }

    /// Providers from both the flat and the reference's nested layout, flat first.
    pub fn provider_entries(&self) -> Vec<&ProviderEntry> {
        self.providers
            .iter()
            .chain(self.provider.iter().flat_map(|p| p.providers.iter()))
            .collect()
    }

    /// Picks the provider: an explicit name (flag, then `HF_PROVIDER_NAME`) if given, else the
    /// enabled entry marked `default`, else the first enabled entry.
    pub fn select_provider(
        &self,
        wanted: Option<&str>,
        file: &str,
    ) -> Result<&ProviderEntry, ConfigError> {
        let entries = self.provider_entries();
        if let Some(wanted) = wanted {
            return entries
                .iter()
                .find(|e| e.name == wanted)
                .copied()
                .ok_or_else(|| ConfigError::UnknownProvider {
                    wanted: wanted.to_string(),
                    file: file.to_string(),
                    known: if entries.is_empty() {
                        "none".into()
                    } else {
                        entries
                            .iter()
                            .map(|e| e.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                });
        }
        let enabled: Vec<_> = entries.into_iter().filter(|e| e.enabled).collect();
        enabled
            .iter()
            .find(|e| e.default)
            .or_else(|| enabled.first())
            .copied()
            .ok_or_else(|| ConfigError::NoProvider {
                file: file.to_string(),
            })
    }

    pub fn is_hostfactory_scheduler(&self) -> bool {
        matches!(
            self.scheduler
                .scheduler_type
                .as_deref()
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("hostfactory" | "hf")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const TWO: &str = r#"{
        "providers": [
            {"name": "a", "type": "k8s", "config": {"namespace": "x"}},
            {"name": "b", "type": "k8s", "default": true, "template_defaults": {"machine_image": "busybox"}}
        ],
        "request": {"max_machines_per_request": 7},
        "logging": {"level": "INFO"}
    }"#;

    #[test]
    fn defaults_apply_and_unknown_sections_are_kept() {
        let c = AppConfig::parse("c.json", TWO).unwrap();
        assert_eq!(c.request.max_machines_per_request, 7);
        assert_eq!(c.request.default_timeout, 300);
        assert_eq!(c.request.default_grace_period, 300);
        assert_eq!(c.template.max_number, 10);
        assert!(c.other.contains_key("logging"));
        assert_eq!(c.providers[0].config["namespace"], "x");
    }

    #[rstest]
    #[case::default_flag(None, "b")]
    #[case::by_name(Some("a"), "a")]
    fn provider_selection(#[case] wanted: Option<&str>, #[case] expected: &str) {
        let c = AppConfig::parse("c.json", TWO).unwrap();
        assert_eq!(c.select_provider(wanted, "c.json").unwrap().name, expected);
    }

    #[rstest]
    #[case::map_layout(r#"{"providers": {"k8s": {"provider_type": "k8s", "namespace": "orb"}}}"#)]
    #[case::settings_on_the_entry(
        r#"{"providers": [{"name": "k8s", "type": "k8s", "namespace": "orb"}]}"#
    )]
    #[case::settings_in_config(
        r#"{"providers": [{"name": "k8s", "type": "k8s", "config": {"namespace": "orb"}}]}"#
    )]
    fn every_provider_layout_gives_the_same_entry(#[case] text: &str) {
        let c = AppConfig::parse("c.json", text).unwrap();
        let entry = c.select_provider(None, "c.json").unwrap();
        assert_eq!(
            (entry.name.as_str(), entry.provider_type.as_str()),
            ("k8s", "k8s")
        );
        assert_eq!(entry.config, serde_json::json!({"namespace": "orb"}));
        assert!(entry.enabled);
    }

    #[test]
    fn unknown_provider_lists_the_known_ones() {
        let c = AppConfig::parse("c.json", TWO).unwrap();
        let err = c
            .select_provider(Some("zz"), "c.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"zz\"") && err.contains("a, b"), "{err}");
    }

    #[test]
    fn the_reference_nested_layout_is_understood() {
        let c = AppConfig::parse(
            "c.json",
            r#"{"provider": {"providers": [{"name": "k", "type": "k8s"}], "selection_policy": "FIRST"},
                "scheduler": {"type": "hostfactory"}}"#,
        )
        .unwrap();
        assert_eq!(c.select_provider(None, "c.json").unwrap().name, "k");
        assert!(c.is_hostfactory_scheduler());
    }

    #[rstest]
    #[case::syntax("{", "c.json is not a valid")]
    #[case::duplicate(
        r#"{"providers": [{"name": "a", "type": "k8s"}, {"name": "a", "type": "k8s"}]}"#,
        "used twice"
    )]
    #[case::blank_type(r#"{"providers": [{"name": "a", "type": ""}]}"#, "non-empty")]
    #[case::no_type(r#"{"providers": [{"name": "a"}]}"#, "needs a \"type\"")]
    #[case::bad_flag(
        r#"{"providers": [{"name": "a", "type": "k8s", "enabled": "yes"}]}"#,
        "true or false"
    )]
    #[case::not_a_list(r#"{"providers": 3}"#, "list or a map")]
    fn broken_configs_are_explained(#[case] text: &str, #[case] needle: &str) {
        let err = AppConfig::parse("c.json", text).unwrap_err().to_string();
        assert!(err.contains(needle), "{err}");
    }

    #[test]
    fn no_provider_points_at_orb_init() {
        let c = AppConfig::parse("c.json", "{}").unwrap();
        let err = c.select_provider(None, "c.json").unwrap_err().to_string();
        assert!(err.contains("orb init"), "{err}");
    }
}
