//! `orb mcp serve` driven by a real MCP client, the official Python SDK (`mcp` from PyPI, in
//! the venv scripts/lib/pyclients.sh builds; its python is `ORB_TEST_PYTHON`): the client
//! starts the server over stdio as an assistant's host does and runs a whole cycle on the
//! local control plane (tests/clients/mcp_cycle.py). The cluster is then checked from here:
//! the returned machine's pod is gone, the others still run.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::lifecycle::world::{Kind, Setup, World, machine_ids};
use crate::support;

const COUNT: usize = 3;

/// The client venv's python; the suite sets it (scripts/test.sh).
fn python() -> PathBuf {
    match std::env::var_os("ORB_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "ORB_TEST_PYTHON is not set: ./scripts/test.sh sets it, or run \
             `source scripts/lib/pyclients.sh && export ORB_TEST_PYTHON=$(py_clients_venv)`"
        ),
    }
}

fn client_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/clients")
        .join(name)
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_mcp_client_lists_requests_follows_and_returns_machines() {
    let w = World::new("mcp-cycle", Setup::new(Kind::Pod)).await;
    // The server's environment is exactly what an MCP host would give it: orb's root and
    // nothing of this process's (the SDK passes only what it is told).
    let orb = assert_cmd::cargo::cargo_bin!("orb");
    let spec = json!({
        "command": [orb, "mcp", "serve"],
        "env": {
            "ORB_ROOT_DIR": w.path(),
            "HOME": w.path(),
            "ORB_DAEMON": "off",
            "PATH": std::env::var("PATH").unwrap_or_default(),
        },
        "template_id": "subject",
        "count": COUNT,
    });
    let mut cmd = Command::new(python());
    support::clear_env(&mut cmd);
    let out = cmd
        .arg(client_script("mcp_cycle.py"))
        .arg(spec.to_string())
        .output()
        .expect("the client venv's python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP cycle failed:\n{stderr}\n{stdout}"
    );
    let seen: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the cycle's summary is not JSON ({e}): {stdout}"));
    let request_id = seen["request_id"].as_str().unwrap();
    let returned = seen["returned"].as_str().unwrap().to_string();
    let machines: Vec<String> = seen["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert_eq!(machines.len(), COUNT, "{seen}");
    // What the client saw is what the cluster and the store hold.
    let kept: Vec<String> = machines
        .iter()
        .filter(|m| **m != returned)
        .cloned()
        .collect();
    w.wait_pods(
        request_id,
        &kept,
        "the returned machine's pod gone, the others kept",
    )
    .await;
    let view = w.status(request_id);
    let mut stored = machine_ids(&view);
    stored.sort();
    assert_eq!(stored, machines, "{view}");
}
