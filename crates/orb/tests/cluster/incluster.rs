//! `orb serve` from its container image, run on this machine exactly as the Helm chart's pod
//! would run it (kube_fixture::pod_template: the chart's Deployment as installed, its
//! ConfigMap as files, a TokenRequest token of the chart's ServiceAccount, the in-cluster
//! variables, a read-only root, the pod's user), against the local control plane. No
//! kubeconfig exists in the pod: orb finds the service account by itself and reads its
//! namespace from the service-account file.
//!
//! The cluster scenarios then show the chart's RBAC is enough: acquire and return with each
//! handler, status from the watch cache, orphan GC deleting orphans, TokenReview auth, the node
//! and events watches, two replicas on PostgreSQL with the leader Lease, and the other two
//! namespace modes (a Role in each listed namespace, the ClusterRole of ["*"]). Every request
//! RBAC refused the ServiceAccount is read from the apiserver's audit log and fails the test
//! by verb and resource; the last test removes one verb and shows that it does.
//!
//! Needs root (the pod sandbox), `ORB_IMAGES_DIR` (scripts/build-images.sh), `ORB_HELM`, and
//! for the replicas `ORB_TEST_POSTGRES_URL`.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use crate::support::accounts::token_for;
use crate::support::serve_process::Server;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::Role;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fixture::audit::{Denial, assert_nothing_refused, denials, refusal_report};
use kube_fixture::helm::Release;
use kube_fixture::pod_sandbox::Images;
use kube_fixture::pod_template::{SandboxPod, pod_from_template};
use kube_fixture::{
    Check, TEST_NODE_KEY, TestCluster, client_from, default_kubeconfig_path, wait_for,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const GRANTED_BY: &str = "the chart's RBAC (deploy/helm/orb/templates/rbac.yaml)";

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/orb")
}

/// The chart installed into `ns` as release `orb` (every object named after the namespace,
/// so cluster-scoped ones never clash with another test's).
fn install(cluster: &TestCluster, ns: &str, mut values: Value) -> Release {
    values["fullnameOverride"] = json!(ns);
    Release::install(&cluster.kubeconfig, &chart(), "orb", ns, &values)
}

/// One pod of the chart's Deployment, running; the server is stopped before its root goes.
struct RunningPod {
    server: Server,
    pod: SandboxPod,
}

/// Starts pod `pod_name` of the installed Deployment `ns/ns`. Pods have network namespaces of
/// their own, these share the host's: `port` replaces the chart's listen port when several
/// run at once (the only change made to what the chart renders).
async fn start_pod(
    cluster: &TestCluster,
    ns: &str,
    pod_name: &str,
    images: &Images,
    port: Option<u16>,
) -> RunningPod {
    let deployment = Api::<Deployment>::namespaced(cluster.client.clone(), ns)
        .get(ns)
        .await
        .expect("the chart's Deployment");
    let template = serde_json::to_value(deployment.spec.template).unwrap();
    let mut pod = pod_from_template(cluster, ns, pod_name, &template, images).await;
    if let Some(port) = port {
        for arg in &mut pod.process.argv {
            if arg.starts_with("--listen=") {
                *arg = format!("--listen=0.0.0.0:{port}");
            }
        }
    }
    assert_eq!(
        pod.service_account,
        (ns.to_string(), ns.to_string()),
        "the pod runs as the chart's ServiceAccount"
    );
    let server = Server::spawn(pod.command());
    RunningPod { server, pod }
}

/// The value of the first sample line of `/metrics` that starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn metrics(server: &Server) -> String {
    match server.call("GET", "/metrics", None) {
        (200, Value::String(text)) => text,
        other => panic!("GET /metrics: {other:?}"),
    }
}

fn templates(node: &str) -> Value {
    let base = |id: &str, api: &str| {
        json!({"templateId": id, "providerApi": api, "maxNumber": 10, "imageId": "busybox:1.36",
               "command": ["sh", "-c", "sleep 3600"]})
    };
    // A Job request completes once every pod exited 0 (KWOK ends them after about a second).
    let mut job = base("job-worker", "Job");
    job["command"] = json!(["sh", "-c", "echo work done"]);
    let mut pinned = base("pinned", "Pod");
    pinned["nodeSelector"] = json!({TEST_NODE_KEY: node});
    pinned["tolerations"] =
        json!([{"key": TEST_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
    json!([
        base("pod-worker", "Pod"),
        base("deploy-worker", "Deployment"),
        base("sts-worker", "StatefulSet"),
        job,
        pinned
    ])
}

/// Requests `count` machines of `template` as `token`, waits for the end; the final view.
async fn acquire(server: &Server, token: &str, template: &str, count: u32) -> Value {
    let (code, view) = server.call_as(
        token,
        "POST",
        "/api/v1/machines/request",
        Some(&json!({"template_id": template, "count": count})),
    );
    assert!(code == 202 || code == 200, "{template}: {code} {view}");
    let id = view["request"]["request_id"].as_str().unwrap().to_string();
    let done = server.wait_finished_as(token, &id, WAIT).await;
    assert_eq!(done["request"]["status"], "complete", "{template}: {done}");
    assert_eq!(
        done["machines"].as_array().map(Vec::len),
        Some(count as usize),
        "{template}: {done}"
    );
    done
}

/// Returns `machine` as `token` and waits until the return completes.
async fn give_back(server: &Server, token: &str, machine: &str) {
    let (code, view) = server.call_as(
        token,
        "POST",
        "/api/v1/machines/return",
        Some(&json!({"machine_ids": [machine]})),
    );
    assert!(
        code == 202 || code == 200,
        "return {machine}: {code} {view}"
    );
    let id = view["request"]["request_id"].as_str().unwrap().to_string();
    let done = server.wait_finished_as(token, &id, WAIT).await;
    assert_eq!(
        done["request"]["status"], "complete",
        "return {machine}: {done}"
    );
}

/// A HostFactory host's orb directory: only config.json's `daemon` section, pointing at
/// `server` over HTTP, with a token file when given (no provider: a call it ran directly
/// would fail).
fn hostfactory_host(server: &Server, token: Option<&str>) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let mut daemon = json!({"url": format!("http://{}", server.addr)});
    if let Some(token) = token {
        let file = root.path().join("hf-token");
        std::fs::write(&file, format!("{token}\n")).unwrap();
        daemon["token_file"] = json!(file);
    }
    std::fs::create_dir_all(root.path().join("config")).unwrap();
    std::fs::write(
        root.path().join("config/config.json"),
        json!({"daemon": daemon}).to_string(),
    )
    .unwrap();
    root
}

/// getAvailableTemplates as the script runs it.
fn hostfactory_templates(root: &std::path::Path) -> std::process::Output {
    support::orb(root)
        .args(["--scheduler", "hostfactory", "templates", "list"])
        .output()
        .unwrap()
}

fn managed_pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap()
}

/// Deletes the test's Event in `default` when the test ends, pass or fail.
struct EventCleanup(String);

impl Drop for EventCleanup {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(client) = client_from(&default_kubeconfig_path()).await {
                    let events: Api<Event> = Api::namespaced(client, "default");
                    let _ = events.delete(&name, &DeleteParams::background()).await;
                }
            });
        })
        .join();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn the_image_runs_every_cluster_scenario_as_the_charts_service_account() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-ic").await;
    let n = ns.name().to_string();
    let node = cluster.node_with_room("orb-ic-node", 10).await;

    // Orphans for the GC, there before orb starts: a managed pod without a request id, a
    // managed Deployment of a request orb never stored; and a pod orb must never touch.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &n);
    let post = PostParams::default();
    pods.create(
        &post,
        &managed_pod("stray", json!({"orb.io/managed": "true"})),
    )
    .await
    .unwrap();
    pods.create(&post, &managed_pod("bystander", json!({"app": "other"})))
        .await
        .unwrap();
    let orphan: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "forgotten", "labels": {"orb.io/managed": "true",
                                                      "orb.io/request-id": "req-00000000-0000-4000-8000-000000000000"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "forgotten"}},
                 "template": {"metadata": {"labels": {"app": "forgotten"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    deployments.create(&post, &orphan).await.unwrap();

    let port = kube_fixture::free_port();
    let _release = install(
        &cluster,
        &n,
        json!({
            "port": port,
            "logLevel": "info",
            "provider": {"config": {
                "node_watch_enabled": true, "events_watch_enabled": true,
                "orphan_gc_enabled": true, "auto_cleanup_orphans": true,
                "orphan_gc_interval_seconds": 2, "orphan_min_age_seconds": 5,
            }},
            "auth": {"enabled": true, "roles": {format!("{n}:hf-driver"): "operator"}},
            "templates": templates(&node.name),
        }),
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), &n);
    let operator = token_for(&accounts, "hf-driver").await;
    let stranger = token_for(&accounts, "stranger").await;
    let orb = start_pod(&cluster, &n, &format!("{n}-0"), &images, None).await;
    let server = &orb.server;

    // TokenReview: the probes are open, the API wants a token the apiserver accepts and a role.
    assert_eq!(server.call("GET", "/livez", None).0, 200);
    let (code, body) = server.call("GET", "/api/v1/requests", None);
    assert_eq!(code, 401, "{body}");
    let (code, body) = server.call_as(&stranger, "GET", "/api/v1/requests", None);
    assert_eq!(code, 403, "{body}");
    let (code, body) = server.call_as("not-a-token", "GET", "/api/v1/requests", None);
    assert_eq!(code, 401, "{body}");
    let (code, body) = server.call_as(&operator, "GET", "/api/v1/requests", None);
    assert_eq!(code, 200, "{body}");

    // HostFactory on a host outside the cluster: its scripts forward to orb serve over HTTP
    // with the token of an operator account (docs/deploy.md).
    let (with_token, no_token) = (
        hostfactory_host(server, Some(&operator)),
        hostfactory_host(server, None),
    );
    let listed = hostfactory_templates(with_token.path());
    assert!(listed.status.success(), "{listed:?}");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        stdout.contains("\"job-worker\""),
        "the chart's templates: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(
        !stderr.contains("note:"),
        "forwarded, not run directly: {stderr}"
    );
    let refused = hostfactory_templates(no_token.path());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("the daemon refused the call (401 Unauthorized)"),
        "without a token: {refused:?}"
    );

    // Acquire and return with each handler, in the namespace of the service account.
    for template in ["pod-worker", "deploy-worker", "sts-worker", "job-worker"] {
        let done = acquire(server, &operator, template, 2).await;
        // The last one: a StatefulSet gives back only its highest ordinals.
        let mut ids: Vec<String> = done["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["machine_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        give_back(server, &operator, ids.last().unwrap()).await;
    }

    // The watch cache answers the status reads.
    let text = metrics(server);
    assert_eq!(sample(&text, "orb_k8s_cache_serving "), Some(1.0), "{text}");
    assert!(
        sample(&text, "orb_k8s_status_reads_total{reason=\"cache\"}").unwrap_or(0.0) >= 1.0,
        "no status read came from the watch cache: {text}"
    );
    let (code, ready) = server.call("GET", "/readyz", None);
    assert_eq!(code, 200, "{ready}");
    assert_eq!(ready["checks"]["watch_cache"]["status"], "ok", "{ready}");

    // Node watch: the machine on the test node carries its facts.
    let done = acquire(server, &operator, "pinned", 1).await;
    let machine = done["machines"][0]["machine_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, listed) = server.call_as(&operator, "GET", "/api/v1/machines", None);
    assert_eq!(code, 200, "{listed}");
    let shown = listed["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["machine_id"] == machine.as_str())
        .unwrap_or_else(|| panic!("{machine} not listed: {listed}"))
        .clone();
    assert_eq!(shown["node"]["name"], node.name.as_str(), "{shown}");
    assert_eq!(shown["node"]["cpu_millis"], 32000, "{shown}");

    // Events watch: Karpenter announces the node's removal; HostFactory hears of it.
    let event_name = format!("{}.disrupt", node.name);
    let _event = EventCleanup(event_name.clone());
    let now = Timestamp::now().to_string();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": event_name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node.name},
        "reason": "DisruptionTerminating", "message": "Disrupting Node: Drifted",
        "type": "Normal", "source": {"component": "karpenter"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }))
    .unwrap();
    Api::<Event>::namespaced(cluster.client.clone(), "default")
        .create(&post, &event)
        .await
        .expect("create the disruption event");
    wait_for("the machine in getReturnRequests", WAIT, || async {
        let (code, reply) = server.call_as(
            &operator,
            "POST",
            "/api/v1/hostfactory/getReturnRequests",
            None,
        );
        let stdout = reply["stdout"].as_str().unwrap_or_default().to_string();
        if code == 200 && stdout.contains(&machine) {
            Check::Done(())
        } else {
            Check::NotYet(format!("{code} {reply}"))
        }
    })
    .await;

    // Orphan GC: both orphans deleted; the unmanaged pod stays.
    wait_for("the orphan GC to delete both orphans", WAIT, || async {
        let stray = pods.get_opt("stray").await.unwrap();
        let forgotten = deployments.get_opt("forgotten").await.unwrap();
        let gone = |deleting: Option<bool>| deleting.is_none_or(|d| d);
        let stray_gone = gone(stray.map(|p| p.metadata.deletion_timestamp.is_some()));
        let forgotten_gone = gone(forgotten.map(|d| d.metadata.deletion_timestamp.is_some()));
        if stray_gone && forgotten_gone {
            Check::Done(())
        } else {
            Check::NotYet(format!(
                "stray gone {stray_gone}, forgotten gone {forgotten_gone}"
            ))
        }
    })
    .await;
    let bystander = pods.get("bystander").await.unwrap();
    assert!(bystander.metadata.deletion_timestamp.is_none());
    let text = metrics(server);
    assert!(
        sample(
            &text,
            "orb_k8s_orphans_total{kind=\"pod\",action=\"deleted\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );

    assert_nothing_refused(&cluster, &n, &n, GRANTED_BY).await;
    let log = server.log();
    assert!(
        !log.to_ascii_lowercase().contains("forbidden"),
        "orb logged a refusal:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn two_replicas_on_postgres_share_the_store_and_one_holds_the_lease() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-ic-pg").await;
    let n = ns.name().to_string();
    // The pod resolves the database's host name through its /etc/hosts (the static binary
    // has glibc's files and dns lookups built in).
    let url = url.replacen("@127.0.0.1:", "@localhost:", 1);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "orb-db"}, "stringData": {"url": url},
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), &n)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let provider = format!("ic-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let _release = install(
        &cluster,
        &n,
        json!({
            "replicas": 2,
            "postgres": {"existingSecret": "orb-db"},
            "provider": {"name": provider},
            "templates": templates("unused"),
        }),
    );
    let pods = [format!("{n}-a"), format!("{n}-b")];
    let mut replicas = Vec::new();
    for name in &pods {
        replicas.push(Some(
            start_pod(&cluster, &n, name, &images, Some(kube_fixture::free_port())).await,
        ));
    }
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), &n);
    let lease_name = format!("orb-serve-{provider}");
    let holder = |lease: Option<Lease>| {
        lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default()
    };
    let leader = wait_for("one replica to hold the Lease", WAIT, || async {
        let holder = holder(leases.get_opt(&lease_name).await.unwrap());
        // The identity starts with the hostname, which is the pod's name.
        match pods
            .iter()
            .position(|p| holder.starts_with(&format!("{p}-")))
        {
            Some(i) => Check::Done(i),
            None => Check::NotYet(format!("holder {holder:?}")),
        }
    })
    .await;
    let follower = 1 - leader;
    let leading = |pod: &Option<RunningPod>| {
        sample(&metrics(&pod.as_ref().unwrap().server), "orb_k8s_leader ")
    };
    wait_for("the leader gauge on both", WAIT, || async {
        match (leading(&replicas[leader]), leading(&replicas[follower])) {
            (Some(1.0), Some(0.0)) => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;

    // One store: an acquire on one replica is returned through the other.
    let (a, b) = (
        &replicas[leader].as_ref().unwrap().server,
        &replicas[follower].as_ref().unwrap().server,
    );
    let (code, view) = a.call(
        "POST",
        "/api/v1/machines/request",
        Some(&json!({"template_id": "deploy-worker", "count": 2})),
    );
    assert!(code == 202 || code == 200, "{code} {view}");
    let id = view["request"]["request_id"].as_str().unwrap().to_string();
    let done = b.wait_finished(&id, WAIT).await;
    assert_eq!(done["request"]["status"], "complete", "{done}");
    let machine = done["machines"][0]["machine_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, view) = b.call(
        "POST",
        "/api/v1/machines/return",
        Some(&json!({"machine_ids": [machine]})),
    );
    assert!(code == 202 || code == 200, "{code} {view}");
    let ret = view["request"]["request_id"].as_str().unwrap().to_string();
    let done = a.wait_finished(&ret, WAIT).await;
    assert_eq!(done["request"]["status"], "complete", "{done}");

    // The leader stops (SIGTERM, as the kubelet sends): it releases the Lease, the other takes it.
    let stopped = replicas[leader].take().unwrap();
    let stopped_name = stopped.pod.name.clone();
    stopped.server.stop();
    wait_for("the other replica to take the Lease", WAIT, || async {
        let holder = holder(leases.get_opt(&lease_name).await.unwrap());
        if holder.starts_with(&format!("{}-", pods[follower])) {
            Check::Done(())
        } else {
            Check::NotYet(format!("holder {holder:?} ({stopped_name} stopped)"))
        }
    })
    .await;
    wait_for("the new leader's gauge", WAIT, || async {
        match leading(&replicas[follower]) {
            Some(1.0) => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;

    assert_nothing_refused(&cluster, &n, &n, GRANTED_BY).await;
}

/// A Pod request in `target` and the return of one machine, then status from the watch cache
/// and nothing refused: what the chart's RBAC of one namespace mode must allow.
async fn acquire_and_return_in(server: &Server, target: &str, cluster: &TestCluster, ns: &str) {
    let done = acquire(server, "unused", "worker", 2).await;
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), target);
    let machine = done["machines"][0]["machine_id"]
        .as_str()
        .unwrap()
        .to_string();
    pods.get(&machine)
        .await
        .unwrap_or_else(|e| panic!("machine {machine} is no pod in {target}: {e}"));
    give_back(server, "unused", &machine).await;
    let text = metrics(server);
    assert_eq!(sample(&text, "orb_k8s_cache_serving "), Some(1.0), "{text}");
    assert_nothing_refused(cluster, ns, ns, GRANTED_BY).await;
}

fn worker_in(namespace: &str) -> Value {
    json!([{"templateId": "worker", "providerApi": "Pod", "maxNumber": 10, "namespace": namespace,
            "imageId": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn several_namespaces_get_a_role_each_and_orb_works_in_all_of_them() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-ic-multi").await;
    let other = cluster.namespace("orb-ic-other").await;
    let (n, o) = (ns.name().to_string(), other.name().to_string());
    let _release = install(
        &cluster,
        &n,
        json!({"port": kube_fixture::free_port(), "provider": {"config": {"namespaces": [n, o]}},
               "templates": worker_in(&o)}),
    );
    let orb = start_pod(&cluster, &n, &format!("{n}-0"), &images, None).await;
    acquire_and_return_in(&orb.server, &o, &cluster, &n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn every_namespace_runs_on_the_cluster_role() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-ic-all").await;
    let other = cluster.namespace("orb-ic-any").await;
    let (n, o) = (ns.name().to_string(), other.name().to_string());
    // No orphan GC here: with ["*"] it would judge every other test's managed objects.
    let _release = install(
        &cluster,
        &n,
        json!({"port": kube_fixture::free_port(), "provider": {"config": {"namespaces": ["*"]}},
               "templates": worker_in(&o)}),
    );
    let orb = start_pod(&cluster, &n, &format!("{n}-0"), &images, None).await;
    acquire_and_return_in(&orb.server, &o, &cluster, &n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn a_verb_missing_from_the_role_fails_by_verb_and_resource() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-ic-deny").await;
    let n = ns.name().to_string();
    let _release = install(
        &cluster,
        &n,
        json!({"port": kube_fixture::free_port(), "templates": templates("unused")}),
    );
    // Take `watch` on pods away from the chart's Role, as a chart without it would render.
    let roles: Api<Role> = Api::namespaced(cluster.client.clone(), &n);
    let mut role = roles.get(&n).await.unwrap();
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "pods") {
            rule.verbs.retain(|v| v != "watch");
        }
    }
    roles
        .replace(&n, &PostParams::default(), &role)
        .await
        .unwrap();

    let orb = start_pod(&cluster, &n, &format!("{n}-0"), &images, None).await;
    // Requests still complete (status reads fall back to a LIST), so only the audit log shows
    // what the watch cache was refused.
    acquire(&orb.server, "unused", "pod-worker", 1).await;
    let want = Denial {
        verb: "watch".into(),
        api_group: String::new(),
        resource: "pods".into(),
        subresource: String::new(),
        namespace: n.clone(),
    };
    let refused = wait_for("the refused watch in the audit log", WAIT, || async {
        let refused = denials(&cluster, &n, &n).await;
        if refused.contains(&want) {
            Check::Done(refused)
        } else {
            Check::NotYet(format!("{refused:?}"))
        }
    })
    .await;
    let report = refusal_report(&refused, &n, &n, GRANTED_BY).expect("a report");
    assert!(
        report.contains(&format!("watch pods in namespace {n}")),
        "{report}"
    );
    assert!(report.contains(GRANTED_BY), "{report}");
}
