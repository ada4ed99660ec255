//! The real `orb serve` binary killed with SIGKILL in the middle of a 200-pod acquire, then
//! started again: the request ends complete, every pod it has is a stored machine and no
//! machine has two pods. And two replicas on one PostgreSQL acquiring and returning at the
//! same time: every request is processed once. Needs the control plane
//! (`tools/control-plane/cp up`); the replica test needs `ORB_TEST_POSTGRES_URL`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::postgres_url;
use crate::support::serve_process::{Server, http, install, pods_by_request};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::identity::Managed;
use kube_fixture::{Check, TestCluster, wait_for};
use serde_json::{Value, json};

fn machine_ids(view: &Value) -> Vec<String> {
    view["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["machine_id"].as_str().unwrap().to_string())
        .collect()
}

fn pod_names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_server_killed_mid_acquire_finishes_the_request_after_restart_without_orphans_or_duplicates()
 {
    // 200 pods: one at a time with the other big tests of this binary (see crate::ROOM).
    let _room = crate::ROOM.lock().await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("sigkill").await;
    let identity = cluster.broker_identity(&ns).await;
    let provider = format!("kill-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    // Interrupted acquires older than 2 s are resumed at start-up.
    let root = install(
        &ns,
        &provider,
        &identity.kubeconfig,
        json!({"orphan_min_age_seconds": 2}),
    );
    let first = Server::start(root.path(), None);

    let addr = first.addr.clone();
    // The call never answers: the server dies under it.
    std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| {
            http(
                &addr,
                "POST",
                "/api/v1/machines/request",
                Some(&json!({"template_id": "worker", "count": 200})),
            )
        });
    });
    // Polled tightly (not every 250 ms like wait_for): 200 creates take well under a second.
    let pods_api = Api::<Pod>::namespaced(cluster.client.clone(), ns.name());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let before_kill = loop {
        let seen = pods_api
            .list(&ListParams::default().labels("orb.io/managed=true"))
            .await
            .unwrap()
            .items
            .len();
        if seen > 0 {
            break seen;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod of the acquire within 60 s: {}",
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    first.kill9();
    let by_request = pods_by_request(&cluster, ns.name()).await;
    assert_eq!(
        by_request.len(),
        1,
        "one request's pods: {:?}",
        by_request.keys()
    );
    let (id, pods) = by_request.into_iter().next().unwrap();
    assert!(
        before_kill < 200 && pods.len() < 200,
        "the kill must land mid-acquire: {} pods seen before, {} after",
        before_kill,
        pods.len()
    );

    // Let the interrupted request age past orphan_min_age_seconds (2 s), so the start-up
    // reconciliation (not the 30 s periodic pass) resumes it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = Server::start(root.path(), None);
    let view = second.wait_finished(&id, Duration::from_secs(240)).await;
    assert_eq!(
        view["request"]["status"],
        "complete",
        "{}\nserver log:\n{}",
        view["request"],
        second.log()
    );
    let machines = machine_ids(&view);
    let distinct: BTreeSet<String> = machines.iter().cloned().collect();
    assert_eq!(machines.len(), 200, "{}", view["request"]);
    assert_eq!(distinct.len(), 200, "a machine id is stored twice");

    let by_request = pods_by_request(&cluster, ns.name()).await;
    let pods = by_request.get(&id).cloned().unwrap_or_default();
    assert_eq!(
        by_request.keys().collect::<Vec<_>>(),
        vec![&id],
        "pods of another or no request exist"
    );
    assert_eq!(
        pod_names(&pods),
        distinct,
        "the request's pods must be exactly its stored machines (no orphan, none missing)"
    );
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        let machine = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("orb.io/machine-id"))
            .cloned()
            .unwrap_or_else(|| pod.metadata.name.clone().unwrap());
        *per_machine.entry(machine).or_default() += 1;
    }
    assert!(
        per_machine.values().all(|n| *n == 1),
        "two pods for one machine: {per_machine:?}"
    );
    let (code, ready) = second.call("GET", "/readyz", None);
    let detail = ready["checks"]["reconciliation"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        detail.contains("interrupted acquires settled") && detail.contains(&id),
        "{code} {ready}"
    );
    second.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn two_replicas_on_postgres_acquire_and_return_concurrently_without_processing_twice() {
    let Some(url) = postgres_url() else { return };
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("replicas").await;
    // With PostgreSQL `orb serve` elects a leader: the shipped identity plus the Lease.
    let identity = cluster
        .broker_identity_for(
            &ns,
            Managed::Namespaces(vec![ns.name().to_string()]),
            &["leader_election"],
        )
        .await;
    let provider = format!(
        "replica-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let roots = [
        install(&ns, &provider, &identity.kubeconfig, json!({})),
        install(&ns, &provider, &identity.kubeconfig, json!({})),
    ];
    let servers = [
        Server::start(roots[0].path(), Some(&url)),
        Server::start(roots[1].path(), Some(&url)),
    ];
    let leaders = wait_for(
        "one leader among the replicas",
        Duration::from_secs(60),
        || async {
            let leading: Vec<bool> = servers
                .iter()
                .map(|s| {
                    let (_, ready) = s.call("GET", "/readyz", None);
                    ready["checks"]["leader"]["detail"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("this replica leads")
                })
                .collect();
            match leading.iter().filter(|l| **l).count() {
                1 => Check::Done(leading),
                n => Check::NotYet(format!("{n} leaders")),
            }
        },
    )
    .await;
    assert_eq!(leaders.len(), 2);

    // Six acquires of 3 pods, alternating replicas, all at once.
    let acquires: Vec<(usize, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let server = &servers[i % 2];
                scope.spawn(move || {
                    let (code, view) = server.call(
                        "POST",
                        "/api/v1/machines/request",
                        Some(&json!({"template_id": "worker", "count": 3})),
                    );
                    assert!(code == 200 || code == 202, "{code} {view}");
                    (
                        i % 2,
                        view["request"]["request_id"].as_str().unwrap().to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: BTreeSet<&String> = acquires.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), 6, "six distinct requests");

    // Both replicas poll every request until it finishes.
    let mut finished = BTreeMap::new();
    for (i, (_, id)) in acquires.iter().enumerate() {
        let _ = servers[(i + 1) % 2].call("GET", &format!("/api/v1/requests/{id}/status"), None);
        let view = servers[i % 2]
            .wait_finished(id, Duration::from_secs(120))
            .await;
        assert_eq!(view["request"]["status"], "complete", "{}", view["request"]);
        finished.insert(id.clone(), view);
    }
    let by_request = pods_by_request(&cluster, ns.name()).await;
    for (id, view) in &finished {
        let machines = machine_ids(view);
        assert_eq!(machines.len(), 3, "{id}: {machines:?}");
        let pods = by_request.get(id).cloned().unwrap_or_default();
        assert_eq!(
            pod_names(&pods),
            machines.iter().cloned().collect::<BTreeSet<_>>(),
            "{id}: pods must be exactly the stored machines"
        );
    }
    assert_eq!(
        by_request.values().map(Vec::len).sum::<usize>(),
        18,
        "no request created its pods twice"
    );

    // Each request is returned through the replica that did not acquire it, all at once.
    let returns: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = acquires
            .iter()
            .map(|(owner, id)| {
                let server = &servers[(owner + 1) % 2];
                scope.spawn(move || {
                    let (code, view) = server.call(
                        "POST",
                        "/api/v1/machines/return",
                        Some(&json!({"request_id": id})),
                    );
                    assert!(code == 200 || code == 202, "{code} {view}");
                    (
                        id.clone(),
                        view["request"]["request_id"].as_str().unwrap().to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let return_ids: BTreeSet<&String> = returns.iter().map(|(_, r)| r).collect();
    assert_eq!(return_ids.len(), 6, "one return request per acquire");
    for (i, (_, ret)) in returns.iter().enumerate() {
        let view = servers[i % 2]
            .wait_finished(ret, Duration::from_secs(120))
            .await;
        assert_eq!(view["request"]["status"], "complete", "{}", view["request"]);
        assert_eq!(machine_ids(&view).len(), 3, "{}", view["request"]);
    }
    wait_for(
        "every returned pod to be gone",
        Duration::from_secs(60),
        || async {
            let left: usize = pods_by_request(&cluster, ns.name())
                .await
                .values()
                .map(Vec::len)
                .sum();
            if left == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{left} pods left"))
            }
        },
    )
    .await;
    // A second return of the same machines is refused: each was returned once.
    let (code, body) = servers[0].call(
        "POST",
        "/api/v1/machines/return",
        Some(&json!({"request_id": acquires[0].1})),
    );
    assert!(
        code >= 400,
        "a second return must be refused: {code} {body}"
    );
    for server in servers {
        server.stop();
    }
}
