//! `orb init`: a working config.json and an example template file.

use std::path::{Path, PathBuf};

use orb_core::template::ProviderApi;
use serde_json::{Map, Value, json};

use super::templates::example_templates;
use crate::cli::{InitArgs, SchedulerKind};
use crate::failure::{CliResult, Failure};
use crate::render;
use crate::session::{Output, Session};

fn local_control_plane_kubeconfig() -> PathBuf {
    let state = std::env::var("ORB_CP_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(".state/control-plane"));
    state.join("admin.kubeconfig")
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The config `orb init` writes, as data.
pub fn initial_config(
    args: &InitArgs,
    kubeconfig: Option<&Path>,
    scheduler: SchedulerKind,
) -> Value {
    let mut provider_config = Map::new();
    provider_config.insert("namespace".into(), json!(args.namespace));
    if let Some(path) = kubeconfig {
        provider_config.insert("kubeconfig_path".into(), json!(path));
    }
    if let Some(context) = &args.context {
        provider_config.insert("context".into(), json!(context));
    }
    json!({
        "scheduler": {"type": match scheduler { SchedulerKind::Hostfactory => "hostfactory", SchedulerKind::Default => "default" }},
        "providers": [{
            "name": args.name,
            "type": "k8s",
            "enabled": true,
            "default": true,
            "config": provider_config,
            "template_defaults": {"machine_image": args.image, "provider_api": "Pod", "price_type": "ondemand"}
        }],
        "storage": {},
        "request": {"default_timeout": 300, "default_grace_period": 300, "max_machines_per_request": 100},
        "template": {"max_number": 10}
    })
}

pub fn run(session: &Session, args: InitArgs) -> CliResult<Output> {
    let kubeconfig = if args.local_control_plane {
        let path = local_control_plane_kubeconfig();
        if !path.is_file() {
            return Err(Failure::invalid(format!(
                "no local control plane kubeconfig at {}; start it with `tools/control-plane/cp up` \
                 (or set ORB_CP_STATE_DIR)",
                path.display()
            )));
        }
        Some(absolute(&path))
    } else if let Some(path) = &args.kubeconfig {
        if !path.is_file() {
            return Err(Failure::invalid(format!(
                "kubeconfig {} does not exist; pass the path of an existing file",
                path.display()
            )));
        }
        Some(absolute(path))
    } else {
        None
    };
    let dir = args
        .config_dir
        .clone()
        .unwrap_or_else(|| session.dirs.config_dir.path.clone());
    let config_file = dir.join("config.json");
    let templates_file = dir.join("templates.json");
    let existing: Vec<String> = [&config_file, &templates_file]
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !args.force && !existing.is_empty() {
        return Err(Failure::invalid(format!(
            "{} already exist; pass --force to overwrite",
            existing.join(" and ")
        )));
    }
    let scheduler = session.global.scheduler.unwrap_or(SchedulerKind::Default);
    let config = initial_config(&args, kubeconfig.as_deref(), scheduler);
    let templates = example_templates(&ProviderApi::ALL, &args.image, &args.name);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::generic(format!("cannot create {}: {e}", dir.display())))?;
    for (path, value) in [(&config_file, &config), (&templates_file, &templates)] {
        std::fs::write(path, render::json(value)?)
            .map_err(|e| Failure::generic(format!("cannot write {}: {e}", path.display())))?;
    }
    let reply = json!({"config_file": config_file, "templates_file": templates_file});
    let text = render::render(&reply, session.global.output, || {
        let mut t = render::Table::new(vec!["WROTE"]);
        t.row(vec![config_file.display().to_string()]);
        t.row(vec![templates_file.display().to_string()]);
        t
    })?;
    Ok(Output::ok(text))
}
