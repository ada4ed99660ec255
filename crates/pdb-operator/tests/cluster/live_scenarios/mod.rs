//! The note's Deployment/StatefulSet acceptance scenarios (§16, 1–41 and 59) that live_apps
//! does not cover, against the real local control plane: class values, invalid annotations,
//! priority and tie-breaks, every enforcement mode, selection criteria, custom budgets with real
//! policy/v1 evictions, admission and defaulting on the real apiserver, lifecycle edges, an idle
//! maintenance window and metrics. docs/pdb-operator/scenarios.md maps each scenario to its test.
//!
//! Budget-only Deployments are created `paused`: the operator reads `spec.replicas`, and a paused
//! Deployment makes no pods, which keeps dozens of 10-replica workloads cheap. Tests that check
//! evictions use real (gated) pods. This module holds the shared helpers; the tests live in its
//! submodules.

mod admission;
mod budgets;
mod enforcement;
mod lifecycle;
mod policies;

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::api::{PostParams, PropagationPolicy};
use kube::{Api, Client, ResourceExt};
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use pdb_operator::crd::{ClusterPDBPolicy, PDBPolicy};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------------
// Helpers

/// A Deployment with pod labels `app=<name>`; `paused` ones never create pods.
fn deployment_spec(
    name: &str,
    replicas: i32,
    labels: Value,
    annotations: Value,
    paused: bool,
) -> Deployment {
    let gates = if paused {
        json!([])
    } else {
        json!([{"name": HOLD_GATE}])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "paused": paused,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"schedulingGates": gates,
                         "containers": [{"name": "c", "image": "busybox:1.36"}]}
            }
        }
    }))
    .unwrap()
}

async fn create_paused(
    api: &Api<Deployment>,
    name: &str,
    replicas: i32,
    labels: Value,
    annotations: Value,
) {
    api.create(
        &PostParams::default(),
        &deployment_spec(name, replicas, labels, annotations, true),
    )
    .await
    .unwrap_or_else(|e| panic!("create Deployment {name}: {e}"));
}

/// A StatefulSet whose pods (`app=<app>`) start gated; OrderedReady keeps it at one pending pod.
fn stateful_set(name: &str, app: &str, replicas: i32, labels: Value, annotations: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"replicas": replicas, "serviceName": name,
                 "selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"schedulingGates": [{"name": HOLD_GATE}],
                                       "containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    })
}

fn policy_resource() -> ApiResource {
    ApiResource::erase::<PDBPolicy>(&())
}

/// Creates a PDBPolicy from raw JSON (no client-side defaults, so the apiserver's defaulting
/// and validation are what the test sees).
async fn create_policy(client: &Client, ns: &str, name: &str, spec: Value) {
    try_create_policy(client, ns, name, spec)
        .await
        .unwrap_or_else(|(code, m)| panic!("create PDBPolicy {name}: {code} {m}"));
}

async fn try_create_policy(
    client: &Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> Result<DynamicObject, (u16, String)> {
    let ar = policy_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let obj = DynamicObject::new(name, &ar).data(json!({ "spec": spec }));
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => panic!("create PDBPolicy {name}: no API answer: {e}"),
    }
}

/// Creates a ClusterPDBPolicy `<ns>-<suffix>` limited to `namespaces`; deleted when the guard drops.
async fn create_cluster_policy(
    cluster: &TestCluster,
    name: &str,
    spec: Value,
) -> ClusterPolicyGuard {
    let ar = ApiResource::erase::<ClusterPDBPolicy>(&());
    let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &ar);
    let obj = DynamicObject::new(name, &ar).data(json!({ "spec": spec }));
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create ClusterPDBPolicy {name}: {e}"));
    ClusterPolicyGuard {
        kubeconfig: cluster.kubeconfig.clone(),
        name: name.to_string(),
    }
}

fn max_unavailable(p: &PodDisruptionBudget) -> Option<Value> {
    p.spec
        .as_ref()
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| serde_json::to_value(v).unwrap())
}

/// Waits for `<name>-pdb` with minAvailable `want` and returns it.
async fn wait_min(
    pdbs: &Api<PodDisruptionBudget>,
    workload: &str,
    want: Value,
) -> PodDisruptionBudget {
    let name = format!("{workload}-pdb");
    wait_pdb(pdbs, &name, &format!("minAvailable {want}"), |p| {
        min_available(p) == Some(want.clone())
    })
    .await
}

/// Events with `reason` about the object of `kind` named `name`.
async fn events_of(client: &Client, ns: &str, kind: &str, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            let r = e.regarding.as_ref();
            r.and_then(|r| r.kind.as_deref()) == Some(kind)
                && r.and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// Waits for an event with `reason` on `kind`/`name` whose note contains `text`; returns the note.
async fn wait_event_of(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
    text: &str,
) -> String {
    wait_for(
        &format!("{reason} on {kind} {name} containing {text:?}"),
        WAIT,
        || async {
            let found = events_of(client, ns, kind, name, reason).await;
            let notes: Vec<String> = found
                .iter()
                .map(|e| e.note.clone().unwrap_or_default())
                .collect();
            match notes.iter().find(|n| n.contains(text)) {
                Some(n) => Check::Done(n.clone()),
                None => Check::NotYet(format!("{reason} notes so far: {notes:?}")),
            }
        },
    )
    .await
}

async fn wait_deploy_event(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    text: &str,
) -> String {
    wait_event_of(client, ns, "Deployment", name, reason, text).await
}

/// A fresh namespace with the policy CRDs installed and an operator watching it, with the
/// namespace's Deployment and PDB APIs. Fields drop in declaration order: the operator stops
/// first, the namespace goes last.
struct Scenario {
    op: Operator,
    deployments: Api<Deployment>,
    pdbs: Api<PodDisruptionBudget>,
    /// Where the operator serves its metrics (with [`scenario_with_metrics`] only).
    addr: SocketAddr,
    ns: TestNamespace,
    cluster: TestCluster,
}

async fn scenario(prefix: &str) -> Scenario {
    scenario_tuned(prefix, false).await
}

/// A [`Scenario`] whose operator serves `/metrics` on `addr`.
async fn scenario_with_metrics(prefix: &str) -> Scenario {
    scenario_tuned(prefix, true).await
}

async fn scenario_tuned(prefix: &str, metrics: bool) -> Scenario {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace(prefix).await;
    let addr = free_addr();
    let op = if metrics {
        start_operator_with(&cluster, ns.name(), |o| o.health_addr = Some(addr))
    } else {
        start_operator(&cluster, ns.name())
    };
    Scenario {
        op,
        deployments: Api::namespaced(cluster.client.clone(), ns.name()),
        pdbs: Api::namespaced(cluster.client.clone(), ns.name()),
        addr,
        ns,
        cluster,
    }
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// The operator's `/metrics` text (plain HTTP/1.1 GET).
async fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Value of the series `name` whose labels include every pair of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            if n != name {
                return None;
            }
            let pairs: Vec<(&str, &str)> = rest
                .trim_end_matches('}')
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .map(|(k, v)| (k, v.trim_end_matches('"')))
                .collect();
            labels
                .iter()
                .all(|want| pairs.contains(want))
                .then(|| value.parse().ok())
                .flatten()
        })
}

/// Waits until `/metrics` has series `name` with `labels` and `accept(value)` holds.
async fn wait_metric(
    addr: SocketAddr,
    name: &str,
    labels: &[(&str, &str)],
    accept: impl Fn(f64) -> bool,
) -> String {
    wait_for(&format!("metric {name}{labels:?}"), WAIT, || async {
        match scrape(addr).await {
            Some(t) => match sample(&t, name, labels) {
                Some(v) if accept(v) => Check::Done(t),
                Some(v) => Check::NotYet(format!("value {v}")),
                None => Check::NotYet("no such series".into()),
            },
            None => Check::NotYet("no answer".into()),
        }
    })
    .await
}

fn annotation<'a>(p: &'a PodDisruptionBudget, key: &str) -> Option<&'a str> {
    p.annotations().get(key).map(String::as_str)
}
