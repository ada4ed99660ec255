//! `orb templates list|show|validate|generate`.

use orb_core::hostfactory::output::{TemplateUsage, template_entry, templates_reply};
use orb_core::template::wire::template_to_hostfactory;
use orb_core::template::{ProviderApi, Template};
use orb_store::MachineFilter;
use serde_json::{Value, json};

use super::{Output, Session};
use crate::cli::TemplatesCommand;
use crate::context::{self, Catalog};
use crate::failure::{CliResult, Failure};
use crate::render::{self, Table, or_dash};

pub async fn run(session: &Session, command: TemplatesCommand) -> CliResult<Output> {
    match command {
        TemplatesCommand::List => list(session).await,
        TemplatesCommand::Show { template_id } => show(session, &template_id),
        TemplatesCommand::Validate => validate(session),
        TemplatesCommand::Generate {
            provider_api,
            all_apis,
        } => generate(session, &provider_api, all_apis),
    }
}

fn warnings_of(catalog: &Catalog) -> Vec<String> {
    catalog
        .warnings
        .iter()
        .map(|w| format!("warning: {w}"))
        .collect()
}

async fn list(session: &Session) -> CliResult<Output> {
    let loaded = session.config()?;
    // HostFactory sends {} here; it must still be JSON.
    context::hostfactory_input(&session.global)?;
    let entry = context::select_provider(&session.global, &loaded)?;
    let catalog = context::load_catalog(&session.dirs, entry)?;
    let mut stderr = warnings_of(&catalog);
    let mut usable = Vec::new();
    for template in &catalog.templates {
        let problems = template.problems();
        if problems.is_empty() {
            usable.push(template);
        } else {
            stderr.push(format!(
                "warning: template {:?} is skipped: {}",
                template.template_id,
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    let store = context::open_store(&loaded.config, &session.dirs).await?;
    let live = store
        .list_machines(&MachineFilter {
            live_only: true,
            ..Default::default()
        })
        .await?;
    let default_max = loaded.config.template.max_number;
    let usage = |t: &Template| TemplateUsage {
        live_machine_names: live
            .iter()
            .filter(|m| m.template_id == t.template_id)
            .map(|m| m.name.clone())
            .collect(),
    };
    let entries: Vec<_> = usable
        .iter()
        .map(|t| template_entry(t, t.max_machines_or(default_max), &usage(t)))
        .collect();
    let stdout = if session.is_hostfactory(&loaded) {
        render::json(&templates_reply(entries))?
    } else {
        let plain: Vec<Value> = usable
            .iter()
            .zip(&entries)
            .map(|(t, e)| {
                let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
                v["max_machines"] = e["maxNumber"].clone();
                v["available_number"] = e.get("availableNumber").cloned().unwrap_or(Value::Null);
                v["attributes"] = e["attributes"].clone();
                v
            })
            .collect();
        render::render(&plain, session.global.output, || {
            let mut t = Table::new(vec!["TEMPLATE", "API", "IMAGE", "MAX", "AVAILABLE"]);
            for (template, entry) in usable.iter().zip(&entries) {
                t.row(vec![
                    template.template_id.clone(),
                    template.api().to_string(),
                    or_dash(template.container_image.as_deref()),
                    entry["maxNumber"].to_string(),
                    entry
                        .get("availableNumber")
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "unlimited".into()),
                ]);
            }
            t
        })?
    };
    Ok(Output {
        stdout,
        stderr,
        exit: 0,
    })
}

fn show(session: &Session, template_id: &str) -> CliResult<Output> {
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?;
    let catalog = context::load_catalog(&session.dirs, entry)?;
    let template = catalog.get(template_id).ok_or_else(|| {
        Failure::invalid(format!(
            "template {template_id:?} is not defined; available templates: {}",
            catalog.ids()
        ))
    })?;
    let value = if session.is_hostfactory(&loaded) {
        Value::Object(template_to_hostfactory(template))
    } else {
        serde_json::to_value(template).unwrap_or(Value::Null)
    };
    let stdout = render::render(&value, session.global.output, || {
        let mut t = Table::new(vec!["FIELD", "VALUE"]);
        if let Value::Object(map) = &value {
            for (k, v) in map {
                t.row(vec![k.clone(), v.to_string()]);
            }
        }
        t
    })?;
    let problems = template.problems();
    let mut out = Output::ok(stdout);
    out.stderr
        .extend(problems.iter().map(|p| format!("warning: {p}")));
    Ok(out)
}

fn validate(session: &Session) -> CliResult<Output> {
    let loaded = session.config().ok();
    let provider = match &loaded {
        Some(l) => Some(context::select_provider(&session.global, l)?.clone()),
        None => None,
    };
    let path = match (&session.global.file, &provider) {
        (Some(path), _) => path.clone(),
        (None, Some(entry)) => context::find_template_file(&session.dirs.config_dir.path, entry)?,
        (None, None) => {
            return Err(Failure::invalid(
                "nothing to validate: pass -f <templates.json> or run `orb init` first",
            ));
        }
    };
    let fallback = orb_core::config::ProviderEntry {
        name: "none".into(),
        provider_type: "none".into(),
        enabled: true,
        default: false,
        config: Value::Null,
        template_defaults: Default::default(),
    };
    let catalog = context::load_catalog_from(&path, provider.as_ref().unwrap_or(&fallback))?;
    let mut valid = Vec::new();
    let mut invalid = Vec::new();
    for template in &catalog.templates {
        let problems = template.problems();
        if problems.is_empty() {
            valid.push(template.template_id.clone());
        } else {
            invalid.push(json!({
                "template": template.template_id,
                "problems": problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }));
        }
    }
    // Templates that could not even be read are errors too.
    let unreadable: Vec<&String> = catalog
        .warnings
        .iter()
        .filter(|w| w.contains("cannot be read"))
        .collect();
    for message in &unreadable {
        invalid.push(json!({"template": null, "problems": [message]}));
    }
    let reply = json!({
        "file": path,
        "valid": valid,
        "invalid": invalid,
        "warnings": catalog.warnings.iter().filter(|w| !w.contains("cannot be read")).collect::<Vec<_>>(),
    });
    let stdout = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["TEMPLATE", "RESULT"]);
        valid
            .iter()
            .for_each(|id| t.row(vec![id.clone(), "ok".into()]));
        for entry in &invalid {
            t.row(vec![
                entry["template"].as_str().unwrap_or("?").to_string(),
                entry["problems"].to_string(),
            ]);
        }
        t
    })?;
    if invalid.is_empty() {
        return Ok(Output::ok(stdout));
    }
    Ok(Output {
        stdout,
        stderr: vec![format!(
            "error: {} of {} templates in {} have problems (listed above)",
            invalid.len(),
            invalid.len() + valid.len(),
            path.display()
        )],
        exit: 2,
    })
}

/// Example templates in HostFactory spelling.
pub(super) fn example_templates(apis: &[ProviderApi], image: &str, provider_name: &str) -> Value {
    let templates: Vec<Value> = apis
        .iter()
        .map(|api| {
            let id = format!("{}-worker", api.as_str().to_ascii_lowercase());
            let mut t = json!({
                "templateId": id,
                "name": format!("{} worker", api),
                "providerName": provider_name,
                "providerApi": api.as_str(),
                "maxNumber": 10,
                "imageId": image,
                "priceType": "ondemand",
                "instanceTags": "team=hpc",
                "command": ["sh", "-c", "sleep 3600"],
                "resourceRequests": {"cpu": "500m", "memory": "256Mi"},
                "resourceLimits": {"cpu": "1", "memory": "512Mi"},
            });
            if *api == ProviderApi::Job {
                t["command"] = json!(["sh", "-c", "echo work done"]);
                t["ttlSecondsAfterFinished"] = json!(600);
            }
            t
        })
        .collect();
    json!({"scheduler_type": "hostfactory", "templates": templates})
}

fn generate(session: &Session, provider_api: &str, all_apis: bool) -> CliResult<Output> {
    let apis: Vec<ProviderApi> = if all_apis {
        ProviderApi::ALL.to_vec()
    } else {
        vec![provider_api.parse().map_err(Failure::invalid)?]
    };
    let provider_name = session
        .global
        .provider_name
        .as_deref()
        .unwrap_or("kubernetes");
    let value = example_templates(&apis, "busybox:1.36", provider_name);
    Ok(Output::ok(render::render(
        &value,
        session.global.output,
        || {
            let mut t = Table::new(vec!["TEMPLATE", "API"]);
            for api in &apis {
                t.row(vec![
                    format!("{}-worker", api.as_str().to_ascii_lowercase()),
                    api.to_string(),
                ]);
            }
            t
        },
    )?))
}
