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

/// jemalloc returns freed pages to the system only while it allocates, unless its background
/// thread runs: a daemon that goes quiet after its start-up LISTs would otherwise keep that
/// transient memory resident. One-shot commands exit before it would matter.
fn purge_freed_memory_in_the_background() {
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!(
            "orb: could not start the allocator's background purge thread ({e}); freed memory returns to the system more slowly"
        );
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.runs_the_daemon() {
        purge_freed_memory_in_the_background();
    }
    let output = commands::run(cli);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(output.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    for line in &output.stderr {
        let _ = writeln!(stderr, "{line}");
    }
    ExitCode::from(u8::try_from(output.exit).unwrap_or(1))
}
