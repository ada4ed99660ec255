//! `orb machines request|return|list`.

use std::io::IsTerminal;
use std::time::Duration;

use orb_core::hostfactory::input::{RequestMachinesInput, ReturnMachinesInput};
use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_store::MachineFilter;

use crate::cli::MachinesCommand;
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::hostfactory;
use crate::hostfactory::daemon_target::Choice;
use crate::render::{self, Table, or_dash};
use crate::session::{Output, Session};
use orb_broker::UnknownNames;
use orb_broker::watch::Pace;
use orb_broker::{Broker, RequestView};

/// The longest `--wait` goes between two status reads (it starts at a quarter of this and
/// backs off while nothing changes).
const WAIT_POLL: Duration = Duration::from_secs(2);

pub async fn run(session: &Session, command: MachinesCommand) -> CliResult<Output> {
    match command {
        MachinesCommand::Request {
            template_id,
            count,
            wait,
            timeout,
        } => request(session, template_id, count, wait.then_some(timeout)).await,
        MachinesCommand::Return {
            machine_ids,
            request_id,
        } => return_machines(session, machine_ids, request_id).await,
        MachinesCommand::List { all } => list(session, all).await,
        MachinesCommand::Purge { machine_id } => purge(session, &machine_id).await,
    }
}

async fn purge(session: &Session, key: &str) -> CliResult<Output> {
    let loaded = session.config()?;
    let (broker, _) = session.broker(&loaded).await?;
    let machine = broker.purge_machine(key).await?;
    let reply = serde_json::json!({"purged": true, "machine_id": machine.machine_id});
    Ok(Output::ok(render::render(
        &reply,
        session.global.output,
        || {
            let mut t = Table::new(vec!["PURGED MACHINE"]);
            t.row(vec![machine.machine_id.clone()]);
            t
        },
    )?))
}

fn parse_input<T>(
    session: &Session,
    parse: impl Fn(&serde_json::Value) -> Result<T, orb_core::hostfactory::input::HfInputError>,
) -> CliResult<Option<T>> {
    context::hostfactory_input(&session.global)?
        .map(|value| parse(&value).map_err(|e| Failure::invalid(e.to_string())))
        .transpose()
}

async fn request(
    session: &Session,
    template_id: Option<String>,
    count: Option<u32>,
    wait: Option<Option<u64>>,
) -> CliResult<Output> {
    let (template_id, count) = match parse_input(session, RequestMachinesInput::parse)? {
        Some(input) => (input.template_id, input.machine_count),
        None => match (template_id, count) {
            (Some(t), Some(c)) => (t, c),
            _ => {
                return Err(Failure::invalid(
                    "machines request needs TEMPLATE and COUNT (e.g. `orb machines request worker 2`), \
                     or HostFactory JSON via -f/-d",
                ));
            }
        },
    };
    let loaded = session.config()?;
    let (broker, warnings) = session.broker(&loaded).await?;
    if broker.catalog.current().templates.is_empty() && !warnings.is_empty() {
        return Err(Failure::invalid(warnings.join("; ")));
    }
    let mut view = broker.request_machines(&template_id, count).await?;
    if let Some(timeout) = wait {
        let secs = timeout.unwrap_or(loaded.config.request.default_timeout);
        view = wait_for(&broker, view, Duration::from_secs(secs)).await?;
    }
    submitted(session, session.is_hostfactory(&loaded), view, warnings)
}

async fn return_machines(
    session: &Session,
    machine_ids: Vec<String>,
    request_id: Option<String>,
) -> CliResult<Output> {
    let hf_input = parse_input(session, ReturnMachinesInput::parse)?;
    let loaded = session.config()?;
    let (broker, warnings) = session.broker(&loaded).await?;
    let view = match (hf_input, request_id) {
        (Some(input), _) => {
            broker
                .return_machines(
                    &hostfactory::machine_keys(&input.machines),
                    UnknownNames::ReportAsFailed,
                )
                .await?
        }
        (None, Some(id)) => {
            let id = RequestId::parse(&id).map_err(|e| Failure::invalid(e.to_string()))?;
            broker.return_request_machines(&id).await?
        }
        (None, None) if !machine_ids.is_empty() => broker.return_named(&machine_ids).await?,
        (None, None) => {
            return Err(Failure::invalid(
                "name the machines to return (`orb machines return <id>...`), or pass --request-id, \
                 or HostFactory JSON via -f/-d",
            ));
        }
    };
    let hostfactory = session.is_hostfactory(&loaded);
    let left_out = view.note.clone().filter(|_| !hostfactory);
    let mut output = submitted(session, hostfactory, view, warnings)?;
    // HostFactory reads the return's message; a person or a script needs the exit code.
    if let Some(left_out) = left_out
        && output.exit == 0
    {
        output.exit = PARTIAL_RETURN_EXIT;
        output
            .stderr
            .push(format!("warning: partial return: {left_out}"));
    }
    Ok(output)
}

/// The exit code of a return made for only some of the machines named (docs/cli.md).
const PARTIAL_RETURN_EXIT: i32 = 4;

/// The reply to a request or return just made; non-zero when it already ended badly.
fn submitted(
    session: &Session,
    hostfactory: bool,
    view: RequestView,
    warnings: Vec<String>,
) -> CliResult<Output> {
    if hostfactory {
        return hostfactory::submitted(view, &warnings).map(Output::from);
    }
    let stdout = render::render(&view, session.global.output, || view_table(&view))?;
    Ok(hostfactory::submitted_output(stdout, &view, &warnings).into())
}

async fn wait_for(broker: &Broker, view: RequestView, limit: Duration) -> CliResult<RequestView> {
    let bar = std::io::stdout().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(u64::from(view.request.requested_count));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let id = view.request.request_id.clone();
    let followed = broker
        .wait_for(view, Pace::up_to(WAIT_POLL), limit, |view| {
            if let Some(bar) = &bar {
                bar.set_position(u64::from(view.request.fulfilled_count));
                bar.set_message(format!(
                    "{} {}",
                    view.request.request_id, view.request.status
                ));
            }
        })
        .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let last = followed?;
    if !last.request.status.is_terminal() {
        return Err(Failure::generic(format!(
            "gave up waiting after {}s; request {id} is still {} (poll it with `orb requests status {id}`)",
            limit.as_secs(),
            last.request.status,
        )));
    }
    Ok(last)
}

pub(super) fn machine_row(m: &Machine) -> Vec<String> {
    vec![
        m.machine_id.clone(),
        m.status.to_string(),
        or_dash(m.private_ip.as_deref()),
        node_cell(m),
        m.template_id.clone(),
        m.request_id.to_string(),
        or_dash(m.return_request_id.as_ref().map(|r| r.as_str())),
    ]
}

/// The machine's node, with instance type, capacity type and zone when `orb serve` watched
/// nodes (`provider_data.node`), e.g. `ip-10-0-3-17 (m5.large spot us-east-1a)`.
fn node_cell(m: &Machine) -> String {
    let data = &m.provider_data;
    let Some(name) = data["node"]["name"]
        .as_str()
        .or_else(|| data["node_name"].as_str())
    else {
        return "-".into();
    };
    let facts: Vec<&str> = ["instance_type", "capacity_type", "zone"]
        .iter()
        .filter_map(|k| data["node"][k].as_str())
        .collect();
    if facts.is_empty() {
        name.to_string()
    } else {
        format!("{name} ({})", facts.join(" "))
    }
}

pub(super) const MACHINE_HEADERS: [&str; 7] = [
    "MACHINE", "STATUS", "IP", "NODE", "TEMPLATE", "REQUEST", "RETURN",
];

pub(super) fn view_table(view: &RequestView) -> Table {
    let r = &view.request;
    let mut t = Table::new(MACHINE_HEADERS.to_vec());
    t.row(vec![
        format!("# {} ({})", r.request_id, r.request_type.as_str()),
        r.status.to_string(),
        format!("{}/{}", r.fulfilled_count, r.requested_count),
        String::new(),
        r.template_id.clone().unwrap_or_default(),
        r.status_message.clone().unwrap_or_default(),
        String::new(),
    ]);
    view.machines.iter().for_each(|m| t.row(machine_row(m)));
    t
}

/// Machines as a status read would show them. With `orb serve` running for this root (a
/// daemon configured or its socket present), its watch cache keeps the store current (a pod
/// that changes is recorded within about a second), so the store is read as it is.
/// Otherwise each request holding a machine that may still exist is refreshed from the
/// provider first (a LIST of its pods), so a pod that failed or vanished after its request
/// completed is not listed `running`. A request the provider cannot be asked about is
/// listed as stored, with a warning on stderr.
async fn list(session: &Session, all: bool) -> CliResult<Output> {
    let loaded = session.config()?;
    let (broker, _) = session.broker(&loaded).await?;
    let followed_by_daemon = matches!(
        hostfactory::daemon_choice(session),
        Ok((Choice::Daemon { .. }, _))
    );
    let mut warnings = Vec::new();
    let to_refresh = if followed_by_daemon {
        Vec::new()
    } else {
        broker.store.requests_with_live_machines().await?
    };
    for id in to_refresh {
        if let Err(e) = broker.refresh(&id).await {
            warnings.push(format!(
                "warning: the machines of {id} are listed as last stored, not as they are now \
                 ({e}); `orb requests status {id}` reads them again"
            ));
        }
    }
    let machines = broker
        .list_machines(&MachineFilter {
            live_only: !all,
            ..Default::default()
        })
        .await?;
    let mut output = Output::ok(render::render(&machines, session.global.output, || {
        let mut t = Table::new(MACHINE_HEADERS.to_vec());
        machines.iter().for_each(|m| t.row(machine_row(m)));
        t
    })?);
    output.stderr = warnings;
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::test_support;
    use rstest::rstest;
    use serde_json::{Value, json};

    fn machine(provider_data: Value) -> Machine {
        let now: jiff::Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        test_support::machine("m-0")
            .request_id(test_support::id("req-00000000-0000-4000-8000-000000000000"))
            .template("t")
            .provider_name("k8s")
            .provider_data(provider_data)
            .created(now)
            .updated(now)
            .version(1)
            .build()
    }

    #[rstest]
    #[case::watched(json!({"node_name": "ip-1", "node": {"name": "ip-1", "instance_type": "m5.large",
        "capacity_type": "spot", "zone": "us-east-1a"}}), "ip-1 (m5.large spot us-east-1a)")]
    #[case::partly_known(json!({"node_name": "kwok-node-1", "node": {"name": "kwok-node-1",
        "instance_type": "kwok.large", "capacity_type": null, "zone": "zone-1"}}), "kwok-node-1 (kwok.large zone-1)")]
    #[case::not_watched(json!({"node_name": "kwok-node-1"}), "kwok-node-1")]
    #[case::unscheduled(json!({"node_name": null}), "-")]
    fn the_node_column(#[case] provider_data: Value, #[case] want: &str) {
        assert_eq!(node_cell(&machine(provider_data)), want);
    }
}
