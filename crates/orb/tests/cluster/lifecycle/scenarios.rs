//! The lifecycle cases the matrix does not reach: a Job past its acquire deadline, a
//! Deployment return while other pods are Pending for lack of room, a return that cannot
//! finish, the pod timeout at its default, an ImagePullBackOff machine returned through
//! HostFactory, a finished Deployment or StatefulSet acquire whose pods all vanish at once, and
//! a Deployment return whose scale-down the ReplicaSet spent on other pods.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_fixture::fault_proxy::{FaultProxy, RequestMatch};
use kube_fixture::{Check, wait_for};
use serde_json::json;

use super::world::{
    Kind, SETTLE, Setup, TERMINAL, World, json_of, machine, machine_ids, stderr, summary,
};
use orb_k8s::release_plan::{POD_DELETION_COST as COST, VICTIM_DELETION_COST};

fn status_of(view: &serde_json::Value, id: &str) -> String {
    machine(view, id)["status"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// Waits until the request has exactly `count` pods (not being deleted), all `Running`; them.
async fn all_running(w: &World, id: &str, count: usize, what: &str) -> BTreeMap<String, Pod> {
    wait_for(what, Duration::from_secs(60), || async {
        let pods = w.pods(id).await;
        let running = pods
            .values()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if pods.len() == count && running == count {
            Check::Done(pods)
        } else {
            Check::NotYet(format!("{} pods, {running} running", pods.len()))
        }
    })
    .await
}

/// A Job of 3 pods that each run 60 s, with a 20 s acquire deadline: every pod started, so
/// the request is running (HostFactory `running`, machines `running`) past the deadline, and
/// complete once the Job is.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_running_past_its_deadline_stays_running_and_completes_with_the_job() {
    let setup = Setup::new(Kind::Job)
        .annotate("pod-complete.stage.kwok.x-k8s.io/delay", "60s")
        .grace(20);
    let mut w = World::new("lc-job-deadline", setup).await;
    let started = std::time::Instant::now();
    let id = w.request(3);
    let view = w
        .wait_status(&id, "3 running Job pods", |v| {
            machine_ids(v).len() == 3 && machine_ids(v).iter().all(|m| status_of(v, m) == "running")
        })
        .await;
    assert_eq!(
        view["request"]["status"],
        "in_progress",
        "{}",
        summary(&view)
    );
    // Past the 20 s deadline, with the pods still running.
    let wait = Duration::from_secs(25).saturating_sub(started.elapsed());
    tokio::time::sleep(wait).await;
    let late = w.status(&id);
    assert_eq!(
        late["request"]["status"],
        "in_progress",
        "a running Job is not timed out, nor called complete: {}",
        summary(&late)
    );
    assert!(
        late["request"]["deadline_at"].is_null(),
        "every pod started: no deadline"
    );
    let entry = w.hf_status(&id);
    assert_eq!(entry["status"], "running", "{entry}");
    for m in entry["machines"].as_array().unwrap() {
        assert_eq!(m["status"], "running", "{entry}");
        assert_eq!(m["result"], "succeed", "{entry}");
    }
    let done = wait_for("the Job to complete", Duration::from_secs(120), || async {
        let view = w.status(&id);
        if view["request"]["status"] == "complete" {
            Check::Done(view)
        } else {
            Check::NotYet(summary(&view))
        }
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "complete only when the pods exited, after their 60 s"
    );
    let message = done["request"]["status_message"].as_str().unwrap_or("");
    assert!(message.contains("Job complete"), "{message}");
    let entry = w.hf_status(&id);
    assert_eq!(entry["status"], "complete", "{entry}");
}

/// A Job that fails after its deadline (every pod had started) ends failed, not complete.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_failing_after_its_deadline_ends_failed() {
    let setup = Setup::new(Kind::Job)
        .annotate("kwok.orb-rs.io/fail-after", "25s")
        .grace(10);
    let w = World::new("lc-job-late-fail", setup).await;
    let id = w.request(2);
    w.wait_status(&id, "2 running Job pods", |v| {
        machine_ids(v).len() == 2 && machine_ids(v).iter().all(|m| status_of(v, m) == "running")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(w.status(&id)["request"]["status"], "in_progress");
    let done = w.wait_finished(&id).await;
    assert_eq!(done["request"]["status"], "failed", "{}", summary(&done));
    let message = done["request"]["status_message"].as_str().unwrap_or("");
    assert!(message.contains("Job failed"), "{message}");
}

/// A Deployment of 8 on a node with room for 6: 2 pods stay Pending. Returning 2 named Running
/// machines removes exactly those two and takes no other pod: not the Pending ones (the
/// ReplicaSet would remove them first on a scale-down, so orb evicts the named pods) and not
/// the other Running ones. Replicas go down to 6 only by the replacements orb could take back
/// safely; the others stay with the Deployment.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deployment_return_among_pending_pods_removes_exactly_the_named_machines() {
    let setup = Setup::new(Kind::Deployment).on_node_with_room(6);
    let w = World::new("lc-deploy-pending", setup).await;
    let id = w.request(8);
    let view = w
        .wait_status(&id, "6 running and 2 pending machines", |v| {
            let ids = machine_ids(v);
            let count = |s: &str| ids.iter().filter(|m| status_of(v, m) == s).count();
            ids.len() == 8 && count("running") == 6 && count("pending") == 2
        })
        .await;
    let mut running: Vec<String> = machine_ids(&view)
        .into_iter()
        .filter(|m| status_of(&view, m) == "running")
        .collect();
    running.sort();
    let named = vec![running[0].clone(), running[1].clone()];
    let pods = w.pods(&id).await;
    let uid = |name: &str, pods: &BTreeMap<String, Pod>| {
        pods.get(name).and_then(|p| p.metadata.uid.clone())
    };
    let kept_running: Vec<(String, Option<String>)> = running[2..]
        .iter()
        .map(|n| (n.clone(), uid(n, &pods)))
        .collect();
    let pending: Vec<(String, Option<String>)> = machine_ids(&view)
        .into_iter()
        .filter(|m| status_of(&view, m) == "pending")
        .map(|n| {
            let uid = uid(&n, &pods);
            (n, uid)
        })
        .collect();

    let ret = w.json(&["machines", "return", &named[0], &named[1]]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = w.wait_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    let mut covered = machine_ids(&done);
    covered.sort();
    assert_eq!(
        covered, named,
        "the return covers exactly the named machines"
    );

    let deployment = view["request"]["resource_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let deployments: Api<Deployment> = Api::namespaced(w.cluster.client.clone(), w.ns.name());
    let after = wait_for(
        "the named pods gone, one pod per replica",
        SETTLE,
        || async {
            let replicas = deployments.get(&deployment).await.unwrap().spec.replicas;
            let pods = w.pods(&id).await;
            let settled = replicas.is_some_and(|r| pods.len() == r as usize);
            if settled && named.iter().all(|n| !pods.contains_key(n)) {
                Check::Done(pods)
            } else {
                Check::NotYet(format!("replicas {replicas:?}, pods {:?}", pods.keys()))
            }
        },
    )
    .await;
    assert!((6..=8).contains(&after.len()), "{:?}", after.keys());
    for (name, uid) in &pending {
        assert_eq!(
            after.get(name).and_then(|p| p.metadata.uid.clone()),
            *uid,
            "the Pending machine {name} was taken for a named one"
        );
    }
    for victim in &named {
        assert!(!after.contains_key(victim), "{victim} was returned");
    }
    for (name, uid) in &kept_running {
        assert_eq!(
            after.get(name).and_then(|p| p.metadata.uid.clone()),
            *uid,
            "{name} kept running, untouched"
        );
    }
    let acquire = w.status(&id);
    for victim in &named {
        assert_eq!(
            status_of(&acquire, victim),
            "terminated",
            "{}",
            summary(&acquire)
        );
    }
    let live = machine_ids(&acquire)
        .into_iter()
        .filter(|m| status_of(&acquire, m) != "terminated")
        .count();
    assert!((6..=8).contains(&live), "{}", summary(&acquire));
}

/// The ReplicaSet removes other pods than the ones a return marked, as it does when its view
/// of the pods lags orb's marks (CI met it under load). Emulated at an exact point: the fault
/// proxy holds orb's scale-down until both named pods carry the mark and a kept pod has been
/// given a lower deletion cost, so the ReplicaSet takes that kept pod and one named pod. Once
/// it settles, a status read deletes the named pod it kept: the return completes with both
/// named hosts gone, the Deployment stays at the lowered count, and the ReplicaSet's
/// replacement is reported as a new machine of the acquire. With `serve`, the return is
/// followed by `orb serve` (its reads come from the watch cache) instead of CLI reads.
async fn a_return_the_replicaset_passed_over(serve: bool) {
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let setup = Setup::new(Kind::Deployment).through(proxy.kubeconfig_path());
    let mut w = World::new("lc-passed-over", setup).await;
    if serve {
        w.server();
    }
    let id = w.request(4);
    let view = w
        .wait_status(&id, "4 running machines", |v| {
            v["request"]["status"] == "complete"
        })
        .await;
    let mut ids = machine_ids(&view);
    ids.sort();
    let (named, kept) = (ids[..2].to_vec(), ids[2..].to_vec());
    let before = w.pods(&id).await;
    let uid = |name: &str| before.get(name).and_then(|p| p.metadata.uid.clone());

    let scale = RequestMatch {
        path_contains: Some("/deployments/".into()),
        methods: vec![hyper::Method::PATCH],
    };
    proxy.hold(scale);
    let child = w.spawn(&["machines", "return", &named[0], &named[1]]);
    wait_for(
        "orb's scale-down to reach the proxy",
        Duration::from_secs(60),
        || async {
            if proxy.held() > 0 {
                Check::Done(())
            } else {
                Check::NotYet("nothing held yet".to_string())
            }
        },
    )
    .await;
    let pods = w.pods_api();
    for name in &named {
        let pod = pods.get(name).await.unwrap();
        let cost = pod.metadata.annotations.as_ref().and_then(|a| a.get(COST));
        assert_eq!(
            cost.map(String::as_str),
            Some(VICTIM_DELETION_COST),
            "{name} marked before the scale-down"
        );
    }
    let lower = json!({"metadata": {"annotations": {COST: "-10000"}}});
    pods.patch(&kept[0], &PatchParams::default(), &Patch::Merge(&lower))
        .await
        .unwrap();
    // Time for the controller-manager to see the new cost before the scale-down reaches it
    // (nothing it writes shows that it has; it usually takes milliseconds, and a loaded CI
    // machine must not turn this test into the very race it emulates).
    tokio::time::sleep(Duration::from_secs(5)).await;
    proxy.lift_hold();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let ret = json_of(&out)["request"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();

    let done = if serve {
        w.rest_status(&ret, "the return to finish through orb serve", |v| {
            TERMINAL.contains(&v["request"]["status"].as_str().unwrap_or(""))
        })
        .await
    } else {
        w.wait_finished(&ret).await
    };
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    let deployment = view["request"]["resource_ids"][0].as_str().unwrap();
    let deployments: Api<Deployment> = Api::namespaced(w.cluster.client.clone(), w.ns.name());
    assert_eq!(
        deployments.get(deployment).await.unwrap().spec.replicas,
        Some(2),
        "lowered once, by the two named hosts"
    );
    let after = all_running(&w, &id, 2, "2 running pods").await;
    for name in &named {
        assert!(
            !after.contains_key(name),
            "{name} was returned: {:?}",
            after.keys()
        );
    }
    assert!(
        !after.contains_key(&kept[0]),
        "the scenario did not happen: the ReplicaSet did not take {} (the lower cost)",
        kept[0]
    );
    assert_eq!(
        after.get(&kept[1]).and_then(|p| p.metadata.uid.clone()),
        uid(&kept[1]),
        "{} kept running, untouched",
        kept[1]
    );
    let replacement = after
        .keys()
        .find(|n| !ids.contains(*n))
        .expect("the ReplicaSet replaced the deleted pod")
        .clone();
    let acquire = w
        .wait_status(&id, "the replacement recorded as a machine", |v| {
            machine_ids(v).contains(&replacement) && status_of(v, &replacement) == "running"
        })
        .await;
    let log = if serve {
        w.server().log()
    } else {
        std::fs::read_to_string(w.log_file()).unwrap_or_default()
    };
    assert!(
        log.contains("deleted the named pods it kept"),
        "orb says why it deleted a pod (serve: {serve}; the CLI logs to {})",
        w.log_file().display()
    );
    assert_eq!(
        status_of(&acquire, &kept[0]),
        "terminated",
        "{}",
        summary(&acquire)
    );
    assert_eq!(
        status_of(&acquire, &kept[1]),
        "running",
        "{}",
        summary(&acquire)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deployment_return_the_replicaset_passed_over_still_removes_exactly_the_named_hosts() {
    a_return_the_replicaset_passed_over(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deployment_return_the_replicaset_passed_over_is_finished_by_orb_serve_from_its_cache() {
    a_return_the_replicaset_passed_over(true).await;
}

/// A return whose pod cannot go (a finalizer holds it) ends at its deadline with the reason,
/// and frees the machine: a second return is accepted and finishes once the pod can go.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_return_that_cannot_finish_ends_at_its_deadline_and_frees_its_machine() {
    let setup = Setup::new(Kind::Pod).grace(12);
    let w = World::new("lc-stuck-return", setup).await;
    let id = w.request(1);
    let view = w
        .wait_status(&id, "a running machine", |v| {
            machine_ids(v).len() == 1 && status_of(v, &machine_ids(v)[0]) == "running"
        })
        .await;
    let pod = machine_ids(&view)[0].clone();
    let pods = w.pods_api();
    let hold = json!({"metadata": {"finalizers": ["orb-rs.io/test-hold"]}});
    pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    let ret = w.json(&["machines", "return", &pod]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let ended = w.wait_finished(&ret_id).await;
    assert!(
        ["timeout", "partial", "failed"].contains(&ended["request"]["status"].as_str().unwrap()),
        "{}",
        summary(&ended)
    );
    let message = ended["request"]["status_message"].as_str().unwrap_or("");
    assert!(message.contains("Deadline exceeded"), "{message}");
    let m = machine(&ended, &pod);
    assert!(m["return_request_id"].is_null(), "freed: {m}");
    let reason = m["status_reason"].as_str().unwrap_or("");
    assert!(reason.contains("free to be returned again"), "{reason}");
    // The acquire reports the machine as it is now: still being deleted, in no return.
    let acquire = w.status(&id);
    let m = machine(&acquire, &pod);
    assert!(m["return_request_id"].is_null(), "{m}");
    assert_eq!(m["status"], "shutting-down", "{m}");
    // Let the pod go; a new return takes it.
    let release = json!({"metadata": {"finalizers": null}});
    pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    let again = w.json(&["machines", "return", &pod]);
    let again_id = again["request"]["request_id"].as_str().unwrap().to_string();
    let done = w.wait_finished(&again_id).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
}

/// The pod timeout with its default (pod_timeout_seconds 300, delete_timed_out_pods true): a
/// pod that never finds room is timed out and deleted about 300 s after it was created, with
/// the scheduler's reason, and the request fails saying so. The deletion is orb's own: the
/// machine's reason says orb deleted it, and getReturnRequests does not offer it back as a
/// host the cluster took.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_pod_pending_past_the_default_pod_timeout_is_timed_out_and_deleted() {
    let setup = Setup::new(Kind::Pod).on_node_with_room(0).grace(600);
    let mut w = World::new("lc-default-timeout", setup).await;
    let id = w.request(1);
    let view = w
        .wait_status(&id, "a pending machine", |v| {
            machine_ids(v).len() == 1 && status_of(v, &machine_ids(v)[0]) == "pending"
        })
        .await;
    let pod = machine_ids(&view)[0].clone();
    let started = std::time::Instant::now();
    let timed_out = wait_for(
        "the pod timeout at its default",
        Duration::from_secs(420),
        || async {
            // A poll every 10 s, as HostFactory would.
            tokio::time::sleep(Duration::from_secs(10)).await;
            let view = w.status(&id);
            let reason = machine(&view, &pod)["status_reason"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if reason.contains("timed out") {
                Check::Done(view)
            } else {
                Check::NotYet(summary(&view))
            }
        },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(250),
        "not before the default 300 s (from the pod's creation)"
    );
    let reason = machine(&timed_out, &pod)["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("300s") && reason.contains("Unschedulable"),
        "{reason}"
    );
    assert_eq!(
        timed_out["request"]["status"],
        "failed",
        "{}",
        summary(&timed_out)
    );
    w.wait_pods(&id, &[], "the timed-out pod deleted").await;
    let gone = w
        .wait_status(&id, "the timed-out machine terminated", |v| {
            status_of(v, &pod) == "terminated"
        })
        .await;
    let reason = machine(&gone, &pod)["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("deleted by orb") && !reason.contains("outside orb"),
        "{reason}"
    );
    assert_eq!(w.hf_reclaims(), Vec::<String>::new(), "orb's own deletion");
}

/// ImagePullBackOff through HostFactory: the host is reported failed with the reason, HostFactory
/// gets it back from getReturnRequests, and requestReturnMachines deletes its pod.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_image_pull_backoff_machine_is_returned_through_hostfactory_and_its_pod_deleted() {
    let setup = Setup::new(Kind::Pod).annotate("kwok.orb-rs.io/waiting-reason", "ImagePullBackOff");
    let mut w = World::new("lc-imagepull-hf", setup).await;
    let id = w.request(1);
    let view = w
        .wait_status(&id, "a failed machine", |v| {
            machine_ids(v).len() == 1 && status_of(v, &machine_ids(v)[0]) == "failed"
        })
        .await;
    let pod = machine_ids(&view)[0].clone();
    let entry = w.hf_status(&id);
    let host = &entry["machines"][0];
    assert_eq!(host["result"], "fail", "{entry}");
    assert!(
        host["message"]
            .as_str()
            .unwrap()
            .contains("ImagePullBackOff"),
        "{entry}"
    );
    let reclaims = w.script(
        "getReturnRequests.sh",
        &json!({"machines": [{"name": pod}]}),
    );
    assert_eq!(
        reclaims["requests"][0]["machine"],
        pod.as_str(),
        "{reclaims}"
    );
    assert_eq!(reclaims["requests"][0]["gracePeriod"], 0, "{reclaims}");
    let returned = w.script(
        "requestReturnMachines.sh",
        &json!({"machines": [{"name": pod, "machineId": pod}]}),
    );
    let ret = returned["requestId"].as_str().unwrap().to_string();
    w.wait_pods(&id, &[], "the failed machine's pod deleted")
        .await;
    let done = w.wait_finished(&ret).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
}

/// `orb serve` records what happens to a machine after its request completed, with nobody
/// asking: a pod deleted outside orb reads `terminated` in the store within seconds (the
/// follow loop reacts to the watch cache), although HostFactory no longer polls the request.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_records_a_machine_lost_after_its_request_completed_without_a_poll() {
    let mut w = World::new("lc-serve-follow", Setup::new(Kind::Pod)).await;
    let server = w.server();
    let (code, view) = server.call(
        "POST",
        "/api/v1/machines/request?wait=true&timeout=60",
        Some(&json!({"template_id": "subject", "count": 2})),
    );
    assert_eq!(code, 200, "{view}");
    assert_eq!(view["request"]["status"], "complete", "{view}");
    let lost = machine_ids(&view)[0].clone();
    w.delete_pod(&lost).await;
    // Read the store as it is (no refresh): only the daemon can have changed it.
    let stored = wait_for(
        "orb serve to store the lost machine",
        Duration::from_secs(30),
        || async {
            let machines = w.json(&["machines", "list", "--all"]);
            let m = machines
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["machine_id"] == lost.as_str())
                .cloned()
                .unwrap();
            if m["status"] == "terminated" {
                Check::Done(m)
            } else {
                Check::NotYet(m.to_string())
            }
        },
    )
    .await;
    let reason = stored["status_reason"].as_str().unwrap_or("");
    assert!(reason.contains("no longer exists"), "{reason}");
    let (_, request) = w.server().call(
        "GET",
        &format!(
            "/api/v1/requests/{}",
            view["request"]["request_id"].as_str().unwrap()
        ),
        None,
    );
    assert_eq!(
        request["request"]["status"], "complete",
        "the request keeps its status"
    );
}

/// A finished Deployment or StatefulSet acquire whose every pod is gone at once (a ResourceQuota
/// of no pods keeps the controller from bringing them back while orb reads them): orb records
/// both machines terminated, yet keeps asking, and records the hosts the controller brings back
/// once the quota goes. Before, a read that fell between the deletion of every pod and their
/// recreation was the request's last (a StatefulSet whose pods fail and are recreated hit it).
async fn a_controller_brings_back_every_vanished_pod(kind: Kind) {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let prefix = format!("lc-all-gone-{kind:?}").to_ascii_lowercase();
    let mut w = World::new(&prefix, Setup::new(kind)).await;
    let id = w.request(2);
    let view = w
        .wait_status(&id, "a complete request of 2 running machines", |v| {
            v["request"]["status"] == "complete"
                && machine_ids(v).len() == 2
                && machine_ids(v).iter().all(|m| status_of(v, m) == "running")
        })
        .await;
    let first = machine_ids(&view);
    let first_uids: Vec<serde_json::Value> = first
        .iter()
        .map(|m| machine(&view, m)["uid"].clone())
        .collect();

    let quotas: Api<ResourceQuota> = Api::namespaced(w.cluster.client.clone(), w.ns.name());
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }))
    .unwrap();
    quotas.create(&Default::default(), &quota).await.unwrap();
    // Admission enforces a quota once the controller-manager has counted its usage.
    wait_for("the quota counted", Duration::from_secs(60), || async {
        let q = quotas.get("no-pods").await.unwrap();
        match q.status.and_then(|s| s.hard) {
            Some(hard) if hard.contains_key("pods") => Check::Done(()),
            _ => Check::NotYet("no status yet".into()),
        }
    })
    .await;
    for m in &first {
        w.delete_pod(m).await;
    }
    let gone = w
        .wait_status(&id, "both machines terminated", |v| {
            first.iter().all(|m| status_of(v, m) == "terminated")
        })
        .await;
    assert_eq!(gone["request"]["status"], "complete", "{}", summary(&gone));

    // HostFactory is told the hosts are gone while they are.
    assert_eq!(
        w.hf_reclaims(),
        sorted(&first),
        "while the quota holds them back"
    );

    quotas.delete("no-pods", &Default::default()).await.unwrap();
    if kind == Kind::StatefulSet {
        // getReturnRequests asks the cluster first: once the hosts are back under their
        // names, they are no longer reported.
        wait_for(
            "the recreated hosts no longer reported gone",
            Duration::from_secs(60),
            || {
                let listed = w.hf_reclaims();
                async move {
                    if listed.is_empty() {
                        Check::Done(())
                    } else {
                        Check::NotYet(format!("reported: {listed:?}"))
                    }
                }
            },
        )
        .await;
    }
    let back = w
        .wait_status(&id, "2 running machines brought back", |v| {
            let running: Vec<String> = machine_ids(v)
                .into_iter()
                .filter(|m| status_of(v, m) == "running")
                .collect();
            running.len() == 2
                && running
                    .iter()
                    .all(|m| !first_uids.contains(&machine(v, m)["uid"]))
        })
        .await;
    assert_eq!(back["request"]["status"], "complete", "{}", summary(&back));
    let ids = machine_ids(&back);
    match kind {
        // Same names, new incarnations.
        Kind::StatefulSet => assert_eq!(ids, first, "{}", summary(&back)),
        // New pods beside the two gone ones, which stay gone (and reported).
        _ => {
            assert_eq!(ids.len(), 4, "{}", summary(&back));
            for m in &first {
                assert_eq!(status_of(&back, m), "terminated", "{}", summary(&back));
            }
            assert_eq!(w.hf_reclaims(), sorted(&first));
        }
    }
}

fn sorted(names: &[String]) -> Vec<String> {
    let mut names = names.to_vec();
    names.sort();
    names
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_finished_statefulset_acquire_is_followed_while_its_pods_are_gone_and_records_them_back()
{
    a_controller_brings_back_every_vanished_pod(Kind::StatefulSet).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_finished_deployment_acquire_is_followed_while_its_pods_are_gone_and_records_new_ones() {
    a_controller_brings_back_every_vanished_pod(Kind::Deployment).await;
}
