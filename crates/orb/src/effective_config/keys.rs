//! The effective configuration as a flat list of keys, each with its value and where it came
//! from. A key is a dotted path: `config_dir`, `storage.url`, `request.default_timeout`,
//! `provider.namespace`, `provider.naming.prefix`. `GET /api/v1/config/sources` lists them
//! all and `GET /api/v1/config/{key}` answers one.

use orb_core::config::AppConfig;
use orb_core::dirs::ResolvedPath;
use orb_k8s::config::Origin;
use orb_k8s::config::schema::{self, FIELDS};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{EffectiveConfig, ProviderChoice, redact_secrets};

/// The kind of source a value came from, in the order later ones win: a default, a file
/// (config.json), the environment, the command line, a template's `providerConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettingSource {
    Default,
    File,
    Env,
    Flag,
    Template,
}

impl SettingSource {
    pub const ALL: [Self; 5] = [
        Self::Default,
        Self::File,
        Self::Env,
        Self::Flag,
        Self::Template,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::File => "file",
            Self::Env => "env",
            Self::Flag => "flag",
            Self::Template => "template",
        }
    }
}

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Setting {
    /// A dotted path, e.g. `provider.namespace` or `request.default_timeout`.
    #[schema(example = "provider.namespace")]
    pub key: String,
    /// The effective value (secrets masked as `***`).
    #[schema(value_type = Object)]
    pub value: Value,
    pub source: SettingSource,
    /// Where exactly, in the words of `orb config show --origin`: `default`, `file
    /// /etc/orb/config.json`, `env ORB_K8S_NAMESPACE`, `template gpu`, `command line`.
    #[schema(example = "env ORB_K8S_NAMESPACE")]
    pub origin: String,
}

fn setting(key: impl Into<String>, value: Value, source: SettingSource, origin: String) -> Setting {
    Setting {
        key: key.into(),
        value,
        source,
        origin,
    }
}

fn from_provider_origin(origin: &Origin) -> SettingSource {
    match origin {
        Origin::Default => SettingSource::Default,
        Origin::File { .. } => SettingSource::File,
        Origin::Env { .. } => SettingSource::Env,
        Origin::Template { .. } => SettingSource::Template,
    }
}

/// A directory's origin is text (`command line`, `ORB_WORK_DIR`, `default (~/.orb/work)`).
fn directory(key: &str, path: &ResolvedPath) -> Setting {
    let origin = &path.origin;
    let source = if origin == "command line" {
        SettingSource::Flag
    } else if origin.starts_with("ORB_") {
        SettingSource::Env
    } else {
        SettingSource::Default
    };
    setting(key, json!(path.path), source, origin.clone())
}

/// `section.key` of config.json: the effective value, from the file when it is written there.
fn app_value(
    config: &AppConfig,
    raw: &Value,
    file: &str,
    section: &str,
    key: &str,
) -> Option<Setting> {
    let effective = serde_json::to_value(config).ok()?;
    let value = effective.get(section)?.get(key)?.clone();
    let written = raw.get(section).and_then(|s| s.get(key)).is_some();
    Some(if written {
        setting(
            format!("{section}.{key}"),
            value,
            SettingSource::File,
            format!("file {file}"),
        )
    } else {
        setting(
            format!("{section}.{key}"),
            value,
            SettingSource::Default,
            "default".into(),
        )
    })
}

impl EffectiveConfig {
    /// Every key, directories first, then config.json's own settings, then the provider's
    /// (in the order of its field table). Values are redacted.
    pub fn settings(&self) -> Vec<Setting> {
        let dirs = &self.dirs;
        let mut out = vec![
            directory("config_file", &dirs.config_file),
            directory("config_dir", &dirs.config_dir),
            directory("work_dir", &dirs.work_dir),
            directory("log_dir", &dirs.log_dir),
        ];
        let file = self
            .loaded
            .as_ref()
            .map(|l| l.file.display().to_string())
            .unwrap_or_default();
        let storage_source = if self.storage_from_env {
            (SettingSource::Env, "env ORB_STORAGE_URL".to_string())
        } else if self
            .loaded
            .as_ref()
            .is_some_and(|l| l.config.storage.url.is_some())
        {
            (SettingSource::File, format!("file {file}"))
        } else {
            (SettingSource::Default, "default".to_string())
        };
        out.push(setting(
            "storage.url",
            json!(self.storage_url()),
            storage_source.0,
            storage_source.1,
        ));
        let scheduler_source = match self.scheduler_set_by {
            Some(by) if by.starts_with("env") => (SettingSource::Env, by.to_string()),
            Some(by) => (SettingSource::Flag, by.to_string()),
            None if self
                .loaded
                .as_ref()
                .is_some_and(|l| l.config.scheduler.scheduler_type.is_some()) =>
            {
                (SettingSource::File, format!("file {file}"))
            }
            None => (SettingSource::Default, "default".to_string()),
        };
        out.push(setting(
            "scheduler.type",
            json!(self.scheduler_name()),
            scheduler_source.0,
            scheduler_source.1,
        ));
        if let Some(loaded) = &self.loaded {
            for (section, key) in [
                ("request", "default_timeout"),
                ("request", "default_grace_period"),
                ("request", "max_machines_per_request"),
                ("template", "max_number"),
            ] {
                out.extend(app_value(&loaded.config, &loaded.raw, &file, section, key));
            }
        }
        if let Some(entry) = &self.entry {
            let (source, origin) = match self.provider_choice {
                ProviderChoice::Flag => {
                    (SettingSource::Flag, "command line --provider-name".into())
                }
                ProviderChoice::Env => (SettingSource::Env, "env HF_PROVIDER_NAME".into()),
                ProviderChoice::File => (SettingSource::File, format!("file {file}")),
            };
            out.push(setting("provider.name", json!(entry.name), source, origin));
            out.push(setting(
                "provider.type",
                json!(entry.provider_type),
                SettingSource::File,
                format!("file {file}"),
            ));
        }
        if let Some(resolved) = &self.provider {
            let whole = serde_json::to_value(&resolved.config).unwrap_or(Value::Null);
            for spec in FIELDS {
                let value = spec
                    .path
                    .split('.')
                    .try_fold(&whole, |node, part| node.get(part))
                    .cloned()
                    .unwrap_or(Value::Null);
                let origin = resolved.origin_of(spec.path);
                out.push(setting(
                    format!("provider.{}", spec.path),
                    value,
                    from_provider_origin(origin),
                    origin.to_string(),
                ));
            }
        }
        for entry in &mut out {
            let mut wrapped =
                json!({ entry.key.rsplit('.').next().unwrap_or(""): entry.value.take() });
            redact_secrets(&mut wrapped);
            entry.value = wrapped
                .as_object_mut()
                .and_then(|m| m.values_mut().next().map(Value::take))
                .unwrap_or(Value::Null);
        }
        out
    }

    /// One key, as [`Self::settings`] lists it.
    pub fn setting(&self, key: &str) -> Option<Setting> {
        self.settings().into_iter().find(|s| s.key == key)
    }
}

/// The listed key nearest to `key` by edit distance, for "did you mean"; none when nothing
/// is close (a quarter of the key's length, at least 2 edits).
pub fn closest_key(key: &str, settings: &[Setting]) -> Option<String> {
    let (distance, found) = settings
        .iter()
        .map(|s| (schema::edit_distance(key, &s.key), &s.key))
        .min_by_key(|(distance, _)| *distance)?;
    (distance <= (key.len() / 4).max(2)).then(|| found.clone())
}
