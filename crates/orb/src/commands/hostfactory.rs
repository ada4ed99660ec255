//! `orb hostfactory install`.

use std::path::PathBuf;

use serde_json::json;

use crate::cli::HostfactoryCommand;
use crate::failure::{CliResult, Failure};
use crate::render;
use crate::scripts::{SCRIPTS, script_text};
use crate::session::{Output, Session};

pub fn run(session: &Session, command: HostfactoryCommand) -> CliResult<Output> {
    let HostfactoryCommand::Install {
        dir,
        orb_path,
        force,
    } = command;
    let orb_path = match orb_path {
        Some(path) => path,
        None => std::env::current_exe().map_err(|e| {
            Failure::generic(format!(
                "cannot tell where this orb binary is ({e}); pass --orb-path"
            ))
        })?,
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::generic(format!("cannot create {}: {e}", dir.display())))?;
    let targets: Vec<PathBuf> = SCRIPTS.iter().map(|(name, _, _)| dir.join(name)).collect();
    let existing: Vec<String> = targets
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !force && !existing.is_empty() {
        return Err(Failure::invalid(format!(
            "{} already exist; pass --force to overwrite them",
            existing.join(", ")
        )));
    }
    for ((name, args, purpose), path) in SCRIPTS.iter().zip(&targets) {
        std::fs::write(path, script_text(name, args, purpose, &orb_path))
            .map_err(|e| Failure::generic(format!("cannot write {}: {e}", path.display())))?;
        make_executable(path)?;
    }
    let reply = json!({"installed": targets, "orb": orb_path});
    let text = render::render(&reply, session.global.output, || {
        let mut t = render::Table::new(vec!["SCRIPT"]);
        targets
            .iter()
            .for_each(|p| t.row(vec![p.display().to_string()]));
        t
    })?;
    Ok(Output::ok(text))
}

#[cfg(unix)]
fn make_executable(path: &std::path::Path) -> CliResult<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Failure::generic(format!("cannot make {} executable: {e}", path.display())))
}

#[cfg(not(unix))]
fn make_executable(_path: &std::path::Path) -> CliResult<()> {
    Ok(())
}
