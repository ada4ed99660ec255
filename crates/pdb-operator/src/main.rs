//! `pdb-operator`: keeps PodDisruptionBudgets in line with PDBPolicy objects and
//! pdboperator.io annotations. This binary only parses arguments and calls the library.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
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
    Run(RunArgs),
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

/// Flags of `pdb-operator run`.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Campaign for Lease d6525091.pdboperator.io before running the controllers
    /// (default: on inside a cluster, off elsewhere).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    leader_elect: Option<bool>,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else pdb-operator-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "pdb-operator-system")]
    leader_election_namespace: String,
    /// Address for /healthz and /readyz (`0` turns it off).
    #[arg(long, default_value = ":8081")]
    health_probe_bind_address: String,
    /// Address for /metrics (`0` = served on the health address).
    #[arg(long, default_value = "0")]
    metrics_bind_address: String,
    /// Watch only this namespace (workloads, pods, PDBs, PDBPolicies); empty = all namespaces.
    #[arg(long, alias = "namespace", default_value = "")]
    watch_namespace: String,
    /// Let namespaced PDBPolicies without `namespaces` reach every namespace (reference semantics).
    #[arg(long)]
    legacy_cross_namespace_policies: bool,
    /// How often to look for the Workload API and the LeaderWorkerSet CRD, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    discovery_interval: u64,
    /// Reconciles running at once per controller (each mostly waits for one apiserver write;
    /// the reference operator's default was 5).
    #[arg(long, default_value_t = pdb_operator::runtime::DEFAULT_MAX_CONCURRENT_RECONCILES)]
    max_concurrent_reconciles: u16,
}

/// `:8081` → 0.0.0.0:8081; `0` → off.
fn bind_address(flag: &str, value: &str) -> Result<Option<std::net::SocketAddr>> {
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_string()
    };
    full.parse().map(Some).with_context(|| {
        format!(
            "--{flag} {value:?} is not an address; use :8081, 127.0.0.1:8081 or 0 to turn it off"
        )
    })
}

async fn run_operator(args: RunArgs) -> Result<()> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let scope = if args.watch_namespace.is_empty() {
        pdb_operator::controller::Scope::AllNamespaces
    } else {
        pdb_operator::controller::Scope::Namespace(args.watch_namespace.clone())
    };
    let opts = pdb_operator::runtime::RunOptions {
        scope,
        leader_elect: args.leader_elect.unwrap_or(in_cluster),
        lease_namespace: args.leader_election_namespace,
        identity: std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("pdb-operator-{}", std::process::id())),
        health_addr: bind_address("health-probe-bind-address", &args.health_probe_bind_address)?,
        metrics_addr: bind_address("metrics-bind-address", &args.metrics_bind_address)?,
        legacy_cross_namespace: args.legacy_cross_namespace_policies,
        discovery_interval: std::time::Duration::from_secs(args.discovery_interval.max(1)),
        max_concurrent_reconciles: args.max_concurrent_reconciles.max(1),
    };
    let client = client().await?;
    tokio::select! {
        r = pdb_operator::runtime::run(client, opts) => r.map_err(Into::into),
        _ = terminate() => {
            tracing::info!("SIGTERM; stopping");
            Ok(())
        }
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted; stopping");
            Ok(())
        }
    }
}

/// Resolves on SIGTERM (what the kubelet sends on pod shutdown).
async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

/// A client from the kubeconfig / in-cluster config, without kube's silent 429 retries.
async fn client() -> Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration found; set KUBECONFIG or run inside a cluster")?;
    config.default_retry = false;
    kube::Client::try_from(config).context("building the Kubernetes client")
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
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
        Command::Run(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr)
                .init();
            runtime()?.block_on(run_operator(args))
        }
        Command::Explain { target, namespace } => {
            // Bad input is refused before any cluster is contacted.
            pdb_operator::explain::parse_target(&target)?;
            let report = runtime()?.block_on(async {
                let client = client().await?;
                pdb_operator::explain::explain(client, &target, &namespace)
                    .await
                    .map_err(anyhow::Error::from)
            })?;
            print!("{report}");
            Ok(())
        }
    }
}
