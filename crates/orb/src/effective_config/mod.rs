//! The effective configuration, captured once from a session: directories, config.json,
//! the selected provider and (for Kubernetes) its layered settings. `orb config show` prints
//! it and `GET /api/v1/config/…` answers it; both read it through the pure functions here and
//! in [`keys`], so the command line and REST cannot say different things. Every document
//! leaving this module has its secrets masked ([`redact`]).

mod check;
mod keys;
mod redact;

use orb_core::config::ProviderEntry;
use orb_core::dirs::Dirs;
use orb_k8s::config::{
    ConfigLayers, OutputFormat as ProviderFormat, ResolvedConfig, TemplateOverrides,
    layer_from_config_value, render_effective,
};
use serde_json::{Value, json};

pub use check::{ConfigCheck, ConfigProblem, check_document};
pub use keys::{Setting, SettingSource, closest_key};
pub use redact::{REDACTED, redact_secrets};

use crate::cli::SchedulerKind;
use crate::context::{self, LoadedConfig};
use crate::failure::{CliResult, Failure};
use crate::provider_factory::KUBERNETES_TYPES;
use crate::session::Session;

/// Why the selected provider is the one it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChoice {
    /// `--provider-name`.
    Flag,
    /// `HF_PROVIDER_NAME`, naming a configured provider.
    Env,
    /// config.json's default (or first enabled) entry.
    File,
}

/// Everything `orb config show` and the config routes report, as plain data.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    pub dirs: Dirs,
    pub config_exists: bool,
    pub loaded: Option<LoadedConfig>,
    /// The store URL in use, unredacted (only [`Self::storage_url`] leaves the module).
    storage_url: Option<String>,
    pub storage_from_env: bool,
    pub scheduler: SchedulerKind,
    /// `None`: from config.json or the default; else the flag or variable that set it.
    pub scheduler_set_by: Option<&'static str>,
    pub entry: Option<ProviderEntry>,
    pub provider_choice: ProviderChoice,
    /// The Kubernetes provider's resolved settings; `None` for another provider type.
    pub provider: Option<ResolvedConfig>,
}

impl EffectiveConfig {
    /// Reads what the session sees: config.json (when it exists), `ORB_STORAGE_URL`,
    /// `ORB_K8S_*`, and with `template` that template's `providerConfig` over the provider's
    /// settings. A config that does not load is the same error `orb` gives everywhere.
    pub fn capture(session: &Session, template: Option<&str>) -> CliResult<Self> {
        let dirs = session.dirs.clone();
        let config_exists = dirs.config_file.path.is_file();
        let loaded = if config_exists {
            Some(session.config()?)
        } else if template.is_some() {
            return Err(Failure::invalid(format!(
                "--template needs a config file, and {} does not exist; run `orb init` first",
                dirs.config_file.path.display()
            )));
        } else {
            None
        };
        let storage_from_env = std::env::var("ORB_STORAGE_URL")
            .ok()
            .is_some_and(|u| !u.trim().is_empty());
        let storage_url = loaded
            .as_ref()
            .map(|l| context::storage_url(&l.config, &dirs));
        let scheduler = context::scheduler(&session.global, loaded.as_ref().map(|l| &l.config));
        let scheduler_set_by = session.global.scheduler.map(|_| {
            if std::env::var_os("ORB_SCHEDULER").is_some() {
                "env ORB_SCHEDULER"
            } else {
                "command line --scheduler"
            }
        });
        let (entry, provider_choice, provider) = match &loaded {
            Some(l) => {
                let entry = context::select_provider(&session.global, l)?.clone();
                let choice = if session.global.provider_name.is_some() {
                    ProviderChoice::Flag
                } else if std::env::var("HF_PROVIDER_NAME").ok().as_deref() == Some(&entry.name) {
                    ProviderChoice::Env
                } else {
                    ProviderChoice::File
                };
                let provider = kubernetes_settings(session, l, &entry, template)?;
                (Some(entry), choice, provider)
            }
            None => (None, ProviderChoice::File, None),
        };
        Ok(Self {
            dirs,
            config_exists,
            loaded,
            storage_url,
            storage_from_env,
            scheduler,
            scheduler_set_by,
            entry,
            provider_choice,
            provider,
        })
    }

    /// The store URL with any password masked.
    pub fn storage_url(&self) -> Option<String> {
        self.storage_url.as_deref().map(orb_store::redact)
    }

    pub fn scheduler_name(&self) -> String {
        format!("{:?}", self.scheduler).to_ascii_lowercase()
    }

    /// The document `orb config show` prints as JSON and `GET /api/v1/config/` answers:
    /// directories, the store, the scheduler, config.json as written and the provider's
    /// effective settings (with `with_origin`, each as `{value, origin}`). Secrets masked.
    pub fn show_document(&self, with_origin: bool) -> Value {
        let dirs = &self.dirs;
        let provider = match (&self.entry, &self.provider) {
            (Some(entry), Some(resolved)) => json!({
                "name": entry.name,
                "type": entry.provider_type,
                "settings": serde_json::from_str::<Value>(&render_effective(
                    resolved,
                    ProviderFormat::Json,
                    with_origin
                ))
                .unwrap_or(Value::Null),
                "warnings": resolved.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "security_opt_outs": resolved
                    .security_opt_outs
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            }),
            _ => Value::Null,
        };
        let mut document = json!({
            "config_file": {
                "path": dirs.config_file.path,
                "origin": dirs.config_file.origin,
                "exists": self.config_exists,
            },
            "config_dir": dirs.config_dir,
            "work_dir": dirs.work_dir,
            "log_dir": dirs.log_dir,
            "storage_url": self.storage_url(),
            "scheduler": self.scheduler_name(),
            "config": self.loaded.as_ref().map(|l| l.raw.clone()).unwrap_or(Value::Null),
            "provider": provider,
        });
        redact_secrets(&mut document);
        document
    }
}

/// The selected provider's effective settings, when it is a Kubernetes provider: the entry's
/// `config` block, `ORB_K8S_*` over it, and (with `template_id`) that template's
/// `provider_config` over both. Every problem is reported at once, naming its source.
pub fn kubernetes_settings(
    session: &Session,
    loaded: &LoadedConfig,
    entry: &ProviderEntry,
    template_id: Option<&str>,
) -> CliResult<Option<ResolvedConfig>> {
    let kind = entry.provider_type.trim().to_ascii_lowercase();
    if !KUBERNETES_TYPES.contains(&kind.as_str()) {
        if template_id.is_some() {
            return Err(Failure::invalid(format!(
                "--template applies to Kubernetes providers; provider {:?} has type {:?}",
                entry.name, entry.provider_type
            )));
        }
        return Ok(None);
    }
    let file = layer_from_config_value(&loaded.file, &entry.config)
        .map_err(|e| Failure::invalid(format!("{}: {e}", loaded.file.display())))?;
    let layers = ConfigLayers::from_process_env(Some(file));
    let mut resolved = layers
        .resolve(None)
        .map_err(|e| Failure::invalid(format!("provider {:?} settings:\n{e}", entry.name)))?;
    if let Some(id) = template_id {
        let catalog = context::load_catalog(&session.dirs, entry)?;
        let template = catalog.lookup(id)?;
        match &template.provider_config {
            None => {}
            Some(Value::Object(values)) => {
                resolved = resolved
                    .for_template(&TemplateOverrides {
                        template_id: id.to_string(),
                        values: values.clone(),
                    })
                    .map_err(|e| {
                        Failure::invalid(format!("template {id:?} provider_config:\n{e}"))
                    })?;
            }
            Some(other) => {
                return Err(Failure::invalid(format!(
                    "template {id:?}: provider_config must be an object of provider settings, got {other}"
                )));
            }
        }
    }
    Ok(Some(resolved))
}
