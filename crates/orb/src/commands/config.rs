//! `orb config show`: directories, the application config, and the Kubernetes provider's
//! effective settings with, on request, the source of every value.

use orb_core::config::ProviderEntry;
use orb_k8s::config::{OutputFormat as ProviderFormat, ResolvedConfig, render_effective};

use crate::cli::{ConfigCommand, OutputFormat};
use crate::context::{self, LoadedConfig};
use crate::effective_config::{EffectiveConfig, kubernetes_settings};
use crate::failure::{CliResult, Failure};
use crate::render::{self, Table};
use crate::serve::config_write::{set_config_value, shown_in, value_from_text};
use crate::session::{Output, Session};

pub fn run(session: &Session, command: ConfigCommand) -> CliResult<Output> {
    let (origin, template) = match command {
        ConfigCommand::Show { origin, template } => (origin, template),
        ConfigCommand::Set { key, value } => return set(session, &key, &value),
    };
    let effective = EffectiveConfig::capture(session, template.as_deref())?;
    let dirs = &session.dirs;
    let exists = effective.config_exists;
    let storage = effective.storage_url();
    let provider = match (&effective.entry, &effective.provider) {
        (Some(entry), Some(resolved)) => Some((entry, resolved)),
        _ => None,
    };
    let reply = effective.show_document(origin);
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

/// The selected provider's effective settings, when it is a Kubernetes provider (see
/// [`kubernetes_settings`]); `orb doctor` checks them.
pub(super) fn effective_provider(
    session: &Session,
    loaded: &LoadedConfig,
    template_id: Option<&str>,
) -> CliResult<Option<(ProviderEntry, ResolvedConfig)>> {
    let entry = context::select_provider(&session.global, loaded)?;
    Ok(kubernetes_settings(session, loaded, entry, template_id)?.map(|r| (entry.clone(), r)))
}

/// `orb config set KEY VALUE`: the same write as `PUT /api/v1/config/{key}`.
fn set(session: &Session, key: &str, value: &str) -> CliResult<Output> {
    let file = &session.dirs.config_file.path;
    let env = std::env::vars()
        .filter(|(k, _)| k.to_ascii_uppercase().starts_with("ORB_K8S_"))
        .collect();
    let set = set_config_value(file, key, value_from_text(value), &env)
        .map_err(|e| Failure::invalid(e.to_string()))?;
    let shown = shown_in(&set.after, key).unwrap_or(serde_json::Value::Null);
    let was = shown_in(&set.before, key);
    let message = if set.written {
        format!(
            "set {key} to {shown} in {} (was {}); orb serve takes it when it next starts (a \
             running server: orb server stop, then orb server start), other orb commands from \
             their next run",
            file.display(),
            was.map_or_else(|| "not set".to_string(), |v| v.to_string())
        )
    } else {
        format!(
            "{key} is already {shown} in {}; nothing written",
            file.display()
        )
    };
    let reply = serde_json::json!({
        "key": key,
        "value": shown,
        "persisted": set.written,
        "path": file.display().to_string(),
        "restart_required": set.written,
        "warnings": set.warnings,
        "message": message,
    });
    let text = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["MESSAGE"]);
        t.row(vec![message.clone()]);
        t
    })?;
    Ok(Output::ok(text))
}
