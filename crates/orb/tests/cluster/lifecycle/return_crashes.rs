//! Returns interrupted with default settings: the process releasing killed mid-release, and
//! the apiserver blacked out or losing answers while it releases. The next process that looks
//! at the return resumes it at once (no wait for its 300 s deadline), a Deployment is not
//! scaled down twice, and in the end no pod is left without a stored machine, the return is
//! complete and no machine stays "being returned".

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube_fixture::fault_proxy::{FaultPlan, FaultProxy, RequestMatch};
use kube_fixture::{Check, wait_for};
use serde_json::Value;

use super::crashes::{COUNT, finished_whole, kill9, managed_pods, setup, the_one};
use super::world::{Kind, Setup, World, machine_ids, stderr, stdout, summary};
use crate::ROOM;
use crate::support::serve_process::http;

/// The one return stored in this installation.
fn the_return(w: &World) -> String {
    the_one(w, "return")
}

/// Waits (tightly: 200 deletes take about a second) until the release has started.
async fn first_deletes(w: &World) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = managed_pods(w).await.len();
        if left < COUNT as usize {
            return left;
        }
        assert!(Instant::now() < deadline, "no pod deleted within 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An acquire of `COUNT` pods, complete with every pod stored.
async fn acquired(w: &World) -> String {
    let id = w.request(COUNT);
    finished_whole(w, &id).await;
    id
}

/// Starts `orb serve`, has it return every machine of `id` (the call never answers: the
/// server dies under it) and SIGKILLs it once the first pods are deleted; the pods left.
async fn kill_serve_mid_return(w: &mut World, id: &str) -> usize {
    let addr = w.server().addr.clone();
    let body = serde_json::json!({"request_id": id});
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            http(&addr, "POST", "/api/v1/machines/return", Some(&body))
        });
    });
    let left = first_deletes(w).await;
    w.kill_server();
    left
}

/// The invariant after the return: complete, every pod gone, and no stored machine still
/// held by a return (each is returned, so nothing is left that cannot be returned).
async fn returned_whole(w: &World, ret: &str, started: Instant) {
    let done = w.wait_finished(ret).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    assert_eq!(
        machine_ids(&done).len(),
        COUNT as usize,
        "{}",
        summary(&done)
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "resumed at once, not at the return's 300 s deadline: {:?}",
        started.elapsed()
    );
    wait_for("every pod gone", Duration::from_secs(60), || async {
        let left = managed_pods(w).await.len();
        if left == 0 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{left} pods left"))
        }
    })
    .await;
    every_stored_machine_gone(w, "every machine is gone");
}

/// Every machine in the store is returned or terminated (none left being returned).
fn every_stored_machine_gone(w: &World, what: &str) {
    let stored = w.json(&["machines", "list", "--all"]);
    for m in stored.as_array().unwrap() {
        assert!(
            m["status"] == "returned" || m["status"] == "terminated",
            "{what}: {m}"
        );
    }
}

/// The first status read after an interrupted return resumes it (it is not failed), and it
/// then completes whole.
async fn finished_by_status_reads(w: &World, ret: &str) {
    let started = Instant::now();
    let view = w.status(ret);
    assert_ne!(view["request"]["status"], "failed", "{}", summary(&view));
    returned_whole(w, ret, started).await;
}

/// `orb machines return` (the CLI, no daemon) killed while it deletes: the next CLI status
/// call of the return resumes the release on the spot (the claim died with the process).
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_cli_killed_mid_return_is_finished_by_the_next_status_call() {
    let _room = ROOM.lock().await;
    let w = World::new("lc-kill-cli-ret", setup()).await;
    let id = acquired(&w).await;
    let mut child = w.spawn(&["machines", "return", "--request-id", &id]);
    let left = first_deletes(&w).await;
    kill9(&mut child);
    assert!(left > 0, "the kill must land mid-return: no pod was left");
    let ret = the_return(&w);
    finished_by_status_reads(&w, &ret).await;
}

/// `orb serve` killed while it releases, a HostFactory-style poller going on through the
/// CLI: the first poll resumes the return.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_killed_mid_return_is_finished_by_the_next_poll() {
    let _room = ROOM.lock().await;
    let mut w = World::new("lc-kill-serve-ret", setup()).await;
    let id = acquired(&w).await;
    kill_serve_mid_return(&mut w, &id).await;
    let ret = the_return(&w);
    let started = Instant::now();
    returned_whole(&w, &ret, started).await;
}

/// The apiserver stops answering for 10 s in the middle of a return: the return is not
/// failed, it says the cluster did not answer, and once the cluster is back a status read
/// finishes it. (Several worker threads: the fault proxy serves from this process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_apiserver_blackout_mid_return_is_ridden_out() {
    let _room = ROOM.lock().await;
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let w = World::new("lc-blackout-ret", setup().through(proxy.kubeconfig_path())).await;
    let id = acquired(&w).await;
    let child = w.spawn(&["machines", "return", "--request-id", &id]);
    first_deletes(&w).await;
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    let out_started = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let ret = the_return(&w);
    let view = w.status(&ret);
    let status = view["request"]["status"].as_str().unwrap_or("").to_string();
    assert_ne!(status, "failed", "{}", summary(&view));
    if status != "complete" {
        let message = view["request"]["status_message"].as_str().unwrap_or("");
        assert!(
            message.contains("did not answer") || view["note"].as_str().is_some(),
            "{} / {}",
            summary(&view),
            super::world::stderr(&out)
        );
    }
    let blackout = Duration::from_secs(10).saturating_sub(out_started.elapsed());
    tokio::time::sleep(blackout).await;
    proxy.set_plan(FaultPlan::default());
    let started = Instant::now();
    returned_whole(&w, &ret, started).await;
}

/// A Deployment return whose scale-down reaches the apiserver but whose answers are lost:
/// the return is retried, and the retry finds its own scale recorded on the Deployment, so
/// the Deployment ends with exactly the kept replicas (a delta repeated would remove more).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deployment_return_whose_scale_answer_is_lost_scales_down_once() {
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let w = World::new(
        "lc-lost-scale",
        Setup::new(Kind::Deployment).through(proxy.kubeconfig_path()),
    )
    .await;
    let id = w.request(4);
    let view = w
        .wait_status(&id, "the Deployment to be running", |v| {
            v["request"]["status"] == "complete"
        })
        .await;
    let mut ids = machine_ids(&view);
    ids.sort();
    let (going, kept) = ids.split_at(2);
    proxy.set_plan(FaultPlan {
        lost_answer_rate: 1.0,
        only: RequestMatch {
            path_contains: Some("/deployments/".into()),
            methods: vec![hyper::Method::PATCH],
        },
        ..FaultPlan::default()
    });
    let mut args = vec!["machines", "return"];
    args.extend(going.iter().map(String::as_str));
    let cut: Value = w.json(&args);
    let ret = cut["request"]["request_id"].as_str().unwrap().to_string();
    assert_eq!(cut["request"]["status"], "in_progress", "{}", summary(&cut));
    proxy.set_plan(FaultPlan::default());
    let done = w.wait_finished(&ret).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), w.ns.name());
    let listed = deployments.list(&Default::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].spec.replicas,
        Some(2),
        "scaled down once, by the two returned pods"
    );
    w.wait_pods(&id, kept, "the kept pods stay, the returned ones go")
        .await;
    // The kept machines are returnable.
    let again = w.json(&["machines", "return", "--request-id", &id]);
    let again_id = again["request"]["request_id"].as_str().unwrap().to_string();
    let finished = w.wait_finished(&again_id).await;
    assert_eq!(
        finished["request"]["status"],
        "complete",
        "{}",
        summary(&finished)
    );
}

/// The stored returns of this installation, read from the store alone (`requests list`
/// refreshes nothing): their ids and statuses.
fn stored_returns(w: &World) -> Vec<(String, String)> {
    let listed = w.json(&["requests", "list"]);
    listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["request_type"] == "return")
        .map(|r| {
            (
                r["request_id"].as_str().unwrap_or_default().to_string(),
                r["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The CLI killed right after it stored the return, before any pod delete reached the
/// cluster (the proxy answers no delete, so none can have). The return's machines are held
/// by a return whose process is dead: the next status call must release them on the spot,
/// not leave them "being returned" until the 300 s deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_cli_killed_after_storing_a_return_before_any_delete_is_finished_by_the_next_status_call()
{
    let _room = ROOM.lock().await;
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let w = World::new(
        "lc-kill-ret-early",
        setup().through(proxy.kubeconfig_path()),
    )
    .await;
    let id = acquired(&w).await;
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        only: RequestMatch {
            path_contains: Some("/pods".into()),
            methods: vec![hyper::Method::DELETE],
        },
        ..FaultPlan::default()
    });
    let mut child = w.spawn(&["machines", "return", "--request-id", &id]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ret = loop {
        if let Some((ret, _)) = stored_returns(&w).into_iter().next() {
            break ret;
        }
        assert!(Instant::now() < deadline, "no return stored within 60 s");
    };
    kill9(&mut child);
    assert_eq!(
        managed_pods(&w).await.len(),
        COUNT as usize,
        "no delete may have reached the cluster before the kill"
    );
    proxy.set_plan(FaultPlan::default());
    finished_by_status_reads(&w, &ret).await;
}

/// `orb serve` killed mid-return and started again, with nobody asking about the return:
/// the new server's start-up or refresh pass resumes it by itself (the dead server's claim
/// is free), so the pods go and the stored return completes without a single status call.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_killed_mid_return_and_restarted_finishes_it_with_nobody_polling() {
    let _room = ROOM.lock().await;
    let mut w = World::new("lc-restart-serve-ret", setup()).await;
    let id = acquired(&w).await;
    let left = kill_serve_mid_return(&mut w, &id).await;
    assert!(left > 0, "the kill must land mid-return: no pod was left");
    let started = Instant::now();
    w.server();
    // Only the cluster and the store are looked at: no status read can do the work.
    wait_for(
        "the restarted orb serve to finish the return",
        Duration::from_secs(120),
        || async {
            let pods = managed_pods(&w).await.len();
            let returns = stored_returns(&w);
            if pods == 0 && returns.iter().all(|(_, s)| s == "complete") && returns.len() == 1 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{pods} pods left; returns {returns:?}"))
            }
        },
    )
    .await;
    let ret = the_return(&w);
    returned_whole(&w, &ret, started).await;
}

/// A return of a StatefulSet's tail or of a Job's host while the apiserver answers nothing:
/// the release is cut off, so the return stays in progress (it is not failed and its
/// machines are not freed as if nothing happened), and once the cluster answers again the
/// next status read releases it. Returns the kept machines' ids.
async fn a_controller_return_through_a_blackout(kind: Kind, prefix: &str) -> (World, Vec<String>) {
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let w = World::new(prefix, Setup::new(kind).through(proxy.kubeconfig_path())).await;
    let id = w.request(4);
    let view = w
        .wait_status(&id, "four running machines", |v| {
            v["machines"]
                .as_array()
                .is_some_and(|ms| ms.len() == 4 && ms.iter().all(|m| m["status"] == "running"))
        })
        .await;
    let mut ids = machine_ids(&view);
    // StatefulSet pods are `<name>-<ordinal>`: the two highest ordinals are the tail.
    ids.sort();
    let (kept, going) = ids.split_at(2);
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    let mut args = vec!["machines", "return"];
    args.extend(going.iter().map(String::as_str));
    let out = w.run(&args);
    let returns = stored_returns(&w);
    assert_eq!(returns.len(), 1, "the return is stored: {}", stderr(&out));
    let (ret, status) = returns[0].clone();
    assert_eq!(
        status,
        "in_progress",
        "a release the cluster did not answer is neither failed nor done: {}\n{}",
        stdout(&out),
        stderr(&out)
    );
    proxy.set_plan(FaultPlan::default());
    let done = w.wait_finished(&ret).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    drop(proxy);
    (w, kept.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_statefulset_return_through_an_apiserver_blackout_scales_down_once_the_cluster_answers() {
    let (w, kept) =
        a_controller_return_through_a_blackout(Kind::StatefulSet, "lc-sts-blackout").await;
    let sets: Api<StatefulSet> = Api::namespaced(w.cluster.client.clone(), w.ns.name());
    let listed = sets.list(&Default::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].spec.replicas, Some(2));
    let acquire = the_one(&w, "acquire");
    w.wait_pods(
        &acquire,
        &kept,
        "the head of the StatefulSet stays, the tail goes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_job_return_through_an_apiserver_blackout_deletes_the_job_once_the_cluster_answers() {
    let (w, _) = a_controller_return_through_a_blackout(Kind::Job, "lc-job-blackout").await;
    let jobs: Api<Job> = Api::namespaced(w.cluster.client.clone(), w.ns.name());
    assert!(
        jobs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let acquire = the_one(&w, "acquire");
    w.wait_pods(&acquire, &[], "every pod of the Job goes with it")
        .await;
    every_stored_machine_gone(&w, "every host of the Job joins the return");
}
