//! Command implementations. Each returns an [`Output`]: the text for stdout, notes for
//! stderr and the exit code; failures become one stderr line (and, for HostFactory, a
//! `{"message": ...}` reply on stdout, see [`failure_output`]).

mod config;
mod doctor;
mod hostfactory;
mod init;
mod machines;
mod requests;
mod templates;

use crate::cli::{Cli, Command, SchedulerKind};
use crate::failure::{CliResult, Failure};
use crate::session::{Output, Session, failure_output};

/// Runs one parsed command line to completion.
pub fn run(cli: Cli) -> Output {
    let session = Session::new(cli.global);
    let command = cli.command;
    let hostfactory_op = crate::hostfactory::operation_of(&session, &command);
    if !command.runs_the_daemon() {
        // `orb serve` logs to stderr on its own terms; every other call like a provider.
        crate::logging::install(&crate::logging::plan(
            &session.dirs.log_dir.path,
            session.global.verbose,
            hostfactory_op.is_some(),
            crate::logging::env_filter(),
        ));
    }
    if let Some(op) = hostfactory_op {
        return crate::hostfactory::run_call(&session, op).into();
    }
    let result = match command {
        Command::Completions { shell } => Ok(Output::ok(completions(shell))),
        Command::Hostfactory(cmd) => hostfactory::run(&session, cmd),
        Command::Init(args) => init::run(&session, args),
        Command::Config(cmd) => config::run(&session, cmd),
        Command::Serve(args) => crate::serve::command::run(&session, args),
        Command::Server(cmd) => crate::serve::server::run(&session, cmd),
        Command::Mcp(cmd) => crate::mcp::run(&session, cmd),
        other => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(async {
                let result = async_command(&session, other).await;
                session.close_stores().await;
                result
            }),
            Err(e) => Err(Failure::generic(format!(
                "cannot start the async runtime: {e}"
            ))),
        },
    };
    match result {
        Ok(output) => output,
        Err(failure) => failure_output(
            &failure,
            session.scheduler_hint() == SchedulerKind::Hostfactory,
        ),
    }
}

async fn async_command(session: &Session, command: Command) -> CliResult<Output> {
    match command {
        Command::Templates(cmd) => templates::run(session, cmd).await,
        Command::Machines(cmd) => machines::run(session, cmd).await,
        Command::Requests(cmd) => requests::run(session, cmd).await,
        Command::Doctor => doctor::run(session).await,
        _ => Err(Failure::generic(
            "internal error: command routed to the wrong runner",
        )),
    }
}

fn completions(shell: clap_complete::Shell) -> String {
    use clap::CommandFactory;
    let mut buffer = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "orb", &mut buffer);
    String::from_utf8_lossy(&buffer).into_owned()
}
