//! `orb`: the resource broker's command-line entry point.
use clap::Parser;

/// orb acquires and releases worker machines on Kubernetes as Pods, Deployments, StatefulSets or Jobs.
#[derive(Parser, Debug)]
#[command(name = "orb", version, about, long_about = None)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
