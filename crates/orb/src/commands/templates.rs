//! `orb templates list|show|validate|render|generate`.

mod bodies;

use orb_core::hostfactory::output::template_attributes;
use orb_core::template::wire::template_to_hostfactory;
use orb_core::template::{ProviderApi, Template};
use serde_json::{Value, json};

use orb_k8s::dry_run::{Client, DryRunVerdict, server_dry_run};

use self::bodies::K8sTarget;
use crate::cli::TemplatesCommand;
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::hostfactory;
use crate::render::{self, Table, or_dash};
use crate::session::{Output, Session};
use crate::template_checks::{PREVIEW_NOTE, check_template};
use crate::template_checks::{Rendering, render_bodies};
use orb_broker::catalog::Catalog;

pub async fn run(session: &Session, command: TemplatesCommand) -> CliResult<Output> {
    match command {
        TemplatesCommand::List => list(session).await,
        TemplatesCommand::Show { template_id } => show(session, &template_id),
        TemplatesCommand::Validate { server } => validate(session, server).await,
        TemplatesCommand::Render { template_id, count } => {
            render_template(session, &template_id, count)
        }
        TemplatesCommand::Generate {
            provider_api,
            all_apis,
        } => generate(session, &provider_api, all_apis),
    }
}

async fn list(session: &Session) -> CliResult<Output> {
    let loaded = session.config()?;
    // HostFactory sends {} here; it must still be JSON.
    context::hostfactory_input(&session.global)?;
    if session.is_hostfactory(&loaded) {
        let env = session.hostfactory_env(&loaded).await?;
        return hostfactory::get_available_templates(&env)
            .await
            .map(Output::from);
    }
    // Strict: a Kubernetes provider that cannot be built is an error, not an unchecked list.
    let env = session.hostfactory_env(&loaded).await?;
    if let Some(failure) = env.catalog_failure {
        return Err(failure);
    }
    let mut stderr: Vec<String> = env
        .warnings
        .iter()
        .map(|w| format!("warning: {w}"))
        .collect();
    let list = env.broker.servable_templates().await?;
    stderr.extend(list.unservable.iter().map(|(id, reason)| {
        format!("warning: template {id:?} is not listed (every request would be refused): {reason}")
    }));
    let stdout = {
        let plain: Vec<Value> = list
            .listed
            .iter()
            .map(|l| {
                let mut v = serde_json::to_value(&l.template).unwrap_or(Value::Null);
                v["max_machines"] = json!(l.max_machines);
                v["available_number"] = json!(l.available);
                v["attributes"] = json!(template_attributes(&l.template));
                v
            })
            .collect();
        render::render(&plain, session.global.output, || {
            let mut t = Table::new(vec!["TEMPLATE", "API", "IMAGE", "MAX", "AVAILABLE"]);
            for l in &list.listed {
                t.row(vec![
                    l.template.template_id.clone(),
                    l.template.api().to_string(),
                    or_dash(l.template.container_image.as_deref()),
                    l.max_machines.to_string(),
                    l.available
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

/// `template_id` of `catalog`, or why there is none (refused at load, or not defined).
fn defined<'c>(catalog: &'c Catalog, template_id: &str) -> CliResult<&'c Template> {
    Ok(catalog.lookup(template_id)?)
}

fn show(session: &Session, template_id: &str) -> CliResult<Output> {
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?;
    let catalog = context::load_catalog(&session.dirs, entry)?;
    let template = defined(&catalog, template_id)?;
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

/// The Kubernetes provider of the loaded config, when it is one.
fn k8s_target(
    session: &Session,
    loaded: Option<&context::LoadedConfig>,
    provider: Option<&orb_core::config::ProviderEntry>,
) -> CliResult<Option<K8sTarget>> {
    match (loaded, provider) {
        (Some(loaded), Some(entry)) => {
            K8sTarget::for_entry(loaded, entry, &session.dirs.config_dir.path)
        }
        _ => Ok(None),
    }
}

/// One `--server` dry run of every body an acquire of `template` would send.
async fn dry_run_bodies(
    client: &Client,
    template: &Template,
    planned: &orb_k8s::provider::PlannedAcquire,
    problems: &mut Vec<String>,
) -> CliResult<Vec<Value>> {
    let path = planned.workload.path.as_str();
    let mut entries = Vec::new();
    for body in &planned.workload.bodies() {
        let (kind, name) = (bodies::body_kind(body), bodies::body_name(body));
        let answer = server_dry_run(client, body)
            .await
            .map_err(|e| Failure::provider(e.to_string()))?;
        entries.push(match &answer {
            DryRunVerdict::Accepted { .. } => json!({
                "template": template.template_id, "kind": kind, "name": name,
                "path": path, "verdict": "accepted",
            }),
            DryRunVerdict::Rejected {
                code,
                reason,
                message,
            } => {
                problems.push(format!(
                    "the apiserver rejected {kind} {name:?} in a dry run ({code} {reason}): \
                     {message}"
                ));
                json!({
                    "template": template.template_id, "kind": kind, "name": name,
                    "path": path, "verdict": "rejected",
                    "code": code, "reason": reason, "message": message,
                })
            }
        });
    }
    Ok(entries)
}

async fn validate(session: &Session, server: bool) -> CliResult<Output> {
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
    let target = k8s_target(session, loaded.as_ref(), provider.as_ref())?;
    if server && target.is_none() {
        return Err(Failure::invalid(match &provider {
            Some(entry) => format!(
                "--server needs a Kubernetes provider, but provider {:?} has type {:?}; pick one \
                 with --provider-name or run `orb init`",
                entry.name, entry.provider_type
            ),
            None => "--server needs a Kubernetes provider in config.json; run `orb init` \
                     (e.g. `orb init --kubeconfig <path>`) first"
                .to_string(),
        }));
    }
    let provider = target.as_ref().map(K8sTarget::provider);
    // `--server` dry-runs with the provider's own client: the connection an acquire uses.
    let client = match (server, provider) {
        (true, Some(provider)) => Some(provider.kube_client().await.map_err(|e| {
            Failure::provider(format!("cannot connect for the server-side dry run: {e}"))
        })?),
        _ => None,
    };
    let mut valid = Vec::new();
    let mut invalid = Vec::new();
    let mut warnings: Vec<String> = catalog
        .warnings
        .iter()
        .filter(|w| !w.contains("cannot be read"))
        .cloned()
        .collect();
    if let Some(target) = &target {
        warnings.extend(target.config_warnings().iter().cloned());
    }
    let mut server_verdicts = Vec::new();
    for template in &catalog.templates {
        let id = &template.template_id;
        let verdict = check_template(provider, template);
        warnings.extend(
            verdict
                .warnings
                .iter()
                .map(|w| format!("template {id:?}: {w}")),
        );
        let mut problems = verdict.problems;
        if let (Some(client), Some(planned)) = (&client, &verdict.planned) {
            server_verdicts.extend(dry_run_bodies(client, template, planned, &mut problems).await?);
        }
        if problems.is_empty() {
            valid.push(id.clone());
        } else {
            invalid.push(json!({"template": id, "problems": problems}));
        }
    }
    for refused in &catalog.refused {
        invalid.push(json!({"template": refused.template_id, "problems": [refused.reason]}));
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
    let mut reply = json!({
        "file": path,
        "valid": valid,
        "invalid": invalid,
        "warnings": warnings,
    });
    if server {
        reply["server"] = Value::Array(server_verdicts);
    }
    let ok_text = if server {
        "ok (accepted by the apiserver in a dry run)"
    } else {
        "ok"
    };
    let stdout = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["TEMPLATE", "RESULT"]);
        valid
            .iter()
            .for_each(|id| t.row(vec![id.clone(), ok_text.into()]));
        for entry in &invalid {
            t.row(vec![
                entry["template"].as_str().unwrap_or("?").to_string(),
                entry["problems"].to_string(),
            ]);
        }
        t
    })?;
    let mut stderr: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
    if provider.is_some() {
        stderr.push(format!("note: {PREVIEW_NOTE}"));
    }
    if invalid.is_empty() {
        return Ok(Output {
            stdout,
            stderr,
            exit: 0,
        });
    }
    stderr.push(format!(
        "error: {} of {} templates in {} have problems (listed above)",
        invalid.len(),
        invalid.len() + valid.len(),
        path.display()
    ));
    Ok(Output {
        stdout,
        stderr,
        exit: 2,
    })
}

/// `orb templates render`: the exact bodies an acquire of `count` machines would send.
fn render_template(session: &Session, template_id: &str, count: u32) -> CliResult<Output> {
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?;
    let catalog = context::load_catalog(&session.dirs, entry)?;
    let template = defined(&catalog, template_id)?;
    let problems = template.problems();
    if !problems.is_empty() {
        return Err(Failure::invalid(format!(
            "template {template_id:?} cannot be rendered: {}; fix it (`orb templates validate` \
             lists every problem)",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let target =
        K8sTarget::for_entry(&loaded, entry, &session.dirs.config_dir.path)?.ok_or_else(|| {
            Failure::invalid(format!(
                "orb templates render shows Kubernetes bodies, but provider {:?} has type {:?}; \
                 pick a Kubernetes provider with --provider-name",
                entry.name, entry.provider_type
            ))
        })?;
    let request_id = orb_k8s::native_spec::preview_request_id();
    let rendered = match render_bodies(target.provider(), template, count, &request_id) {
        Rendering::Ok(rendered) => rendered,
        Rendering::Fails { problems, warnings } => {
            let mut stderr: Vec<String> =
                warnings.iter().map(|w| format!("warning: {w}")).collect();
            stderr.extend(problems.iter().map(|p| format!("error: {p}")));
            return Ok(Output {
                stdout: String::new(),
                stderr,
                exit: 2,
            });
        }
    };
    let document = bodies::as_document(&rendered.bodies);
    let stdout = render::render(&document, session.global.output, || {
        let mut t = Table::new(vec!["KIND", "NAME", "NAMESPACE", "BUILT BY"]);
        for body in &rendered.bodies {
            t.row(vec![
                bodies::body_kind(body).to_string(),
                bodies::body_name(body).to_string(),
                or_dash(body.pointer("/metadata/namespace").and_then(Value::as_str)),
                rendered.path.as_str().to_string(),
            ]);
        }
        t
    })?;
    let mut stderr: Vec<String> = target
        .config_warnings()
        .iter()
        .map(|w| format!("warning: {w}"))
        .collect();
    stderr.push(format!(
        "note: {} {} built by the {} path for request {} (a fresh preview id); a real \
         acquire gets its own id, and the names and request-id labels built from it",
        rendered.bodies.len(),
        if rendered.bodies.len() == 1 {
            "body"
        } else {
            "bodies"
        },
        rendered.path.as_str(),
        request_id,
    ));
    stderr.extend(rendered.warnings.iter().map(|w| format!("warning: {w}")));
    Ok(Output {
        stdout,
        stderr,
        exit: 0,
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
