//! Processes killed in the middle of an acquire, and an apiserver that stops answering, all
//! with default settings (no shortened ages or timeouts): the next process that looks at the
//! request finishes it at once, every pod carrying its label ends as a stored machine, no
//! machine has two pods, and the request completes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube_fixture::fault_proxy::{FaultPlan, FaultProxy};
use kube_fixture::{Check, wait_for};
use serde_json::Value;

use super::world::{Kind, Setup, World, machine_ids, summary};
use crate::ROOM;
use crate::support::serve_process::{Server, http};

pub(crate) const COUNT: u32 = 200;

pub(crate) fn kill9(child: &mut std::process::Child) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Waits (tightly: 200 creates take about a second) until the request's first pods exist.
async fn first_pods(w: &World) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = managed_pods(w).await.len();
        if n > 0 {
            return n;
        }
        assert!(Instant::now() < deadline, "no pod within 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) async fn managed_pods(w: &World) -> BTreeSet<String> {
    w.pods_api()
        .list(&kube::api::ListParams::default().labels("orb.io/managed=true"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The one acquire stored in this installation.
fn the_acquire(w: &World) -> String {
    the_one(w, "acquire")
}

/// The one request of `request_type` stored in this installation.
pub(crate) fn the_one(w: &World, request_type: &str) -> String {
    let listed = w.json(&["requests", "list"]);
    let ids: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["request_type"] == request_type)
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{listed}");
    ids[0].clone()
}

/// The invariant after any crash: the request is complete with `COUNT` distinct machines, and
/// the pods in the cluster are exactly those machines.
pub(crate) async fn finished_whole(w: &World, id: &str) -> Value {
    let view = wait_for(
        "the request to complete",
        Duration::from_secs(180),
        || async {
            let view = w.status(id);
            if view["request"]["status"] == "complete" {
                Check::Done(view)
            } else {
                Check::NotYet(summary(&view))
            }
        },
    )
    .await;
    let machines = machine_ids(&view);
    let distinct: BTreeSet<String> = machines.iter().cloned().collect();
    assert_eq!(machines.len(), COUNT as usize, "{}", summary(&view));
    assert_eq!(distinct.len(), machines.len(), "a machine is stored twice");
    assert_eq!(
        managed_pods(w).await,
        distinct,
        "the pods are exactly the stored machines: no orphan, none missing"
    );
    view
}

pub(crate) fn setup() -> Setup {
    Setup::new(Kind::Pod).max_number(500)
}

/// `orb machines request` (the CLI, no daemon) killed while it creates: the next CLI status
/// call resumes the acquire on the spot (its creator's claim died with it), long before the
/// 300 s deadline, and the request completes with every pod recorded.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_cli_killed_mid_acquire_is_finished_by_the_next_status_call() {
    let _room = ROOM.lock().await;
    let w = World::new("lc-kill-cli", setup()).await;
    let mut child = w.spawn(&["machines", "request", "subject", &COUNT.to_string()]);
    let before = first_pods(&w).await;
    kill9(&mut child);
    let at_kill = managed_pods(&w).await.len();
    assert!(
        before < COUNT as usize && at_kill < COUNT as usize,
        "the kill must land mid-acquire: {before} pods before, {at_kill} after"
    );
    let id = the_acquire(&w);
    let started = Instant::now();
    let view = w.status(&id);
    assert_eq!(
        machine_ids(&view).len(),
        COUNT as usize,
        "one status call resumed and recorded the acquire: {}",
        summary(&view)
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    finished_whole(&w, &id).await;
}

/// Killed right after it stored the request, before (or just as) its first create went out:
/// the same, whatever the cluster got.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_cli_killed_right_after_storing_the_request_is_finished_by_the_next_status_call() {
    let _room = ROOM.lock().await;
    let w = World::new("lc-kill-cli-early", setup()).await;
    let db = w.path().join("work/orb.db");
    let mut child = w.spawn(&["machines", "request", "subject", &COUNT.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !db.exists() {
        assert!(Instant::now() < deadline, "no database within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The request is the process's first write; kill as soon as it can be read back.
    loop {
        let listed = w.run(&["requests", "list"]);
        let stored = serde_json::from_slice::<Value>(&listed.stdout)
            .ok()
            .and_then(|v| v.as_array().map(|a| !a.is_empty()))
            .unwrap_or(false);
        if listed.status.success() && stored {
            break;
        }
        assert!(Instant::now() < deadline, "no request stored within 60 s");
    }
    kill9(&mut child);
    let id = the_acquire(&w);
    finished_whole(&w, &id).await;
}

/// `orb serve` killed mid-acquire, with HostFactory-style status polls going on (through the
/// CLI, since the daemon is gone): a poll resumes the acquire at once, and a restarted
/// `orb serve` finds nothing left to do.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_killed_mid_acquire_is_finished_by_the_next_poll() {
    let _room = ROOM.lock().await;
    let mut w = World::new("lc-kill-serve", setup()).await;
    let server = w.server();
    let addr = server.addr.clone();
    // The call never answers: the server dies under it.
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            http(
                &addr,
                "POST",
                "/api/v1/machines/request",
                Some(&serde_json::json!({"template_id": "subject", "count": COUNT})),
            )
        });
    });
    first_pods(&w).await;
    w.kill_server();
    let id = the_acquire(&w);
    let started = Instant::now();
    let view = w.status(&id);
    assert_eq!(
        machine_ids(&view).len(),
        COUNT as usize,
        "{}",
        summary(&view)
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    finished_whole(&w, &id).await;
    let again = Server::start(w.path(), None);
    let (code, view) = again.call("GET", &format!("/api/v1/requests/{id}/status"), None);
    assert_eq!(code, 200);
    assert_eq!(view["request"]["status"], "complete", "{view}");
}

/// `orb serve` killed mid-acquire and started again with nobody polling: its start-up
/// reconciliation resumes the acquire at once (there is no 300 s age gate any more).
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_killed_mid_acquire_resumes_it_at_start_up() {
    let _room = ROOM.lock().await;
    let mut w = World::new("lc-kill-serve-restart", setup()).await;
    let server = w.server();
    let addr = server.addr.clone();
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            http(
                &addr,
                "POST",
                "/api/v1/machines/request",
                Some(&serde_json::json!({"template_id": "subject", "count": COUNT})),
            )
        });
    });
    first_pods(&w).await;
    w.kill_server();
    let started = Instant::now();
    let again = Server::start(w.path(), None);
    // Read the store as it is: only the restarted daemon can record the acquire.
    let id = the_acquire(&w);
    wait_for(
        "the restarted orb serve to record the acquire",
        Duration::from_secs(60),
        || async {
            let stored = w.json(&["machines", "list", "--all"]);
            let n = stored.as_array().map_or(0, Vec::len);
            if n == COUNT as usize {
                Check::Done(())
            } else {
                Check::NotYet(format!("{n} machines stored"))
            }
        },
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "resumed at start-up, not after an age gate"
    );
    drop(again);
    finished_whole(&w, &id).await;
}

/// `orb serve` killed the moment it has replied to a 200-pod acquire (the pods may still be
/// starting): the reply's request id is the truth. Polled through the CLI, the request
/// completes with exactly one stored machine per pod.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orb_serve_killed_right_after_replying_to_an_acquire_leaves_it_whole() {
    let _room = ROOM.lock().await;
    let mut w = World::new("lc-kill-serve-reply", setup()).await;
    let (code, reply) = w.server().call(
        "POST",
        "/api/v1/machines/request",
        Some(&serde_json::json!({"template_id": "subject", "count": COUNT})),
    );
    w.kill_server();
    assert!(code == 200 || code == 202, "{code}: {reply}");
    let id = reply["request"]["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no request id in {reply}"))
        .to_string();
    assert_eq!(id, the_acquire(&w), "the reply names the stored acquire");
    finished_whole(&w, &id).await;
}

/// The apiserver stops answering for 10 s in the middle of an acquire: the acquire is not
/// failed; it says the cluster did not answer, and once the cluster is back a status read
/// finishes it with every pod recorded once. (Several worker threads: the fault proxy runs
/// in this process and must keep serving while the test waits on an orb process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_apiserver_blackout_mid_acquire_is_ridden_out() {
    let _room = ROOM.lock().await;
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let w = World::new("lc-blackout", setup().through(proxy.kubeconfig_path())).await;
    let child = w.spawn(&["machines", "request", "subject", &COUNT.to_string()]);
    first_pods(&w).await;
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    let out_started = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let id = the_acquire(&w);
    let view = w.status(&id);
    assert_eq!(
        view["request"]["status"],
        "in_progress",
        "{}",
        summary(&view)
    );
    let message = view["request"]["status_message"].as_str().unwrap_or("");
    assert!(
        message.contains("did not answer") || view["note"].as_str().is_some(),
        "{} / {}",
        summary(&view),
        super::world::stderr(&out)
    );
    let blackout = Duration::from_secs(10).saturating_sub(out_started.elapsed());
    tokio::time::sleep(blackout).await;
    proxy.set_plan(FaultPlan::default());
    finished_whole(&w, &id).await;
}

/// `/readyz` tells the truth while the apiserver does not answer: failing (503, with the
/// `apiserver` check saying why), and ready again once it answers. Meanwhile a status read
/// served from the watch cache says that it may be out of date.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn readyz_fails_while_the_apiserver_does_not_answer() {
    let cluster = kube_fixture::TestCluster::connect().await;
    let proxy = FaultProxy::start(&cluster).await;
    let mut w = World::new("lc-readyz", setup().through(proxy.kubeconfig_path())).await;
    let server = w.server();
    let ready = |want: u16| {
        let addr = server.addr.clone();
        async move {
            wait_for(&format!("/readyz {want}"), Duration::from_secs(30), || {
                let addr = addr.clone();
                async move {
                    let (code, body) =
                        tokio::task::spawn_blocking(move || http(&addr, "GET", "/readyz", None))
                            .await
                            .unwrap();
                    if code == want {
                        Check::Done(body)
                    } else {
                        Check::NotYet(format!("{code}: {body}"))
                    }
                }
            })
            .await
        }
    };
    ready(200).await;
    let addr = server.addr.clone();
    let (code, view) = tokio::task::spawn_blocking(move || {
        http(
            &addr,
            "POST",
            "/api/v1/machines/request?wait=true&timeout=60",
            Some(&serde_json::json!({"template_id": "subject", "count": 2})),
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 200, "{view}");
    assert_eq!(view["request"]["status"], "complete", "{view}");
    let id = view["request"]["request_id"].as_str().unwrap().to_string();
    proxy.set_plan(FaultPlan {
        reset_rate: 1.0,
        ..FaultPlan::default()
    });
    // The pod watch breaks too, not only new calls.
    proxy.cut_connections();
    let down = ready(503).await;
    assert_eq!(down["checks"]["apiserver"]["status"], "failing", "{down}");
    // A status read now is answered from what orb last saw, and says it may be out of date.
    let stale = wait_for(
        "a status read that says it may be stale",
        Duration::from_secs(30),
        || {
            let addr = server.addr.clone();
            let path = format!("/api/v1/requests/{id}/status");
            async move {
                let (code, view) =
                    tokio::task::spawn_blocking(move || http(&addr, "GET", &path, None))
                        .await
                        .unwrap();
                let note = view["note"].as_str().unwrap_or("").to_string();
                if code == 200 && note.contains("out of date") {
                    Check::Done(view)
                } else {
                    Check::NotYet(format!("{code}: {view}"))
                }
            }
        },
    )
    .await;
    assert_eq!(stale["request"]["status"], "complete", "{stale}");
    proxy.set_plan(FaultPlan::default());
    let up = ready(200).await;
    assert_eq!(up["checks"]["apiserver"]["status"], "ok", "{up}");
}
