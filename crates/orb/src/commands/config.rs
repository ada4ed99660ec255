//! `orb config show`: directories, the application config, and the Kubernetes provider's
//! effective settings with, on request, the source of every value.

use orb_core::config::ProviderEntry;
use orb_k8s::config::{
    ConfigLayers, OutputFormat as ProviderFormat, ResolvedConfig, TemplateOverrides,
    layer_from_config_value, render_effective,
};
use serde_json::{Value, json};

use crate::cli::{ConfigCommand, OutputFormat};
use crate::context::{self, LoadedConfig};
use crate::failure::{CliResult, Failure};
use crate::provider_factory::KUBERNETES_TYPES;
use crate::render::{self, Table};
use crate::session::{Output, Session};

pub fn run(session: &Session, command: ConfigCommand) -> CliResult<Output> {
    let ConfigCommand::Show { origin, template } = command;
    let dirs = &session.dirs;
    let exists = dirs.config_file.path.is_file();
    let loaded = if exists {
        Some(session.config()?)
    } else {
        None
    };
    let storage = loaded
        .as_ref()
        .map(|l| orb_store::redact(&context::storage_url(&l.config, dirs)));
    let scheduler = context::scheduler(&session.global, loaded.as_ref().map(|l| &l.config));
    let provider = match &loaded {
        Some(l) => effective_provider(session, l, template.as_deref())?,
        None if template.is_some() => {
            return Err(Failure::invalid(format!(
                "--template needs a config file, and {} does not exist; run `orb init` first",
                dirs.config_file.path.display()
            )));
        }
        None => None,
    };
    let provider_json = match &provider {
        Some((entry, resolved)) => json!({
            "name": entry.name,
            "type": entry.provider_type,
            "settings": serde_json::from_str::<Value>(&render_effective(
                resolved,
                ProviderFormat::Json,
                origin
            ))
            .unwrap_or(Value::Null),
            "warnings": resolved.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "security_opt_outs": resolved
                .security_opt_outs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
        }),
        None => Value::Null,
    };
    let reply = json!({
        "config_file": {"path": dirs.config_file.path, "origin": dirs.config_file.origin, "exists": exists},
        "config_dir": dirs.config_dir,
        "work_dir": dirs.work_dir,
        "log_dir": dirs.log_dir,
        "storage_url": storage,
        "scheduler": format!("{scheduler:?}").to_ascii_lowercase(),
        "config": loaded.as_ref().map(|l| l.raw.clone()).unwrap_or(Value::Null),
        "provider": provider_json,
    });
    let mut text = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["SETTING", "VALUE", "FROM"]);
        for (name, path) in [
            ("config file", &dirs.config_file),
            ("config dir", &dirs.config_dir),
            ("work dir", &dirs.work_dir),
            ("log dir", &dirs.log_dir),
        ] {
            t.row(vec![
                name.into(),
                path.path.display().to_string(),
                path.origin.clone(),
            ]);
        }
        t.row(vec![
            "storage".into(),
            render::or_dash(storage.as_deref()),
            "-".into(),
        ]);
        t
    })?;
    if let (OutputFormat::Table, Some((entry, resolved))) = (session.global.output, &provider) {
        text.push_str(&format!(
            "\nprovider {:?} (type {}): effective settings\n",
            entry.name, entry.provider_type
        ));
        text.push_str(&render_effective(resolved, ProviderFormat::Table, origin));
    }
    let note = (!exists).then(|| {
        format!(
            "note: {} does not exist yet; run `orb init`",
            dirs.config_file.path.display()
        )
    });
    let mut out = Output::ok(text).note(note);
    // The table already ends with them; JSON and YAML carry them as fields, and stderr says
    // them for whoever only reads the terminal.
    if session.global.output != OutputFormat::Table
        && let Some((_, resolved)) = &provider
    {
        out.stderr
            .extend(resolved.warnings.iter().map(|w| format!("warning: {w}")));
        out.stderr.extend(
            resolved
                .security_opt_outs
                .iter()
                .map(|o| format!("note: {o}")),
        );
    }
    Ok(out)
}

/// The selected provider's effective settings, when it is a Kubernetes provider: the entry's
/// `config` block, `ORB_K8S_*` over it, and (with `--template`) that template's
/// `provider_config` over both. Every problem is reported at once, naming its source.
pub(super) fn effective_provider(
    session: &Session,
    loaded: &LoadedConfig,
    template_id: Option<&str>,
) -> CliResult<Option<(ProviderEntry, ResolvedConfig)>> {
    let entry = context::select_provider(&session.global, loaded)?;
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
    Ok(Some((entry.clone(), resolved)))
}
