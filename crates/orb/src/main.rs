//! `orb`: the resource broker's command-line entry point. Parses arguments first (so
//! `--version` and `--help` return at once), then runs the command and prints its output.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use orb_cli::cli::Cli;
use orb_cli::commands;

/// See the note on the allocator in Cargo.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator settings of the daemon: jemalloc's background thread gives freed pages back
/// to the system after 1 s unused (default: 10 s, and only while the process allocates), so a
/// daemon that goes quiet after its start-up LISTs does not keep their buffers resident.
/// One-shot commands keep jemalloc's defaults: they exit long before either decay would run.
const DAEMON_MALLOC_CONF: &str = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
/// Where jemalloc (as built by tikv-jemalloc-sys) reads its settings, once, before `main`.
const MALLOC_CONF_VAR: &str = "_RJEM_MALLOC_CONF";
/// SQLite's C code allocates from glibc's malloc, which gives every thread that calls it an
/// arena of its own and hands little of it back: in the disruption soak (issue #51) those
/// arenas grew from 1 to 6 MiB in 8 minutes for at most 2 MiB in use. One arena serves the
/// daemon's one SQLite connection thread.
const GLIBC_ARENAS_VAR: &str = "MALLOC_ARENA_MAX";

/// Runs this same command again (same pid, arguments and environment) with
/// [`DAEMON_MALLOC_CONF`], unless the variable is set already: by this re-run, or by the user,
/// whose settings win. Returns only when that is so or the re-run could not start.
fn with_daemon_allocator_settings() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(MALLOC_CONF_VAR).is_some() {
        return;
    }
    let mut args = std::env::args_os();
    let (Some(arg0), Ok(exe)) = (args.next(), std::env::current_exe()) else {
        return;
    };
    let mut rerun = std::process::Command::new(exe);
    rerun
        .arg0(arg0)
        .args(args)
        .env(MALLOC_CONF_VAR, DAEMON_MALLOC_CONF);
    if std::env::var_os(GLIBC_ARENAS_VAR).is_none() {
        rerun.env(GLIBC_ARENAS_VAR, "1");
    }
    let err = rerun.exec();
    eprintln!(
        "orb: could not restart with the daemon's allocator settings ({err}); memory freed after start-up stays resident longer"
    );
}

/// Below this much output the default pipe (64 KiB) is enough.
const PIPE_DEFAULT: usize = 64 << 10;

/// Asks for a pipe as large as a reply bigger than the default one, up to the size an
/// unprivileged process may set (1 MiB by default): the 3.4 MB HostFactory status of 5,000
/// machines went out in 53 writes, each waiting for the reader to empty the pipe. Only a
/// speed-up: stdout that is not a pipe, or a refusal, leaves things as they are.
fn widen_pipe(stdout: &impl std::os::fd::AsFd, len: usize) {
    if len > PIPE_DEFAULT {
        let _ = rustix::pipe::fcntl_setpipe_size(stdout, len.min(1 << 20));
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.runs_the_daemon() {
        with_daemon_allocator_settings();
    }
    let output = commands::run(cli);
    let mut stdout = std::io::stdout().lock();
    widen_pipe(&stdout, output.stdout.len());
    let _ = stdout.write_all(output.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    for line in &output.stderr {
        let _ = writeln!(stderr, "{line}");
    }
    ExitCode::from(u8::try_from(output.exit).unwrap_or(1))
}
