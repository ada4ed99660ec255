//! The five HostFactory operations (getAvailableTemplates, requestMachines,
//! requestReturnMachines, getRequestStatus, getReturnRequests). A call goes to a running
//! `orb serve` when one is configured or its default socket exists, and runs in this
//! process otherwise; both ways run [`run_operation`], so stdout and the exit code match. A
//! status poll of settled requests with no daemon is read on this thread instead
//! ([`status_from_storage`]), with the same reply.

pub mod daemon_client;
pub mod daemon_target;
mod operations;
mod settled;
mod written;

pub use operations::{
    Operation, SCRIPT_OUTPUT_MEDIA_TYPE, ScriptReply, get_available_templates, get_request_status,
    get_return_requests, machine_keys, request_machines, request_return_machines, run_operation,
    stale_warning, status_reply, submitted, submitted_output,
};
pub use settled::status_from_storage;
pub use written::WrittenMachines;

use serde_json::Value;

use self::daemon_client::{Forward, ForwardError, forward};
use self::daemon_target::{Choice, DEFAULT_SOCKET_FILE, DaemonSection, choose};
use crate::cli::{Command, MachinesCommand, RequestsCommand, SchedulerKind, TemplatesCommand};
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::session::Session;

/// The HostFactory operation this command line is, when it is one the daemon can answer:
/// HostFactory conventions, and the input given as HostFactory JSON (`-f`/`-d`) for the
/// operations that need one. Plain CLI forms (`machines request T N --wait`) run directly.
pub fn operation_of(session: &Session, command: &Command) -> Option<Operation> {
    let has_input = session.global.file.is_some() || session.global.data.is_some();
    let op = match command {
        Command::Templates(TemplatesCommand::List) => Operation::GetAvailableTemplates,
        Command::Requests(RequestsCommand::ListReturns) => Operation::GetReturnRequests,
        Command::Machines(MachinesCommand::Request {
            template_id: None,
            count: None,
            wait: false,
            ..
        }) if has_input => Operation::RequestMachines,
        Command::Machines(MachinesCommand::Return {
            machine_ids,
            request_id: None,
        }) if has_input && machine_ids.is_empty() => Operation::RequestReturnMachines,
        Command::Requests(RequestsCommand::Status { request_ids })
            if has_input && request_ids.is_empty() =>
        {
            Operation::GetRequestStatus
        }
        _ => return None,
    };
    (session.scheduler_hint() == SchedulerKind::Hostfactory).then_some(op)
}

/// Runs one HostFactory call: through the daemon when one answers, else directly.
pub fn run_call(session: &Session, op: Operation) -> ScriptReply {
    let input = match context::hostfactory_input(&session.global) {
        Ok(input) => input,
        Err(failure) => return ScriptReply::failure(&failure),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return ScriptReply::failure(&Failure::generic(format!(
                "cannot start the async runtime: {e}"
            )));
        }
    };
    runtime.block_on(call(session, op, input.as_ref()))
}

async fn call(session: &Session, op: Operation, input: Option<&Value>) -> ScriptReply {
    let (choice, section) = match daemon_choice(session) {
        Ok(found) => found,
        Err(failure) => return ScriptReply::failure(&failure),
    };
    let Choice::Daemon { target, origin } = choice else {
        return direct(session, op, input).await;
    };
    let token = match section.token() {
        Ok(token) => token,
        Err(e) => return ScriptReply::failure(&e.into()),
    };
    let how = Forward {
        target: &target,
        token: token.as_deref(),
        connect_timeout: section.connect_timeout(),
        reply_timeout: section.reply_timeout(),
    };
    let reply = forward(&how, op, input).await;
    let why = match reply {
        Ok(reply) => return reply,
        Err(ForwardError::NotSent(why)) => why,
        Err(ForwardError::Unanswered(why)) if !op.changes_state() => why,
        Err(ForwardError::Unanswered(why)) => {
            return ScriptReply::failure(&Failure::generic(format!(
                "the orb daemon at {target} ({origin}) did not finish {} ({why}); it may \
                     have acted, so the call was not repeated here; see where requests stand \
                     with getRequestStatus or `orb requests list`",
                op.name()
            )));
        }
    };
    let mut reply = direct(session, op, input).await;
    reply.stderr.insert(
        0,
        format!(
            "note: the orb daemon at {target} ({origin}) did not answer ({why}); ran {} directly \
             (ORB_DAEMON=off skips the daemon)",
            op.name()
        ),
    );
    reply
}

/// `--daemon`/`ORB_DAEMON`, config.json's `daemon` section, or the default socket. A config
/// that does not load leaves only the flag and the default socket; the direct path then
/// reports the config problem if it matters.
pub(crate) fn daemon_choice(session: &Session) -> CliResult<(Choice, DaemonSection)> {
    let section = match session.config() {
        Ok(loaded) => DaemonSection::from_config(&loaded.config.other)
            .map_err(|e| Failure::invalid(format!("{}: {e}", loaded.file.display())))?,
        Err(_) => DaemonSection::default(),
    };
    let default_socket = session.dirs.work_dir.path.join(DEFAULT_SOCKET_FILE);
    let choice = choose(
        session.global.daemon.as_deref(),
        &section,
        &default_socket,
        default_socket.exists(),
    )?;
    Ok((choice, section))
}

async fn direct(session: &Session, op: Operation, input: Option<&Value>) -> ScriptReply {
    if op == Operation::GetRequestStatus
        && let Some(reply) = status_from_storage(session, input)
    {
        return reply;
    }
    let reply = run_operation(op, input, async || {
        let loaded = session.config()?;
        session.hostfactory_env(&loaded).await
    })
    .await;
    session.close_stores().await;
    reply
}
