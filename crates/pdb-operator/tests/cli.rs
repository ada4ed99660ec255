//! The `pdb-operator` binary: subcommands, exit codes and the offline plan.

use assert_cmd::Command;

fn bin() -> Command {
    Command::cargo_bin("pdb-operator").expect("binary built")
}

#[test]
fn plan_prints_the_seed_worked_example() {
    let out = bin()
        .args([
            "plan",
            "-f",
            "tests/data/seed-003-trainer.yaml",
            "--now",
            "2026-06-24T12:00:00Z",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("| ceil(90% × 4 groups)  | 4"), "{text}");
    assert!(text.contains("| clamped to groups - 1 | 3"), "{text}");
    assert!(
        text.contains("=> PodDisruptionBudget trainer-pdb: minAvailable: 6"),
        "{text}"
    );
}

#[test]
fn crd_prints_both_kinds() {
    let out = bin().arg("crd").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("kind: PDBPolicy") && text.contains("kind: ClusterPDBPolicy"));
}

#[test]
fn run_refuses_a_bad_bind_address_before_touching_a_cluster() {
    let out = bin()
        .args(["run", "--health-probe-bind-address", "localhost-8081"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--health-probe-bind-address \"localhost-8081\" is not an address; use :8081"),
        "{err}"
    );
}

#[test]
fn explain_rejects_a_target_without_kind() {
    let out = bin()
        .args(["explain", "trainer", "-n", "default"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("is not <kind>/<name>"), "{err}");
}

#[test]
fn missing_plan_file_names_the_file_and_the_fix() {
    let out = bin()
        .args(["plan", "-f", "does-not-exist.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("does-not-exist.yaml") && err.contains("pass an existing YAML file"),
        "{err}"
    );
}
