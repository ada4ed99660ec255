//! The `orb` binary end to end on the real local control plane, once per workload kind: through
//! the CLI (`orb machines request --wait`, `orb requests status`, `orb machines return`) and
//! through the installed HostFactory scripts with the JSON files HostFactory passes them. Each
//! test has its own namespace and its own orb root directory (config, database).
//! Needs the control plane (`tools/control-plane/cp up`).

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

/// Long enough for 3 pods to be created, scheduled and marked ready by the node simulator.
const SETTLE: Duration = Duration::from_secs(45);

/// A Job whose pods keep running: the node simulator completes Job pods after the delay in
/// these annotations (default about a second), so these stay up for the whole test.
fn long_running_job_template() -> Value {
    json!({
        "templateId": "job-long",
        "providerApi": "Job",
        "maxNumber": 10,
        "imageId": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "annotations": {
            "pod-complete.stage.kwok.x-k8s.io/delay": "20m",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "30m"
        }
    })
}

/// One orb installation (config written by `orb init --local-control-plane`) bound to one
/// fresh namespace.
struct Orb {
    root: tempfile::TempDir,
    ns: TestNamespace,
    cluster: TestCluster,
}

impl Orb {
    async fn new(prefix: &str) -> Orb {
        let cluster = TestCluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        // `orb init --local-control-plane`, then orb as the shipped identity.
        let root = crate::support::init_local_control_plane(&cluster, &ns).await;
        let orb = Orb { root, ns, cluster };
        let templates_file = orb.path().join("config/templates.json");
        let mut templates: Value =
            serde_json::from_str(&std::fs::read_to_string(&templates_file).unwrap()).unwrap();
        templates["templates"]
            .as_array_mut()
            .expect("orb init writes a template list")
            .push(long_running_job_template());
        std::fs::write(&templates_file, templates.to_string()).unwrap();
        orb
    }

    fn path(&self) -> &Path {
        self.root.path()
    }

    fn command(&self) -> Command {
        let mut cmd = Command::cargo_bin("orb").unwrap();
        clean_env(&mut cmd);
        cmd.env("ORB_ROOT_DIR", self.path())
            .env("HOME", self.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Runs orb, expects success and a JSON reply.
    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "orb {args:?} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        json_of(&out)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), self.ns.name())
    }

    /// Names of the pods in the namespace that are not being deleted.
    async fn live_pod_names(&self) -> BTreeSet<String> {
        self.pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect()
    }

    async fn pod_uids(&self, names: &[String]) -> Vec<String> {
        let pods = self.pods();
        let mut uids = Vec::new();
        for name in names {
            let pod = pods.get(name).await.unwrap();
            uids.push(pod.metadata.uid.unwrap());
        }
        uids
    }

    /// Waits until exactly `expected` pods exist (no deleted pod left, no replacement made).
    async fn wait_for_pods(&self, what: &str, expected: &BTreeSet<String>) {
        wait_for(what, SETTLE, || async {
            let all: BTreeSet<String> = self
                .pods()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            if &all == expected {
                Check::Done(())
            } else {
                Check::NotYet(format!("pods {all:?}"))
            }
        })
        .await;
    }

    /// Polls `orb requests status <id>` until the request is terminal; returns its view.
    async fn wait_until_finished(&self, id: &str) -> Value {
        wait_for(&format!("request {id} to finish"), SETTLE, || async {
            let view = self.json(&["requests", "status", id])[0].clone();
            match view["request"]["status"].as_str() {
                Some("complete" | "failed" | "partial" | "cancelled" | "timeout") => {
                    Check::Done(view)
                }
                other => Check::NotYet(format!("status {other:?}: {}", view["request"])),
            }
        })
        .await
    }

    fn install_scripts(&self) -> PathBuf {
        let dir = self.path().join("hostfactory/scripts");
        let out = self.run(&["hostfactory", "install", dir.to_str().unwrap()]);
        assert!(out.status.success(), "install: {}", stderr(&out));
        dir
    }

    /// Runs an installed HostFactory script the way HostFactory does: `<script> -f <input file>`.
    fn script(&self, dir: &Path, script: &str, input: &Value) -> Value {
        let input_file = self.path().join(format!("hf_in_{script}.json"));
        std::fs::write(&input_file, input.to_string()).unwrap();
        let mut cmd = std::process::Command::new(dir.join(script));
        let out = support::clear_env(&mut cmd)
            .args(["-f", input_file.to_str().unwrap()])
            .env("ORB_ROOT_DIR", self.path())
            .env("HOME", self.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script} {input} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        json_of(&out)
    }

    /// Polls getRequestStatus.sh for one request until `done` accepts its entry.
    async fn poll_hf_status(
        &self,
        dir: &Path,
        id: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let input = json!({"requests": [{"requestId": id}]});
        wait_for(what, SETTLE, || async {
            let reply = self.script(dir, "getRequestStatus.sh", &input);
            let entry = reply["requests"][0].clone();
            assert_eq!(entry["requestId"], id, "{reply}");
            if entry["status"] == "complete_with_error" {
                panic!("{id} ended with an error: {entry}");
            }
            if done(&entry) {
                Check::Done(entry)
            } else {
                Check::NotYet(entry.to_string())
            }
        })
        .await
    }
}

fn clean_env(cmd: &mut Command) {
    for var in support::ENV_TO_CLEAR {
        cmd.env_remove(var);
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(out), stderr(out)))
}

fn machine_names(view: &Value) -> Vec<String> {
    view["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap().to_string())
        .collect()
}

/// The machine a test returns: the highest ordinal for a StatefulSet (the only one it can
/// give back alone), otherwise the middle one.
fn victim_of(kind: &str, names: &[String]) -> String {
    if kind == "statefulset" {
        names
            .iter()
            .max_by_key(|n| n.rsplit('-').next().unwrap().parse::<u32>().unwrap())
            .unwrap()
            .clone()
    } else {
        let mut sorted = names.to_vec();
        sorted.sort();
        sorted[1].clone()
    }
}

fn set_of(names: &[String]) -> BTreeSet<String> {
    names.iter().cloned().collect()
}

/// Asks for 3 machines with `--wait` and checks they all run with an address.
fn request_three_running(orb: &Orb, template: &str) -> (String, Vec<String>) {
    let view = orb.json(&[
        "machines",
        "request",
        template,
        "3",
        "--wait",
        "--timeout",
        "45",
    ]);
    assert_eq!(view["request"]["status"], "complete", "{}", view["request"]);
    let machines = view["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 3, "{view}");
    for m in machines {
        assert_eq!(m["status"], "running", "{m}");
        assert!(
            m["private_ip"].as_str().is_some_and(|ip| !ip.is_empty()),
            "{m}"
        );
    }
    let id = view["request"]["request_id"].as_str().unwrap().to_string();
    (id, machine_names(&view))
}

async fn cli_round_trip(kind: &str) {
    let orb = Orb::new(&format!("e2e-cli-{kind}")).await;
    let (acquire, names) = request_three_running(&orb, &format!("{kind}-worker"));
    let status = orb.json(&["requests", "status", &acquire]);
    assert_eq!(status[0]["request"]["status"], "complete", "{status}");
    assert_eq!(orb.live_pod_names().await, set_of(&names));

    let victim = victim_of(kind, &names);
    let ret = orb.json(&["machines", "return", &victim]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    assert!(ret_id.starts_with("ret-"), "{ret}");
    let finished = orb.wait_until_finished(&ret_id).await;
    assert_eq!(finished["request"]["status"], "complete", "{finished}");
    assert_eq!(machine_names(&finished), vec![victim.clone()]);

    let survivors: BTreeSet<String> = names.iter().filter(|n| **n != victim).cloned().collect();
    orb.wait_for_pods(&format!("{victim} gone and {survivors:?} kept"), &survivors)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        orb.live_pod_names().await,
        survivors,
        "no replacement pod appears after the return"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cli_pod_request_wait_status_and_return_one() {
    cli_round_trip("pod").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cli_deployment_request_wait_status_and_return_one() {
    cli_round_trip("deployment").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cli_statefulset_request_wait_status_and_return_the_tail() {
    cli_round_trip("statefulset").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cli_job_finishes_on_wait_and_returning_one_host_deletes_the_whole_job() {
    let orb = Orb::new("e2e-cli-job").await;

    // A Job request is complete once every pod exited 0; its hosts then show as stopped (their
    // pods are still there until the Job is returned).
    let finished = orb.json(&[
        "machines",
        "request",
        "job-worker",
        "3",
        "--wait",
        "--timeout",
        "45",
    ]);
    assert_eq!(finished["request"]["status"], "complete", "{finished}");
    let finished_machines = finished["machines"].as_array().unwrap();
    assert_eq!(finished_machines.len(), 3);
    for m in finished_machines {
        assert_eq!(m["status"], "stopped", "{m}");
        assert!(m["private_ip"].as_str().is_some(), "{m}");
    }
    let finished_pods = set_of(&machine_names(&finished));

    // Hosts that keep running: the request stays in progress until the pods exit.
    let started = orb.json(&["machines", "request", "job-long", "3"]);
    let acquire = started["request"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let view = wait_for("3 running Job hosts with addresses", SETTLE, || async {
        let view = orb.json(&["requests", "status", &acquire])[0].clone();
        let running = view["machines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["status"] == "running" && m["private_ip"].is_string())
            .count();
        if running == 3 {
            Check::Done(view)
        } else {
            Check::NotYet(view.to_string())
        }
    })
    .await;
    assert_eq!(
        view["request"]["status"], "in_progress",
        "{}",
        view["request"]
    );
    let names = machine_names(&view);
    let job_name = view["request"]["resource_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let jobs: Api<Job> = Api::namespaced(orb.cluster.client.clone(), orb.ns.name());
    assert!(jobs.get_opt(&job_name).await.unwrap().is_some());

    let victim = victim_of("job", &names);
    let ret = orb.json(&["machines", "return", &victim]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = orb.wait_until_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{done}");

    // Documented: returning any Job host deletes the whole Job with all its pods.
    wait_for(&format!("Job {job_name} deleted"), SETTLE, || async {
        match jobs.get_opt(&job_name).await.unwrap() {
            None => Check::Done(()),
            Some(j) => Check::NotYet(format!("still there: {:?}", j.metadata.deletion_timestamp)),
        }
    })
    .await;
    orb.wait_for_pods(
        "every pod of the returned Job gone, the finished Job's pods kept",
        &finished_pods,
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cli_statefulset_refuses_a_non_tail_return_then_returns_the_same_hosts_with_the_tail() {
    let orb = Orb::new("e2e-cli-sts-refused").await;
    let (acquire, names) = request_three_running(&orb, "statefulset-worker");
    let ordinal = |n: u32| {
        names
            .iter()
            .find(|m| m.ends_with(&format!("-{n}")))
            .unwrap()
            .clone()
    };
    let (middle, tail) = (ordinal(1), ordinal(2));
    let uids_before = orb.pod_uids(&names).await;
    let sets: Api<StatefulSet> = Api::namespaced(orb.cluster.client.clone(), orb.ns.name());
    let set_name = orb.json(&["requests", "status", &acquire])[0]["request"]["resource_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let replicas = || async { sets.get(&set_name).await.unwrap().spec.replicas.unwrap() };
    assert_eq!(replicas().await, 3);

    let refused = orb.run(&["machines", "return", &middle]);
    assert!(!refused.status.success(), "a non-tail return must fail");
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains(&format!("{middle} cannot go alone")) && message.contains(&tail),
        "the refusal names the ordinal and what must go with it: {message}"
    );
    assert_eq!(json_of(&refused)["request"]["status"], "failed");

    // Nothing changed: same pods (same incarnations), same replicas, machines free again.
    assert_eq!(replicas().await, 3);
    assert_eq!(orb.pod_uids(&names).await, uids_before);
    assert_eq!(orb.live_pod_names().await, set_of(&names));
    let machines = orb.json(&["machines", "list"]);
    for m in machines.as_array().unwrap() {
        assert!(
            m["return_request_id"].is_null(),
            "a refused return leaves no machine marked as being returned: {m}"
        );
    }

    // The same host now goes back together with the tail.
    let ret = orb.json(&["machines", "return", &middle, &tail]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = orb.wait_until_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{done}");
    orb.wait_for_pods(
        "ordinals 1 and 2 gone, ordinal 0 kept",
        &BTreeSet::from([ordinal(0)]),
    )
    .await;
    assert_eq!(replicas().await, 1);
}

/// requestMachines → getRequestStatus → requestReturnMachines → getRequestStatus →
/// getReturnRequests, through the installed scripts.
async fn hostfactory_round_trip(kind: &str, template: &str) {
    let orb = Orb::new(&format!("e2e-hf-{kind}")).await;
    let scripts = orb.install_scripts();

    let submitted = orb.script(
        &scripts,
        "requestMachines.sh",
        &json!({"template": {"templateId": template, "machineCount": 3}}),
    );
    let acquire = submitted["requestId"].as_str().unwrap().to_string();
    assert!(acquire.starts_with("req-"), "{submitted}");
    assert!(submitted["message"].is_string(), "{submitted}");

    // A Job of long-running hosts stays `running` until its pods exit; the other kinds
    // complete once all 3 hosts run.
    let expect_complete = kind != "job";
    let entry = orb
        .poll_hf_status(&scripts, &acquire, "3 hosts that succeeded", |e| {
            let ready = e["machines"]
                .as_array()
                .is_some_and(|ms| ms.len() == 3 && ms.iter().all(|m| m["result"] == "succeed"));
            ready && (!expect_complete || e["status"] == "complete")
        })
        .await;
    if !expect_complete {
        assert_eq!(entry["status"], "running", "{entry}");
    }
    let mut names = Vec::new();
    for m in entry["machines"].as_array().unwrap() {
        assert_eq!(m["status"], "running", "{m}");
        assert_eq!(m["machineId"], m["name"], "{m}");
        assert!(m["privateIpAddress"].is_string(), "{m}");
        assert!(
            m["cloudHostId"]
                .as_str()
                .is_some_and(|h| h.starts_with("kwok-node-")),
            "cloudHostId is the node: {m}"
        );
        assert!(m["launchtime"].as_i64().is_some_and(|t| t > 0), "{m}");
        assert!(m["returnRequestId"].is_null(), "{m}");
        names.push(m["name"].as_str().unwrap().to_string());
    }
    assert_eq!(orb.live_pod_names().await, set_of(&names));

    let victim = victim_of(kind, &names);
    let returned = orb.script(
        &scripts,
        "requestReturnMachines.sh",
        &json!({"machines": [{"name": victim, "machineId": victim}]}),
    );
    let ret = returned["requestId"].as_str().unwrap().to_string();
    assert!(ret.starts_with("ret-"), "{returned}");

    let ret_entry = orb
        .poll_hf_status(&scripts, &ret, "the return to complete", |e| {
            e["status"] == "complete"
        })
        .await;
    let ret_machines = ret_entry["machines"].as_array().unwrap();
    // A Job gives back no single host: returning one deletes the Job, and the return covers
    // every host of it.
    let covered = if kind == "job" { 3 } else { 1 };
    assert_eq!(ret_machines.len(), covered, "{ret_entry}");
    assert!(
        ret_machines.iter().any(|m| m["name"] == victim.as_str()),
        "{ret_entry}"
    );
    for m in ret_machines {
        assert_eq!(m["result"], "succeed", "{ret_entry}");
        assert_eq!(m["requestId"], acquire.as_str());
    }

    let after = orb.script(
        &scripts,
        "getRequestStatus.sh",
        &json!({"requests": [{"requestId": acquire}]}),
    );
    let returned_machine = after["requests"][0]["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == victim.as_str())
        .cloned()
        .unwrap();
    assert_eq!(returned_machine["returnRequestId"], ret.as_str());

    // A return HostFactory started itself is never reported back as a reclaim.
    let reclaims = orb.script(&scripts, "getReturnRequests.sh", &json!({}));
    assert_eq!(reclaims["status"], "complete", "{reclaims}");
    let listed: Vec<&str> = reclaims["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["machine"].as_str())
        .collect();
    assert!(!listed.contains(&victim.as_str()), "{reclaims}");

    // Running hosts are not reclaims, and neither are a returned Job's other hosts: they are
    // in the return, not "deleted outside orb".
    assert!(listed.is_empty(), "nothing is reclaimed: {reclaims}");
    let survivors: BTreeSet<String> = if kind == "job" {
        // Documented: returning any Job host deletes the whole Job.
        BTreeSet::new()
    } else {
        names.iter().filter(|n| **n != victim).cloned().collect()
    };
    orb.wait_for_pods(&format!("{victim} gone, {survivors:?} kept"), &survivors)
        .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn hostfactory_pod_round_trip() {
    hostfactory_round_trip("pod", "pod-worker").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn hostfactory_deployment_round_trip() {
    hostfactory_round_trip("deployment", "deployment-worker").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn hostfactory_statefulset_round_trip() {
    hostfactory_round_trip("statefulset", "statefulset-worker").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn hostfactory_job_round_trip() {
    hostfactory_round_trip("job", "job-long").await;
}

/// `orb machines list` shows a machine as it is now, as a status read would: a pod that fails
/// after its request completed is not listed `running` while nobody asked about the request.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn machines_list_shows_a_pod_that_failed_after_its_request_completed() {
    let orb = Orb::new("e2e-list-fresh").await;
    let templates_file = orb.path().join("config/templates.json");
    let mut templates: Value =
        serde_json::from_str(&std::fs::read_to_string(&templates_file).unwrap()).unwrap();
    let list = templates["templates"].as_array_mut().unwrap();
    let mut failing = list
        .iter()
        .find(|t| t["templateId"] == "pod-worker")
        .expect("orb init writes pod-worker")
        .clone();
    failing["templateId"] = json!("pod-fails-later");
    failing["annotations"] = json!({"kwok.orb-rs.io/fail-after": "5s"});
    list.push(failing);
    std::fs::write(&templates_file, templates.to_string()).unwrap();

    let view = orb.json(&[
        "machines",
        "request",
        "pod-fails-later",
        "1",
        "--wait",
        "--timeout",
        "45",
    ]);
    assert_eq!(view["request"]["status"], "complete", "{view}");
    let name = machine_names(&view).remove(0);
    let pods = orb.pods();
    wait_for(&format!("pod {name} to fail"), SETTLE, || async {
        let phase = pods.get(&name).await.unwrap().status.and_then(|s| s.phase);
        match phase.as_deref() {
            Some("Failed") => Check::Done(()),
            other => Check::NotYet(format!("phase {other:?}")),
        }
    })
    .await;
    // Listed by default too: its pod still exists until it is given back.
    for args in [&["machines", "list"][..], &["machines", "list", "--all"]] {
        let listed = orb.json(args);
        let machine = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["machine_id"] == name.as_str())
            .unwrap_or_else(|| panic!("{args:?}: {name} not listed: {listed}"));
        assert_eq!(machine["status"], "failed", "{args:?}: {machine}");
    }
}
