//! `orb config show`.

use serde_json::{Value, json};

use super::{Output, Session};
use crate::cli::ConfigCommand;
use crate::context;
use crate::failure::CliResult;
use crate::render::{self, Table};

pub fn run(session: &Session, command: ConfigCommand) -> CliResult<Output> {
    let ConfigCommand::Show = command;
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
    let reply = json!({
        "config_file": {"path": dirs.config_file.path, "origin": dirs.config_file.origin, "exists": exists},
        "config_dir": dirs.config_dir,
        "work_dir": dirs.work_dir,
        "log_dir": dirs.log_dir,
        "storage_url": storage,
        "scheduler": format!("{scheduler:?}").to_ascii_lowercase(),
        "config": loaded.as_ref().map(|l| l.raw.clone()).unwrap_or(Value::Null),
    });
    let text = render::render(&reply, session.global.output, || {
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
    let note = (!exists).then(|| {
        format!(
            "note: {} does not exist yet; run `orb init`",
            dirs.config_file.path.display()
        )
    });
    Ok(Output::ok(text).note(note))
}
