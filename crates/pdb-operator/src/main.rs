//! `pdb-operator`: keeps PodDisruptionBudgets in line with PDBPolicy objects and
//! pdboperator.io annotations. This binary only parses arguments and calls the library.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

/// Writes PodDisruptionBudgets for Deployments, StatefulSets, LeaderWorkerSets and Kubernetes 1.37
/// Workload API gangs, from PDBPolicy objects and pdboperator.io/* annotations.
#[derive(Parser, Debug)]
#[command(
    name = "pdb-operator",
    version,
    about,
    long_about = "Writes PodDisruptionBudgets for Deployments, StatefulSets, LeaderWorkerSets and \
Kubernetes 1.37 Workload API gangs, from PDBPolicy / ClusterPDBPolicy objects and pdboperator.io/* \
annotations.\n\nAvailability classes: non-critical 20%, standard 50%, high-availability 75%, \
mission-critical 90%, custom. A managed PDB always leaves at least one voluntary eviction possible.",
    after_help = "Examples:\n  pdb-operator crd | kubectl apply -f -\n  pdb-operator plan -f objects.yaml\n  \
pdb-operator plan -f objects.yaml --now 2026-06-24T03:00:00Z\n\nDocs: docs/pdb-operator/README.md"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controllers against the cluster in the current kubeconfig / service account.
    Run,
    /// Print the PDBPolicy and ClusterPDBPolicy CustomResourceDefinitions as YAML.
    Crd,
    /// Show, without a cluster, which PDB each workload in a YAML file would get and why.
    #[command(
        long_about = "Reads a multi-document YAML file of PDBPolicy, ClusterPDBPolicy, Deployment, \
StatefulSet, LeaderWorkerSet, Workload, PodGroup and Pod objects and prints, for each workload, the \
policy chosen, the enforcement steps and the budget arithmetic. Objects without a namespace are \
placed in `default`. Nothing is sent to a cluster."
    )]
    Plan {
        /// YAML file to read (`-` for standard input).
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// Evaluate maintenance windows at this instant (RFC 3339) instead of now.
        #[arg(long, value_name = "RFC3339")]
        now: Option<jiff::Timestamp>,
    },
    /// Explain the live decision for one workload, e.g. `explain workload/trainer -n default`.
    Explain {
        /// `<kind>/<name>`: deployment, statefulset, leaderworkerset or workload.
        target: String,
        /// Namespace of the workload.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
}

fn read_input(path: &PathBuf) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading objects from standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {}; pass an existing YAML file with -f",
            path.display()
        )
    })
}

// Errors become one readable line (with their causes) and exit code 1, never a backtrace.
fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Crd => {
            print!(
                "{}",
                pdb_operator::crd::crds_yaml().context("rendering the CRDs as YAML")?
            );
            Ok(())
        }
        Command::Plan { file, now } => {
            let yaml = read_input(&file)?;
            let now = now.unwrap_or_else(jiff::Timestamp::now);
            let report = pdb_operator::plan::plan_report(&yaml, now)
                .with_context(|| format!("planning {}", file.display()))?;
            print!("{report}");
            Ok(())
        }
        Command::Run => bail!(
            "`pdb-operator run` is not yet implemented in this build: the controllers are not wired to a cluster yet. \
Use `pdb-operator plan -f objects.yaml` to see the PDBs they would write."
        ),
        Command::Explain { target, namespace } => bail!(
            "`pdb-operator explain {target} -n {namespace}` needs the live controller, which is not yet implemented in this build. \
Export the objects (kubectl get -o yaml) and run `pdb-operator plan -f` on them instead."
        ),
    }
}
