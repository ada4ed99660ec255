//! Loading what a command needs from disk: directories, config.json, the template file and
//! the store. Thin IO around orb-core's pure parsers.

use std::path::{Path, PathBuf};

use orb_core::config::{AppConfig, ProviderEntry};
use orb_core::dirs::{DirFlags, Dirs, resolve_dirs};
use orb_core::template::Template;
use orb_store::Store;
use serde_json::Value;

use crate::cli::{GlobalArgs, SchedulerKind};
use crate::failure::{CliResult, Failure};

pub fn resolve(global: &GlobalArgs) -> Dirs {
    let flags = DirFlags {
        config_file: global.config.clone(),
        ..Default::default()
    };
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    resolve_dirs(&flags, &|name| std::env::var(name).ok(), &home)
}

#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub file: PathBuf,
    pub raw: Value,
    pub config: AppConfig,
}

pub fn load_config(dirs: &Dirs) -> CliResult<LoadedConfig> {
    let file = dirs.config_file.path.clone();
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::invalid(format!(
                "no configuration at {} ({}); run `orb init` to write one, or point ORB_CONFIG_DIR / --config at yours",
                file.display(),
                dirs.config_file.origin
            )));
        }
        Err(e) => {
            return Err(Failure::generic(format!(
                "cannot read {}: {e}",
                file.display()
            )));
        }
    };
    let label = file.display().to_string();
    let config = AppConfig::parse(&label, &text).map_err(|e| Failure::invalid(e.to_string()))?;
    let raw = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok(LoadedConfig { file, raw, config })
}

pub fn scheduler(global: &GlobalArgs, config: Option<&AppConfig>) -> SchedulerKind {
    match global.scheduler {
        Some(kind) => kind,
        None if config.is_some_and(AppConfig::is_hostfactory_scheduler) => {
            SchedulerKind::Hostfactory
        }
        None => SchedulerKind::Default,
    }
}

/// The provider entry: `--provider-name`, else `HF_PROVIDER_NAME` when it names a configured
/// provider, else the config's default.
pub fn select_provider<'c>(
    global: &GlobalArgs,
    loaded: &'c LoadedConfig,
) -> CliResult<&'c ProviderEntry> {
    let label = loaded.file.display().to_string();
    let hf_name = std::env::var("HF_PROVIDER_NAME").ok().filter(|name| {
        loaded
            .config
            .provider_entries()
            .iter()
            .any(|e| &e.name == name)
    });
    let wanted = global.provider_name.as_deref().or(hf_name.as_deref());
    loaded
        .config
        .select_provider(wanted, &label)
        .map_err(|e| Failure::invalid(e.to_string()))
}

use orb_broker::catalog::Catalog;

pub fn find_template_file(config_dir: &Path, provider: &ProviderEntry) -> CliResult<PathBuf> {
    Ok(orb_broker::catalog::find_template_file(
        config_dir, provider,
    )?)
}

/// The catalog at `path`, with the templates the provider refuses (for Kubernetes: provider
/// settings only the operator may set) set apart.
pub fn load_catalog_from(path: &Path, provider: &ProviderEntry) -> CliResult<Catalog> {
    let kubernetes = crate::provider_factory::is_kubernetes(provider);
    Ok(orb_broker::catalog::load_catalog_from(
        path,
        provider,
        |template| kubernetes.then(|| override_refusal(template)).flatten(),
    )?)
}

/// Why the Kubernetes provider refuses `template` at load: provider settings in its
/// `providerConfig` that only the operator may set (or a `providerConfig` that is not an
/// object). Every offending key is named, with who may set it.
pub fn override_refusal(template: &Template) -> Option<String> {
    let config = template.provider_config.as_ref()?;
    let problems = orb_k8s::config::template_override_problems(&template.template_id, config);
    (!problems.is_empty()).then(|| {
        format!(
            "template {:?} is refused: {}",
            template.template_id,
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })
}

pub fn load_catalog(dirs: &Dirs, provider: &ProviderEntry) -> CliResult<Catalog> {
    let path = find_template_file(&dirs.config_dir.path, provider)?;
    load_catalog_from(&path, provider)
}

/// `ORB_STORAGE_URL`, else the config's `storage.url`, else `<work dir>/orb.db`.
pub fn storage_url(config: &AppConfig, dirs: &Dirs) -> String {
    std::env::var("ORB_STORAGE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| config.storage.url.clone())
        .unwrap_or_else(|| {
            orb_store::sqlite_url(&dirs.work_dir.path.join(orb_store::DEFAULT_SQLITE_FILE))
        })
}

pub async fn open_store(config: &AppConfig, dirs: &Dirs) -> CliResult<Store> {
    let url = storage_url(config, dirs);
    if url.starts_with("sqlite:") {
        std::fs::create_dir_all(&dirs.work_dir.path).map_err(|e| {
            Failure::generic(format!(
                "cannot create the work directory {} ({}): {e}",
                dirs.work_dir.path.display(),
                dirs.work_dir.origin
            ))
        })?;
    }
    Ok(Store::open(&url).await?)
}

/// Reads HostFactory JSON from `-f` or `-d`; `None` when neither was given.
pub fn hostfactory_input(global: &GlobalArgs) -> CliResult<Option<Value>> {
    let (text, origin) = match (&global.file, &global.data) {
        (Some(path), _) => (
            std::fs::read_to_string(path).map_err(|e| {
                Failure::invalid(format!("cannot read input file {}: {e}", path.display()))
            })?,
            format!("input file {}", path.display()),
        ),
        (None, Some(data)) => (data.clone(), "-d input".to_string()),
        (None, None) => return Ok(None),
    };
    if text.trim().is_empty() {
        return Ok(Some(Value::Object(Default::default())));
    }
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Failure::invalid(format!("{origin} is not valid JSON: {e}")))
}
