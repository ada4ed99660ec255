//! `pdb-operator`: writes PodDisruptionBudgets for workloads.
use clap::Parser;

/// pdb-operator keeps PodDisruptionBudgets in line with PDBPolicy objects and pdboperator.io annotations.
#[derive(Parser, Debug)]
#[command(name = "pdb-operator", version, about, long_about = None)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
