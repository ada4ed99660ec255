//! The note's Deployment/StatefulSet acceptance scenarios (§16, 1–41 and 59) that live_apps.rs
//! does not cover, against the real local control plane: class values, invalid annotations,
//! priority and tie-breaks, every enforcement mode, selection criteria, custom budgets with real
//! policy/v1 evictions, admission and defaulting on the real apiserver, lifecycle edges, an idle
//! maintenance window and metrics. docs/pdb-operator/scenarios.md maps each scenario to its test.
//!
//! Budget-only Deployments are created `paused`: the operator reads `spec.replicas`, and a paused
//! Deployment makes no pods, which keeps dozens of 10-replica workloads cheap. Tests that check
//! evictions use real (gated) pods.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::api::{PostParams, PropagationPolicy};
use kube::{Api, Client, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
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

// ---------------------------------------------------------------------------------------------
// Scenarios 2, 3, 4, 5, 6, 7, 10: class values, drain clamp, function boost, invalid annotations.

#[tokio::test]
async fn annotation_classes_functions_and_invalid_values_give_the_documented_budgets() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-classes").await;
    let n = ns.name();
    let addr = free_addr();
    let op = start_operator_with(&cluster, n, |o| o.health_addr = Some(addr));
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let class = |v: &str| json!({"pdboperator.io/availability-class": v});
    let class_fn = |v: &str, f: &str| json!({"pdboperator.io/availability-class": v, "pdboperator.io/workload-function": f});
    create_policy(
        c,
        n,
        "std-advisory",
        json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"policy": "std"}}}),
    )
    .await;
    let cases: Vec<(&str, i32, Value, Value)> = vec![
        // Scenario 2.
        ("nc", 10, json!({}), class("non-critical")),
        ("ha", 10, json!({}), class("high-availability")),
        ("mc", 10, json!({}), class("mission-critical")),
        // Scenario 3 (the parts live_apps does not cover).
        ("mc9", 9, json!({}), class("mission-critical")),
        ("std2", 2, json!({}), class("standard")),
        ("std10", 10, json!({}), class("standard")),
        // Scenario 4.
        ("sec", 10, json!({}), class_fn("standard", "security")),
        ("ncsec", 10, json!({}), class_fn("non-critical", "security")),
        (
            "mcsec",
            10,
            json!({}),
            class_fn("mission-critical", "security"),
        ),
        (
            "hamgmt",
            10,
            json!({}),
            class_fn("high-availability", "management"),
        ),
        // Scenario 5, 6.
        ("bad", 10, json!({}), class("super-duper-critical")),
        (
            "badpol",
            2,
            json!({"policy": "std"}),
            class("super-duper-critical"),
        ),
        // Scenario 7 (replicas 0), 10.
        ("zero", 0, json!({}), class("standard")),
        ("plain", 3, json!({}), json!({})),
        ("single", 1, json!({}), json!({})),
    ];
    for (name, replicas, labels, annotations) in cases {
        create_paused(&deployments, name, replicas, labels, annotations).await;
    }

    for (name, want) in [("nc", "20%"), ("ha", "75%"), ("mc", "90%")] {
        wait_min(&pdbs, name, json!(want)).await;
    }
    wait_min(&pdbs, "mc9", json!(8)).await;
    let clamp = wait_deploy_event(c, n, "mc9", "BudgetClamped", "").await;
    assert!(clamp.contains('8'), "{clamp}");
    wait_min(&pdbs, "std2", json!("50%")).await;
    // Scenario 12: an annotation-only class change at 10 replicas updates the PDB. (The apps
    // API bumps a Deployment's generation on annotation changes too; the label-only edit
    // without a generation bump is scenario 14 in live_apps.rs.)
    wait_min(&pdbs, "std10", json!("50%")).await;
    deployments
        .patch(
            "std10",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "pdboperator.io/availability-class": "mission-critical"}}})),
        )
        .await
        .unwrap();
    wait_min(&pdbs, "std10", json!("90%")).await;
    wait_deploy_event(
        c,
        n,
        "std10",
        "PDBUpdated",
        "minAvailable: 50% -> minAvailable: 90%",
    )
    .await;

    for (name, want, function) in [
        ("sec", "75%", "security"),
        ("ncsec", "50%", "security"),
        ("mcsec", "90%", "security"),
        ("hamgmt", "75%", "management"),
    ] {
        let p = wait_min(&pdbs, name, json!(want)).await;
        assert_eq!(
            p.labels()["pdboperator.io/workload-function"],
            function,
            "{name}"
        );
    }

    // Scenario 5 (corrected): warning, no PDB, and the reconcile did not fail.
    let note = wait_deploy_event(
        c,
        n,
        "bad",
        "InvalidConfiguration",
        "invalid availability class",
    )
    .await;
    assert!(note.contains("super-duper-critical"), "{note}");
    // Scenario 6 (corrected): the policy still applies.
    let p = wait_min(&pdbs, "badpol", json!("50%")).await;
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("std-advisory")
    );
    wait_deploy_event(
        c,
        n,
        "badpol",
        "InvalidConfiguration",
        "invalid availability class",
    )
    .await;
    // Scenario 7 and 10.
    let skipped =
        wait_deploy_event(c, n, "zero", "DeploymentSkipped", "insufficient replicas").await;
    assert!(skipped.contains("(0)"), "{skipped}");
    wait_deploy_event(
        c,
        n,
        "plain",
        "DeploymentUnmanaged",
        "no availability configuration",
    )
    .await;

    // Scenario 7 (corrected): one unconfigured replica is only Unmanaged, never Skipped.
    wait_deploy_event(c, n, "single", "DeploymentUnmanaged", "").await;
    assert!(
        events_of(c, n, "Deployment", "single", "DeploymentSkipped")
            .await
            .is_empty()
    );
    // Scenario 31: a managed PDB deleted by hand comes back.
    let nc = pdbs.get("nc-pdb").await.unwrap();
    pdbs.delete("nc-pdb", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(&pdbs, "nc-pdb", "recreated after a manual delete", |p| {
        p.uid() != nc.uid() && min_available(p) == Some(json!("20%"))
    })
    .await;

    for name in ["bad", "zero", "plain", "single"] {
        assert!(
            pdbs.get_opt(&format!("{name}-pdb"))
                .await
                .unwrap()
                .is_none(),
            "{name} has no PDB"
        );
    }
    assert!(
        events_of(c, n, "Deployment", "std2", "BudgetClamped")
            .await
            .is_empty(),
        "standard at 2 replicas is not clamped"
    );
    // Counted with the event series: a reconcile error would retry and post it again.
    assert_eq!(
        occurrences(c, n, "bad", "InvalidConfiguration").await,
        1,
        "one warning, no retry storm"
    );
    let text = scrape(addr).await.expect("metrics");
    assert_eq!(
        sample(
            &text,
            "pdb_operator_reconciliation_errors_total",
            &[("controller", "deployment-pdb")]
        ),
        None,
        "no reconcile failed: {text}"
    );
    op.assert_running();
}

// ---------------------------------------------------------------------------------------------
// Scenarios 16, 17, 59: priority, alphabetical tie-break, and the metrics that report them.

#[tokio::test]
async fn priority_and_tie_break_pick_the_policy_and_metrics_tell_the_truth() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-prio").await;
    let n = ns.name();
    let addr = free_addr();
    let _op = start_operator_with(&cluster, n, |o| o.health_addr = Some(addr));
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    // Scenario 16.
    create_policy(
        c,
        n,
        "low",
        json!({"availabilityClass": "non-critical", "priority": 10,
        "workloadSelector": {"matchLabels": {"case": "prio"}}}),
    )
    .await;
    create_policy(
        c,
        n,
        "high",
        json!({"availabilityClass": "mission-critical", "priority": 100,
        "workloadSelector": {"matchLabels": {"case": "prio"}}}),
    )
    .await;
    // Scenario 17: priority omitted on a-policy (defaults to 50), explicit 50 on b-policy.
    create_policy(
        c,
        n,
        "b-policy",
        json!({"availabilityClass": "mission-critical", "priority": 50,
        "workloadSelector": {"matchLabels": {"case": "tie"}}}),
    )
    .await;
    create_policy(
        c,
        n,
        "a-policy",
        json!({"availabilityClass": "non-critical",
        "workloadSelector": {"matchLabels": {"case": "tie"}}}),
    )
    .await;
    // Scenario 59: a policy-only workload.
    create_policy(
        c,
        n,
        "frontend",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"tier": "frontend"}}}),
    )
    .await;
    create_paused(&deployments, "prio", 10, json!({"case": "prio"}), json!({})).await;
    create_paused(&deployments, "tie", 10, json!({"case": "tie"}), json!({})).await;
    create_paused(
        &deployments,
        "fe",
        2,
        json!({"tier": "frontend"}),
        json!({}),
    )
    .await;

    let p = wait_min(&pdbs, "prio", json!("90%")).await;
    assert_eq!(annotation(&p, "pdboperator.io/policy-source"), Some("high"));
    assert!(
        events_of(c, n, "Deployment", "prio", "PolicyConflict")
            .await
            .is_empty()
    );
    let p = wait_min(&pdbs, "tie", json!("20%")).await;
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("a-policy")
    );
    let conflict = wait_deploy_event(c, n, "tie", "PolicyConflict", "alphabetical tie-break").await;
    assert!(
        conflict.contains("Multiple policies (2) match at priority 50")
            && conflict.contains("a-policy"),
        "{conflict}"
    );
    wait_min(&pdbs, "fe", json!("50%")).await;

    let text = wait_metric(
        addr,
        "pdb_operator_multi_policy_matches_total",
        &[("namespace", n), ("policy_count", "2")],
        |v| v >= 2.0, // "prio" and "tie" each resolved at least once with two candidates
    )
    .await;
    assert!(
        sample(
            &text,
            "pdb_operator_policy_tie_breaks_total",
            &[("namespace", n), ("resolution_method", "alphabetical")]
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // Scenario 59: policy-only workloads count as managed; one series per class.
    let text = wait_metric(
        addr,
        "pdb_operator_deployments_managed",
        &[("namespace", n), ("availability_class", "standard")],
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        sample(
            &text,
            "pdb_operator_deployments_managed",
            &[("namespace", n), ("availability_class", "mission-critical")]
        ),
        Some(1.0),
        "{text}"
    );
    let compliant = [
        ("namespace", n),
        ("deployment", "fe"),
        ("kind", "Deployment"),
        ("reason", "compliant"),
    ];
    assert_eq!(
        sample(&text, "pdb_operator_compliance_status", &compliant),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pdb_operator_policies_active", &[("namespace", n)]),
        Some(5.0),
        "{text}"
    );
    // Deleting the Deployment removes its compliance series and its managed count.
    deployments
        .delete("fe", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("compliance series of fe removed", WAIT, || async {
        match scrape(addr).await {
            Some(t)
                if sample(
                    &t,
                    "pdb_operator_compliance_status",
                    &[("deployment", "fe")],
                )
                .is_none() =>
            {
                Check::Done(t)
            }
            Some(_) => Check::NotYet("still exported".into()),
            None => Check::NotYet("no answer".into()),
        }
    })
    .await;
    let text = scrape(addr).await.unwrap();
    assert_eq!(
        sample(
            &text,
            "pdb_operator_deployments_managed",
            &[("namespace", n), ("availability_class", "standard")]
        ),
        None,
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios 18–23 and 36 (flexible default minimum): every enforcement mode on real objects.

#[tokio::test]
async fn strict_flexible_and_advisory_policies_treat_annotations_as_the_decision_table_says() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-enforce").await;
    let n = ns.name();
    let addr = free_addr();
    let _op = start_operator_with(&cluster, n, |o| o.health_addr = Some(addr));
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let sel = |case: &str| json!({"matchLabels": {"case": case}});
    let policies = [
        (
            "strict",
            json!({"availabilityClass": "mission-critical", "enforcement": "strict", "workloadSelector": sel("strict")}),
        ),
        (
            "flex19",
            json!({"availabilityClass": "standard", "enforcement": "flexible", "minimumClass": "standard", "workloadSelector": sel("flex19")}),
        ),
        (
            "flex20",
            json!({"availabilityClass": "high-availability", "enforcement": "flexible", "minimumClass": "standard", "workloadSelector": sel("flex20")}),
        ),
        (
            "flex20c",
            json!({"availabilityClass": "mission-critical", "enforcement": "flexible", "minimumClass": "mission-critical", "workloadSelector": sel("flex20c")}),
        ),
        (
            "flex36",
            json!({"availabilityClass": "high-availability", "enforcement": "flexible", "workloadSelector": sel("flex36")}),
        ),
        (
            "adv",
            json!({"availabilityClass": "standard", "workloadSelector": sel("adv")}),
        ),
        (
            "advno",
            json!({"availabilityClass": "standard", "enforcement": "advisory", "allowOverride": false, "workloadSelector": sel("advno")}),
        ),
        (
            "reason",
            json!({"availabilityClass": "standard", "overrideRequiresReason": true, "workloadSelector": sel("reason")}),
        ),
        (
            "approve",
            json!({"availabilityClass": "standard", "overrideRequiresAnnotation": "approved-by", "workloadSelector": sel("approve")}),
        ),
    ];
    for (name, spec) in policies {
        create_policy(c, n, name, spec).await;
    }
    let ann = |class: &str, extra: Value| {
        let mut a = json!({"pdboperator.io/availability-class": class});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        a
    };
    let none = json!({});
    let workloads = [
        ("s18", "strict", ann("non-critical", none.clone())),
        ("f19-low", "flex19", ann("non-critical", none.clone())),
        ("f19-high", "flex19", ann("mission-critical", none.clone())),
        ("f20-std", "flex20", ann("standard", none.clone())),
        ("f20-low", "flex20", ann("non-critical", none.clone())),
        ("f20-custom", "flex20c", ann("custom", none.clone())),
        ("f36", "flex36", ann("standard", none.clone())),
        ("a21", "adv", ann("mission-critical", none.clone())),
        ("a21-no", "advno", ann("mission-critical", none.clone())),
        (
            "a22-noreason",
            "reason",
            ann("mission-critical", none.clone()),
        ),
        (
            "a22-reason",
            "reason",
            ann(
                "mission-critical",
                json!({"pdboperator.io/override-reason": "peak season"}),
            ),
        ),
        (
            "a23-missing",
            "approve",
            ann("mission-critical", none.clone()),
        ),
        (
            "a23-empty",
            "approve",
            ann("mission-critical", json!({"approved-by": ""})),
        ),
        (
            "a23-ok",
            "approve",
            ann("mission-critical", json!({"approved-by": "alice"})),
        ),
    ];
    for (name, case, annotations) in workloads {
        create_paused(&deployments, name, 10, json!({"case": case}), annotations).await;
    }
    // The same rows for StatefulSets (Ours: every kind gets the events).
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    for (name, case, class) in [
        ("s18-sts", "strict", "non-critical"),
        ("f19-sts", "flex19", "non-critical"),
    ] {
        let sts = stateful_set(
            name,
            name,
            10,
            json!({"case": case}),
            json!({"pdboperator.io/availability-class": class}),
        );
        sets.create(
            &PostParams::default(),
            &serde_json::from_value(sts).unwrap(),
        )
        .await
        .unwrap();
    }

    // (workload, minAvailable, policy-source, enforcement-mode, effective class label)
    let expected = [
        ("s18", "90%", "strict", "strict", "mission-critical"),
        ("f19-low", "50%", "flex19", "flexible", "standard"),
        ("f19-high", "90%", "flex19", "flexible", "mission-critical"),
        ("f20-std", "50%", "flex20", "flexible", "standard"),
        ("f20-low", "50%", "flex20", "flexible", "standard"),
        (
            "f20-custom",
            "90%",
            "flex20c",
            "flexible",
            "mission-critical",
        ),
        ("f36", "75%", "flex36", "flexible", "high-availability"),
        ("a21", "90%", "adv", "advisory", "mission-critical"),
        ("a21-no", "50%", "advno", "advisory", "standard"),
        ("a22-noreason", "50%", "reason", "advisory", "standard"),
        (
            "a22-reason",
            "90%",
            "reason",
            "advisory",
            "mission-critical",
        ),
        ("a23-missing", "50%", "approve", "advisory", "standard"),
        ("a23-empty", "50%", "approve", "advisory", "standard"),
        ("a23-ok", "90%", "approve", "advisory", "mission-critical"),
    ];
    for (name, min, source, mode, class) in expected {
        let p = wait_min(&pdbs, name, json!(min)).await;
        assert_eq!(
            annotation(&p, "pdboperator.io/policy-source"),
            Some(source),
            "{name}"
        );
        assert_eq!(
            annotation(&p, "pdboperator.io/enforcement-mode"),
            Some(mode),
            "{name}"
        );
        assert_eq!(
            p.labels()["pdboperator.io/availability-class"],
            class,
            "{name}"
        );
        assert_eq!(max_unavailable(&p), None, "{name}");
    }

    // Events of the decision table (note §5).
    wait_deploy_event(
        c,
        n,
        "s18",
        "PolicyEnforced",
        "Annotation override blocked by strict policy strict",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f19-low",
        "BelowMinimum",
        "Annotation non-critical below minimum standard",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f19-high",
        "AnnotationAccepted",
        "Annotation mission-critical accepted by flexible policy flex19 (minimum standard)",
    )
    .await;
    wait_deploy_event(c, n, "f20-std", "AnnotationAccepted", "").await;
    wait_deploy_event(
        c,
        n,
        "f20-low",
        "BelowMinimum",
        "Annotation non-critical below minimum standard, using standard",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f20-custom",
        "BelowMinimum",
        "Annotation custom below minimum mission-critical",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f36",
        "BelowMinimum",
        "Annotation standard below minimum high-availability, using high-availability",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a22-noreason",
        "OverrideRequiresReason",
        "pdboperator.io/override-reason",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a23-missing",
        "OverrideRequiresAnnotation",
        "approved-by",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a23-empty",
        "OverrideRequiresAnnotation",
        "approved-by",
    )
    .await;
    // Accepted overrides and the silent rows raise no warning.
    for (name, reason) in [
        ("a21", "OverrideRequiresAnnotation"),
        ("a21-no", "OverrideRequiresAnnotation"),
        ("a22-reason", "OverrideRequiresReason"),
        ("a23-ok", "OverrideRequiresAnnotation"),
        ("f19-high", "BelowMinimum"),
        ("f20-std", "BelowMinimum"),
    ] {
        assert!(
            events_of(c, n, "Deployment", name, reason).await.is_empty(),
            "{name}: no {reason}"
        );
    }

    let p = wait_min(&pdbs, "s18-sts", json!("90%")).await;
    assert_eq!(p.owner_references()[0].kind, "StatefulSet");
    wait_event_of(
        c,
        n,
        "StatefulSet",
        "s18-sts",
        "PolicyEnforced",
        "blocked by strict policy strict",
    )
    .await;
    wait_min(&pdbs, "f19-sts", json!("50%")).await;
    wait_event_of(
        c,
        n,
        "StatefulSet",
        "f19-sts",
        "BelowMinimum",
        "Annotation non-critical below minimum standard",
    )
    .await;

    // Override counter: every (result, reason) pair of note §5.
    for (result, reason) in [
        ("blocked", "strict-enforcement"),
        ("accepted", "meets-minimum"),
        ("rejected", "below-minimum"),
        ("blocked", "override-not-allowed"),
        ("blocked", "missing-required-annotation"),
        ("blocked", "missing-reason"),
        ("accepted", "advisory-mode"),
    ] {
        wait_metric(
            addr,
            "pdb_operator_override_attempts_total",
            &[("result", result), ("reason", reason), ("namespace", n)],
            |v| v >= 1.0,
        )
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios 24 (cluster half), 25, 26, 27, 28: which policies select which workloads.

#[tokio::test]
async fn selection_by_names_functions_expressions_and_namespaces() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-select").await;
    let n = ns.name();
    let _op = start_operator(&cluster, n);
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);

    // Scenario 26.
    create_policy(
        c,
        n,
        "by-name",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"workloadNames": ["webapp-component"]}}),
    )
    .await;
    create_paused(
        &deployments,
        "web-7",
        10,
        json!({}),
        json!({"pdboperator.io/workload-name": "webapp-component"}),
    )
    .await;
    // Scenario 27: the functions policy would win (priority 900) if name inference applied to it.
    create_policy(
        c,
        n,
        "security-only",
        json!({"availabilityClass": "mission-critical", "priority": 900,
        "workloadSelector": {"workloadFunctions": ["security"]}}),
    )
    .await;
    create_policy(
        c,
        n,
        "team-auth",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"team": "auth"}}}),
    )
    .await;
    create_paused(
        &deployments,
        "auth-svc",
        10,
        json!({"team": "auth"}),
        json!({}),
    )
    .await;
    // Scenario 28: matchLabels AND In, NotIn, Exists, DoesNotExist.
    create_policy(
        c,
        n,
        "expr",
        json!({"availabilityClass": "standard", "workloadSelector": {
        "matchLabels": {"sel": "expr"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod"]},
            {"key": "tier", "operator": "NotIn", "values": ["batch"]},
            {"key": "owner", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"}]}}),
    )
    .await;
    let expr_cases = [
        (
            "e-match",
            json!({"sel": "expr", "env": "prod", "owner": "x"}),
            true,
        ),
        (
            "e-notin-other",
            json!({"sel": "expr", "env": "prod", "owner": "x", "tier": "web"}),
            true,
        ),
        (
            "e-in-wrong",
            json!({"sel": "expr", "env": "dev", "owner": "x"}),
            false,
        ),
        ("e-in-absent", json!({"sel": "expr", "owner": "x"}), false),
        (
            "e-notin-listed",
            json!({"sel": "expr", "env": "prod", "owner": "x", "tier": "batch"}),
            false,
        ),
        (
            "e-exists-missing",
            json!({"sel": "expr", "env": "prod"}),
            false,
        ),
        (
            "e-dne-present",
            json!({"sel": "expr", "env": "prod", "owner": "x", "legacy": "1"}),
            false,
        ),
        (
            "e-labels-differ",
            json!({"sel": "other", "env": "prod", "owner": "x"}),
            false,
        ),
    ];
    for (name, labels, _) in &expr_cases {
        create_paused(&deployments, name, 2, labels.clone(), json!({})).await;
    }
    // Scenario 25: a cluster policy limited to another (non-existent, test-unique) namespace.
    let staging = format!("{n}-staging");
    let _other = create_cluster_policy(
        &cluster,
        &format!("{n}-staging-only"),
        json!({
        "availabilityClass": "mission-critical",
        "workloadSelector": {"matchLabels": {"env": "prod"}, "namespaces": [staging]}}),
    )
    .await;
    create_paused(
        &deployments,
        "prod",
        10,
        json!({"env": "prod"}),
        json!({"pdboperator.io/availability-class": "standard"}),
    )
    .await;
    // Scenario 24: a ClusterPDBPolicy limited to this namespace reaches it.
    let cp = format!("{n}-cluster-wide");
    let _cp = create_cluster_policy(
        &cluster,
        &cp,
        json!({
        "availabilityClass": "high-availability",
        "workloadSelector": {"matchLabels": {"reach": "cluster"}, "namespaces": [n]}}),
    )
    .await;
    create_paused(
        &deployments,
        "reached",
        10,
        json!({"reach": "cluster"}),
        json!({}),
    )
    .await;
    // Scenario 25 (corrected): a namespaced policy listing another namespace is invalid and
    // takes no part. Without the webhook the apiserver stores it; the operator refuses it.
    create_policy(
        c,
        n,
        "reach-out",
        json!({"availabilityClass": "mission-critical",
        "workloadSelector": {"matchLabels": {"reach": "out"}, "namespaces": [staging]}}),
    )
    .await;
    create_paused(
        &deployments,
        "outside",
        10,
        json!({"reach": "out"}),
        json!({}),
    )
    .await;

    let p = wait_min(&pdbs, "web-7", json!("50%")).await;
    assert_eq!(p.labels()["pdboperator.io/workload"], "webapp-component");
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("by-name")
    );
    let p = wait_min(&pdbs, "auth-svc", json!("75%")).await;
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("team-auth")
    );
    assert_eq!(p.labels()["pdboperator.io/workload-function"], "security");
    for (name, _, matched) in &expr_cases {
        if *matched {
            let p = wait_min(&pdbs, name, json!("50%")).await;
            assert_eq!(
                annotation(&p, "pdboperator.io/policy-source"),
                Some("expr"),
                "{name}"
            );
        } else {
            wait_deploy_event(c, n, name, "DeploymentUnmanaged", "").await;
            assert!(
                pdbs.get_opt(&format!("{name}-pdb"))
                    .await
                    .unwrap()
                    .is_none(),
                "{name}"
            );
        }
    }
    let p = wait_min(&pdbs, "prod", json!("50%")).await;
    assert_eq!(annotation(&p, "pdboperator.io/policy-source"), None);
    assert_eq!(annotation(&p, "pdboperator.io/enforcement-mode"), None);
    let p = wait_min(&pdbs, "reached", json!("75%")).await;
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some(cp.as_str())
    );
    wait_deploy_event(c, n, "outside", "DeploymentUnmanaged", "").await;
    assert!(pdbs.get_opt("outside-pdb").await.unwrap().is_none());
    let invalid = wait_event_of(
        c,
        n,
        "PDBPolicy",
        "reach-out",
        "PolicyInvalid",
        "only reaches its own namespace",
    )
    .await;
    assert!(invalid.contains(&staging), "{invalid}");
    let policies: Api<PDBPolicy> = Api::namespaced(c.clone(), n);
    let st = policies
        .get("reach-out")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let validated: Vec<_> = st
        .conditions
        .iter()
        .filter(|c| c.type_ == "Validated")
        .collect();
    assert_eq!(validated.len(), 1, "{st:?}");
    assert_eq!(
        (validated[0].status.as_str(), validated[0].reason.as_str()),
        ("False", "PolicyInvalid")
    );

    // Scenario 38: a valid policy that won nothing is Ready=False/NoComponentsMatched.
    wait_for("security-only not Ready", WAIT, || async {
        let st = policies
            .get("security-only")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
        match ready {
            Some(r) if r.status == "False" && r.reason == "NoComponentsMatched" => Check::Done(()),
            _ => Check::NotYet(format!("{st:?}")),
        }
    })
    .await;

    // Scenario 15: with the policy gone, an annotated workload keeps its PDB, which no longer
    // names a policy.
    create_policy(
        c,
        n,
        "s15",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"case": "s15"}}}),
    )
    .await;
    create_paused(
        &deployments,
        "s15",
        2,
        json!({"case": "s15"}),
        json!({"pdboperator.io/availability-class": "standard"}),
    )
    .await;
    wait_pdb(&pdbs, "s15-pdb", "from policy s15", |p| {
        annotation(p, "pdboperator.io/policy-source") == Some("s15")
    })
    .await;
    policies
        .delete("s15", &DeleteParams::default())
        .await
        .unwrap();
    let p = wait_pdb(&pdbs, "s15-pdb", "kept, without policy annotations", |p| {
        annotation(p, "pdboperator.io/policy-source").is_none()
    })
    .await;
    assert_eq!(min_available(&p), Some(json!("50%")));
    assert_eq!(annotation(&p, "pdboperator.io/enforcement-mode"), None);
    assert!(
        events_of(c, n, "Deployment", "s15", "PDBDeleted")
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios 29, 30, 36 (custom default): custom budgets, with real evictions.

#[tokio::test]
async fn custom_budgets_reach_the_pdb_and_real_evictions_follow_them() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-custom").await;
    let n = ns.name();
    let _op = start_operator(&cluster, n);
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    let custom = |cfg: Value, case: &str| {
        json!({"availabilityClass": "custom", "customPDBConfig": cfg,
               "workloadSelector": {"matchLabels": {"case": case}}})
    };
    create_policy(c, n, "min3", custom(json!({"minAvailable": 3}), "min3")).await;
    create_policy(
        c,
        n,
        "max1",
        custom(
            json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            "max1",
        ),
    )
    .await;
    create_policy(c, n, "min5", custom(json!({"minAvailable": 5}), "min5")).await;
    create_policy(c, n, "max0", custom(json!({"maxUnavailable": 0}), "max0")).await;
    create_paused(&deployments, "c3", 5, json!({"case": "min3"}), json!({})).await;
    create_paused(&deployments, "cmax0", 2, json!({"case": "max0"}), json!({})).await;
    for (name, replicas, case) in [("cmax", 3, "max1"), ("c5", 5, "min5")] {
        deployments
            .create(
                &PostParams::default(),
                &deployment_spec(name, replicas, json!({"case": case}), json!({}), false),
            )
            .await
            .unwrap();
    }

    // Scenario 29 and 36: minAvailable stays an integer; the apiserver defaulted the eviction
    // policy to IfHealthyBudget and it reaches the PDB.
    let p = wait_min(&pdbs, "c3", json!(3)).await;
    assert_eq!(max_unavailable(&p), None);
    assert_eq!(
        p.spec
            .as_ref()
            .unwrap()
            .unhealthy_pod_eviction_policy
            .as_deref(),
        Some("IfHealthyBudget")
    );
    // Scenario 30: maxUnavailable 0 → 1.
    let p = wait_pdb(&pdbs, "cmax0-pdb", "maxUnavailable 1", |p| {
        max_unavailable(p) == Some(json!(1))
    })
    .await;
    assert_eq!(min_available(&p), None);
    wait_deploy_event(c, n, "cmax0", "BudgetClamped", "").await;

    // Scenario 29 (corrected): maxUnavailable 1 and AlwaysAllow on the PDB; one eviction allowed.
    let p = wait_pdb(&pdbs, "cmax-pdb", "maxUnavailable 1", |p| {
        max_unavailable(p) == Some(json!(1))
    })
    .await;
    assert_eq!(min_available(&p), None);
    assert_eq!(
        p.spec
            .as_ref()
            .unwrap()
            .unhealthy_pod_eviction_policy
            .as_deref(),
        Some("AlwaysAllow")
    );
    let ready = ungate_and_wait_ready(&pods, "app=cmax", 3).await;
    wait_disruptions(&pdbs, "cmax-pdb", 3, 1).await;
    assert_eq!(
        evict(&pods, &ready[0].name_any()).await,
        Ok(()),
        "1st eviction under maxUnavailable 1"
    );
    let (code, message) = evict(&pods, &ready[1].name_any())
        .await
        .expect_err("2nd eviction refused");
    assert_eq!(code, 429, "{message}");
    assert!(message.contains("disruption budget"), "{message}");

    // Scenario 30 (corrected): custom minAvailable 5 of 5 → 4 + BudgetClamped; one eviction.
    wait_min(&pdbs, "c5", json!(4)).await;
    let clamp = wait_deploy_event(c, n, "c5", "BudgetClamped", "").await;
    assert!(clamp.contains('4'), "{clamp}");
    let ready = ungate_and_wait_ready(&pods, "app=c5", 5).await;
    wait_disruptions(&pdbs, "c5-pdb", 5, 1).await;
    assert_eq!(
        evict(&pods, &ready[0].name_any()).await,
        Ok(()),
        "1st eviction of the clamped budget"
    );
    let (code, message) = evict(&pods, &ready[1].name_any())
        .await
        .expect_err("2nd eviction refused");
    assert_eq!(code, 429, "{message}");
}

// ---------------------------------------------------------------------------------------------
// Scenarios 36 and 37: defaulting and admission on the real apiserver.

#[tokio::test]
async fn the_apiserver_defaults_policies_and_rejects_invalid_ones() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-admission").await;
    let n = ns.name();
    let c = &cluster.client;
    let sel = json!({"matchLabels": {"app": "a"}});

    // Scenario 36: what the apiserver stores when fields are omitted.
    let base = |extra: Value| {
        let mut s = json!({"availabilityClass": "standard", "workloadSelector": sel});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let stored = |o: DynamicObject| o.data["spec"].clone();
    let s = stored(
        try_create_policy(c, n, "omitted", base(json!({})))
            .await
            .unwrap(),
    );
    assert_eq!(
        (&s["priority"], &s["enforcement"], &s["allowOverride"]),
        (&json!(50), &json!("advisory"), &json!(true)),
        "{s}"
    );
    let s = stored(
        try_create_policy(c, n, "zero", base(json!({"priority": 0})))
            .await
            .unwrap(),
    );
    assert_eq!(s["priority"], json!(0), "explicit 0 is kept: {s}");
    for mode in ["strict", "flexible"] {
        let s = stored(
            try_create_policy(c, n, mode, base(json!({"enforcement": mode})))
                .await
                .unwrap(),
        );
        assert_eq!(s["allowOverride"], json!(true), "{mode}: {s}");
        assert_eq!(
            s.get("minimumClass"),
            None,
            "{mode}: read as availabilityClass, not written: {s}"
        );
    }
    let s = stored(
        try_create_policy(
            c,
            n,
            "window",
            base(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00"}]})),
        )
        .await
        .unwrap(),
    );
    assert_eq!(s["maintenanceWindows"][0]["timezone"], json!("UTC"), "{s}");
    let s = stored(
        try_create_policy(
            c,
            n,
            "custom",
            base(
                json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "60%"}}),
            ),
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        s["customPDBConfig"]["unhealthyPodEvictionPolicy"],
        json!("IfHealthyBudget"),
        "{s}"
    );

    // Scenario 37: rejected at admission (HTTP 422) with the note's wording.
    let cases = [
        (
            "custom-no-config",
            json!({"availabilityClass": "custom"}),
            "custom availability class requires customPDBConfig",
        ),
        (
            "custom-both",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": 1, "maxUnavailable": 1}}),
            "cannot specify both minAvailable and maxUnavailable",
        ),
        (
            "custom-neither",
            json!({"availabilityClass": "custom", "customPDBConfig": {}}),
            "must specify either minAvailable or maxUnavailable",
        ),
        (
            "ns-only",
            json!({"workloadSelector": {"namespaces": [n]}}),
            "must specify at least one selection criteria",
        ),
        (
            "prio-1001",
            json!({"priority": 1001}),
            "priority must be between 0 and 1000",
        ),
        (
            "prio-neg",
            json!({"priority": -1}),
            "priority must be between 0 and 1000",
        ),
        (
            "hour-25",
            json!({"maintenanceWindows": [{"start": "25:00", "end": "04:00"}]}),
            "must be in HH:MM format",
        ),
        (
            "day-7",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [7]}]}),
            "must be between 0 (Sunday) and 6 (Saturday)",
        ),
        (
            "day-dup",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [1, 1]}]}),
            "Duplicate value",
        ),
        (
            "min-above",
            json!({"enforcement": "flexible", "minimumClass": "mission-critical"}),
            "minimumClass cannot be higher than availabilityClass",
        ),
        (
            "strict-reason",
            json!({"enforcement": "strict", "overrideRequiresReason": true}),
            "only applicable for advisory enforcement mode",
        ),
        (
            "bare-3",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "3"}}),
            "should match '^(100|[1-9]?[0-9])%$'",
        ),
        (
            "over-100",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "120%"}}),
            "should match '^(100|[1-9]?[0-9])%$'",
        ),
        (
            "negative",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": -1}}),
            "must be an integer >= 0",
        ),
        (
            "bad-class",
            json!({"availabilityClass": "super-duper-critical"}),
            "must be one of: non-critical, standard, high-availability, mission-critical, custom",
        ),
        (
            "bad-mode",
            json!({"enforcement": "lenient"}),
            "must be one of: strict, flexible, advisory",
        ),
    ];
    let mut wrong = Vec::new();
    for (name, extra, message) in cases {
        match try_create_policy(c, n, name, base(extra)).await {
            Err((422, m)) if m.contains(message) => {}
            other => wrong.push(format!(
                "{name}: wanted 422 with {message:?}, got {other:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // The IANA-zone check needs data CEL lacks: stored, then refused by the operator's
    // validation (Validated=False/PolicyInvalid) so it takes no part in resolution.
    try_create_policy(c, n, "mars", base(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "Mars/Olympus"}]})))
        .await
        .expect("stored: the timezone is checked by the controller");
    let _op = start_operator(&cluster, n);
    let note = wait_event_of(
        c,
        n,
        "PDBPolicy",
        "mars",
        "PolicyInvalid",
        "invalid timezone",
    )
    .await;
    assert!(note.contains("Mars/Olympus"), "{note}");
}

// ---------------------------------------------------------------------------------------------
// Scenarios 9 and 35: garbage collection and the reference operator's leftovers.

#[tokio::test]
async fn deleted_workloads_lose_their_pdb_by_gc_and_legacy_finalizers_are_stripped() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-legacy").await;
    let n = ns.name();
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let standard = json!({"pdboperator.io/availability-class": "standard"});
    let legacy = json!(["pdboperator.io/pdb-cleanup"]);

    // Before the operator runs: a Deployment the reference operator left with its finalizer,
    // already deleted (so it hangs in Terminating) ...
    let mut old = deployment_spec("old", 2, json!({}), standard.clone(), true);
    old.metadata.finalizers = Some(vec!["pdboperator.io/pdb-cleanup".into()]);
    deployments
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    deployments
        .delete("old", &DeleteParams::default())
        .await
        .unwrap();
    // ... one still alive with the finalizer ...
    let mut kept = deployment_spec("kept", 2, json!({}), standard.clone(), true);
    kept.metadata.finalizers = Some(vec!["pdboperator.io/pdb-cleanup".into()]);
    deployments
        .create(&PostParams::default(), &kept)
        .await
        .unwrap();
    // ... and (scenario 35) an LWS-internal StatefulSet with a stale managed PDB and the finalizer.
    let mut sts = stateful_set(
        "vllm",
        "vllm",
        2,
        json!({"leaderworkerset.sigs.k8s.io/name": "vllm"}),
        standard.clone(),
    );
    sts["metadata"]["finalizers"] = legacy.clone();
    let sts: StatefulSet = serde_json::from_value(sts).unwrap();
    let sts = sets.create(&PostParams::default(), &sts).await.unwrap();
    let stale: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "vllm-pdb", "labels": {"pdboperator.io/managed-by": "pdb-operator"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm",
                                          "uid": sts.uid().unwrap(), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "vllm"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &stale).await.unwrap();

    let _op = start_operator(&cluster, n);
    // Scenario 9 (corrected): the finalizer goes and the deletion completes.
    wait_for("Terminating Deployment old gone", WAIT, || async {
        match deployments.get_opt("old").await {
            Ok(None) => Check::Done(()),
            Ok(Some(d)) => Check::NotYet(format!("finalizers {:?}", d.finalizers())),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    wait_for("legacy finalizer stripped from kept", WAIT, || async {
        let d = deployments.get("kept").await.unwrap();
        if d.finalizers().is_empty() {
            Check::Done(())
        } else {
            Check::NotYet(format!("{:?}", d.finalizers()))
        }
    })
    .await;
    let pdb = wait_min(&pdbs, "kept", json!("50%")).await;
    let kept_uid = deployments.get("kept").await.unwrap().uid().unwrap();
    assert_eq!(pdb.owner_references()[0].uid, kept_uid);
    // Deleting the managed Deployment: the garbage collector removes the PDB via its ownerReference.
    deployments
        .delete(
            "kept",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    wait_no_pdb(&pdbs, "kept-pdb").await;
    assert!(
        deployments.get_opt("kept").await.unwrap().is_none(),
        "deleted without any finalizer"
    );

    // Scenario 35.
    wait_no_pdb(&pdbs, "vllm-pdb").await;
    wait_for(
        "legacy finalizer stripped from StatefulSet vllm",
        WAIT,
        || async {
            let s = sets.get("vllm").await.unwrap();
            if s.finalizers().is_empty() {
                Check::Done(())
            } else {
                Check::NotYet(format!("{:?}", s.finalizers()))
            }
        },
    )
    .await;
    // No new PDB and no Unmanaged/Skipped noise: the LeaderWorkerSet path owns those pods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pdbs.get_opt("vllm-pdb").await.unwrap().is_none(),
        "no PDB for an LWS-internal StatefulSet"
    );
    assert!(
        events_of(c, n, "StatefulSet", "vllm", "PDBCreated")
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios 33 and 34 (policy-driven StatefulSet).

#[tokio::test]
async fn deployment_and_statefulset_sharing_a_name_get_one_pdb_and_statefulsets_follow_policies() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-samename").await;
    let n = ns.name();
    let _op = start_operator(&cluster, n);
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let standard = json!({"pdboperator.io/availability-class": "standard"});

    // Scenario 34: policy-driven StatefulSet of 4.
    create_policy(
        c,
        n,
        "databases",
        json!({"availabilityClass": "high-availability",
        "workloadSelector": {"matchLabels": {"kind": "db"}}}),
    )
    .await;
    let redis: StatefulSet = serde_json::from_value(stateful_set(
        "redis",
        "redis",
        4,
        json!({"kind": "db"}),
        json!({}),
    ))
    .unwrap();
    sets.create(&PostParams::default(), &redis).await.unwrap();

    // Scenario 33: the Deployment takes web-pdb first (different pods, same name).
    let mut web = deployment_spec("web", 2, json!({}), standard.clone(), true);
    web.spec.template.metadata.as_mut().unwrap().labels = Some(labels(&[("app", "web-d")]));
    web.spec.selector.match_labels = Some(labels(&[("app", "web-d")]));
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let first = wait_pdb(&pdbs, "web-pdb", "owned by the Deployment", |p| {
        p.owner_references()
            .first()
            .is_some_and(|o| o.kind == "Deployment")
    })
    .await;
    let web_sts: StatefulSet =
        serde_json::from_value(stateful_set("web", "web-s", 2, json!({}), standard.clone()))
            .unwrap();
    sets.create(&PostParams::default(), &web_sts).await.unwrap();
    let note = wait_event_of(c, n, "StatefulSet", "web", "PDBConflict", "web-pdb").await;
    assert!(
        events_of(c, n, "Deployment", "web", "PDBConflict")
            .await
            .is_empty(),
        "{note}"
    );

    let p = wait_min(&pdbs, "redis", json!("75%")).await;
    assert_eq!(p.owner_references()[0].kind, "StatefulSet");
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("databases")
    );
    let policies: Api<PDBPolicy> = Api::namespaced(c.clone(), n);
    let want = vec![format!("{n}/StatefulSet/redis")];
    wait_for("policy status lists the StatefulSet", WAIT, || async {
        let st = policies
            .get("databases")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if st.applied_to_workloads == want && st.pdbs_managed == vec![format!("{n}/redis-pdb")] {
            Check::Done(())
        } else {
            Check::NotYet(format!("{st:?}"))
        }
    })
    .await;

    // The StatefulSet never patched the Deployment's PDB.
    let now = pdbs.get("web-pdb").await.unwrap();
    assert_eq!(
        now.resource_version(),
        first.resource_version(),
        "web-pdb untouched"
    );
    assert_eq!(
        serde_json::to_value(&now.spec.as_ref().unwrap().selector).unwrap(),
        json!({"matchLabels": {"app": "web-d"}})
    );
    // Once the Deployment (and by GC its PDB) is gone, the StatefulSet's 30 s retry takes the name.
    deployments
        .delete(
            "web",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let p = wait_pdb(&pdbs, "web-pdb", "owned by the StatefulSet", |p| {
        p.owner_references()
            .first()
            .is_some_and(|o| o.kind == "StatefulSet")
    })
    .await;
    assert_eq!(
        serde_json::to_value(&p.spec.as_ref().unwrap().selector).unwrap(),
        json!({"matchLabels": {"app": "web-s"}})
    );
}

// ---------------------------------------------------------------------------------------------
// Scenario 40: an idle workload is relaxed and restored at the window bounds by the clock alone.

/// `HH:MM` of `t` in UTC.
fn hhmm(t: jiff::Timestamp) -> String {
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    format!("{:02}:{:02}", z.hour(), z.minute())
}

#[tokio::test]
async fn idle_workload_is_relaxed_and_restored_at_the_window_bounds_without_any_change() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-idle").await;
    let n = ns.name();
    let addr = free_addr();
    let _op = start_operator_with(&cluster, n, |o| o.health_addr = Some(addr));
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);

    // The operator reads the real clock (no injection), so the window is the next whole minute
    // (the one after if fewer than 20 s remain, so the PDB exists before it opens).
    let now = jiff::Timestamp::now();
    let secs = now.as_second();
    let mut start = secs - secs.rem_euclid(60) + 60;
    if start - secs < 20 {
        start += 60;
    }
    let start = jiff::Timestamp::from_second(start).unwrap();
    let end = start + jiff::SignedDuration::from_secs(60);
    create_policy(
        c,
        n,
        "nightly",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"app": "idle"}},
        "maintenanceWindows": [{"start": hhmm(start), "end": hhmm(end), "timezone": "UTC"}]}),
    )
    .await;
    create_paused(&deployments, "idle", 4, json!({"app": "idle"}), json!({})).await;
    let before = wait_min(&pdbs, "idle", json!("50%")).await;
    assert!(
        jiff::Timestamp::now() < start,
        "PDB written before the window opened"
    );
    assert_eq!(annotation(&before, "pdboperator.io/maintenance-mode"), None);
    let idle = deployments.get("idle").await.unwrap();

    let relaxed = wait_for(
        "PDB relaxed at the window start",
        Duration::from_secs(150),
        || async {
            match pdbs.get("idle-pdb").await {
                Ok(p) if min_available(&p) == Some(json!(0)) => {
                    Check::Done((p, jiff::Timestamp::now()))
                }
                Ok(p) => Check::NotYet(format!("{:?}", p.spec)),
                Err(e) => Check::NotYet(e.to_string()),
            }
        },
    )
    .await;
    let (p, seen) = relaxed;
    assert!(seen >= start, "not relaxed before {start}: seen at {seen}");
    assert!(
        seen < start + jiff::SignedDuration::from_secs(15),
        "relaxed at {seen}, window opened {start}"
    );
    assert_eq!(
        annotation(&p, "pdboperator.io/maintenance-mode"),
        Some("true")
    );
    assert_eq!(
        annotation(&p, "pdboperator.io/maintenance-start"),
        Some(start.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().as_str())
    );
    wait_deploy_event(c, n, "idle", "MaintenanceWindowActive", "").await;
    wait_metric(
        addr,
        "pdb_operator_maintenance_window_active",
        &[("namespace", n), ("deployment", "idle")],
        |v| v == 1.0,
    )
    .await;

    let restored = wait_for(
        "PDB restored at the window end",
        Duration::from_secs(150),
        || async {
            match pdbs.get("idle-pdb").await {
                Ok(p) if min_available(&p) == Some(json!("50%")) => {
                    Check::Done((p, jiff::Timestamp::now()))
                }
                Ok(p) => Check::NotYet(format!("{:?}", p.spec)),
                Err(e) => Check::NotYet(e.to_string()),
            }
        },
    )
    .await;
    let (p, seen) = restored;
    assert!(seen >= end, "not restored before {end}: seen at {seen}");
    assert!(
        seen < end + jiff::SignedDuration::from_secs(15),
        "restored at {seen}, window closed {end}"
    );
    assert_eq!(annotation(&p, "pdboperator.io/maintenance-mode"), None);
    assert_eq!(annotation(&p, "pdboperator.io/maintenance-start"), None);
    wait_deploy_event(c, n, "idle", "MaintenanceWindowEnded", "").await;
    // Nothing but the clock moved: the Deployment is the object it was.
    let after = deployments.get("idle").await.unwrap();
    assert_eq!(
        after.resource_version(),
        idle.resource_version(),
        "no change to the Deployment"
    );
}
