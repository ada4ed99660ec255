//! The REST API driven by a generated client, not by hand-written requests: openapi-python-client
//! (tests/clients/requirements.txt) generates a Python client from the document the running
//! `orb serve` serves, and tests/clients/rest_cycle.py runs an acquire → status → stream →
//! return → cancel cycle through it. This test then checks the cluster itself: what the
//! client was told is what the pods are.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kube::api::ListParams;
use kube_fixture::{Check, wait_for};
use serde_json::{Value, json};

use crate::lifecycle::world::{Kind, SETTLE, Setup, World, stderr, stdout};

/// The repository's tests/clients directory (the driver script and the generator's settings).
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients")
}

/// The Python of the client venv, which scripts/test.sh builds and exports.
fn test_python() -> PathBuf {
    std::env::var_os("ORB_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "ORB_TEST_PYTHON is unset: it names the Python of the client venv \
                 (tests/clients/requirements.txt) that scripts/test.sh builds with \
                 scripts/lib/pyclients.sh; by hand: \
                 export ORB_TEST_PYTHON=\"$(source scripts/lib/pyclients.sh && py_clients_venv)\""
            )
        })
}

fn python(args: &[&str]) -> Output {
    Command::new(test_python())
        .args(args)
        // Nothing of the run is written next to the sources.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", test_python().display()))
}

fn assert_ran(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// Adds a template whose pods stay Pending (they select a node that does not exist), so that
/// the cancelled request is still unfinished when the cancel comes; `orb serve` reads the
/// template file on every call.
fn add_held_template(w: &World) {
    let file = w.path().join("config/templates.json");
    let mut templates: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    templates["templates"].as_array_mut().unwrap().push(json!({
        "templateId": "held",
        "providerApi": "Pod",
        "maxNumber": 20,
        "imageId": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "nodeSelector": {"orb-rs.io/test-node": "nowhere"},
    }));
    std::fs::write(&file, templates.to_string()).unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_generated_python_client_runs_the_whole_machine_cycle() {
    test_python(); // before anything is set up: without it there is nothing to run
    let mut w = World::new("clients-rest", Setup::new(Kind::Pod)).await;
    add_held_template(&w);
    let addr = w.server().addr.clone();
    let base_url = format!("http://{addr}");

    // Generated from what the server serves, with --fail-on-warning: a part of the document
    // the generator cannot read fails here instead of going missing from the client.
    let generated = tempfile::tempdir().unwrap();
    let package = generated.path().join("orb_client");
    let config = clients_dir().join("openapi-python-client.yaml");
    let out = python(&[
        "-m",
        "openapi_python_client",
        "generate",
        "--url",
        &format!("{base_url}/openapi.json"),
        "--meta",
        "none",
        "--config",
        config.to_str().unwrap(),
        "--output-path",
        package.to_str().unwrap(),
        "--fail-on-warning",
    ]);
    assert_ran("openapi-python-client generate", &out);
    assert!(
        package.join("api/machines/request_machines.py").is_file(),
        "the generated client has the machine request operation: {}",
        stdout(&out)
    );

    let script = clients_dir().join("rest_cycle.py");
    let out = python(&[
        script.to_str().unwrap(),
        "--base-url",
        &base_url,
        "--client-dir",
        generated.path().to_str().unwrap(),
        "--template",
        "subject",
        "--held-template",
        "held",
        "--count",
        "3",
    ]);
    assert_ran("tests/clients/rest_cycle.py", &out);
    let text = stdout(&out);
    eprintln!("rest_cycle.py:\n{text}");
    let result: Value = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|r| serde_json::from_str(r).unwrap())
        .unwrap_or_else(|| panic!("rest_cycle.py printed no RESULT line:\n{text}"));

    // The cluster agrees with what the client was told: the returned machine's pod is gone,
    // the other two run, the cancelled request left nothing behind, and nothing else exists.
    let acquire = result["acquire"].as_str().unwrap();
    let machines = result["machines"].as_object().unwrap();
    let returned = result["returned"].as_str().unwrap();
    assert_eq!(machines.len(), 3, "{result}");
    let kept: Vec<String> = machines
        .iter()
        .filter(|(id, _)| id.as_str() != returned)
        .map(|(_, name)| name.as_str().unwrap().to_string())
        .collect();
    assert_eq!(kept.len(), 2, "{result}");
    w.wait_pods(
        acquire,
        &kept,
        "the acquire's pods are the two not returned",
    )
    .await;
    let cancelled = result["cancelled"].as_str().unwrap();
    w.wait_pods(cancelled, &[], "the cancelled request's pods are gone")
        .await;
    let want: BTreeSet<String> = kept.iter().cloned().collect();
    let pods = w.pods_api();
    wait_for(
        "no pod in the namespace but the two kept",
        SETTLE,
        || async {
            let have: BTreeSet<String> = pods
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            if have == want {
                Check::Done(())
            } else {
                Check::NotYet(format!("pods {have:?}"))
            }
        },
    )
    .await;

    // And orb's own record says the same: two live machines, the kept ones.
    let server = w.server();
    let (code, live) = server.call("GET", "/api/v1/machines?all=false", None);
    assert_eq!(code, 200, "{live}");
    let live: BTreeSet<String> = live["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(live, want, "orb's live machines");
}
