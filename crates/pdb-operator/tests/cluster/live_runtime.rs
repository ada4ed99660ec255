//! The operator's runtime against the real control plane: leader election by Lease, `/healthz`,
//! `/readyz` (with the optional-API discovery details) and `/metrics` telling the truth.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use kube_fixture::{Check, TestCluster, wait_for};
use pdb_operator::runtime::LEASE_NAME;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Plain HTTP/1.1 GET; returns (status code, body).
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

async fn wait_get(addr: SocketAddr, path: &str, accept: impl Fn(u16, &str) -> bool) -> String {
    wait_for(&format!("GET {path} on {addr}"), WAIT, || async {
        match get(addr, path).await {
            Some((code, body)) if accept(code, &body) => Check::Done(body),
            Some((code, body)) => Check::NotYet(format!("{code}: {body}")),
            None => Check::NotYet("no answer".into()),
        }
    })
    .await
}

/// A Deployment of 2 replicas annotated with the `standard` availability class, no policy.
fn standard_deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name,
                     "annotations": {"pdboperator.io/availability-class": "standard"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn leader_serves_health_readiness_and_true_metrics_while_a_standby_waits() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-runtime").await;
    let n = ns.name().to_string();
    let leader_addr = free_addr();
    let _leader = start_operator_with(&cluster, &n, |o| {
        o.leader_elect = true;
        o.identity = "leader-a".into();
        o.health_addr = Some(leader_addr);
    });
    wait_get(leader_addr, "/readyz", |code, body| {
        code == 200 && body.contains("\"leader\":true")
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), &n);
    let lease = leases.get(LEASE_NAME).await.expect("Lease written");
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("leader-a")
    );

    // A second replica with another identity stays standby (ready, not leader).
    let standby_addr = free_addr();
    let _standby = start_operator_with(&cluster, &n, |o| {
        o.leader_elect = true;
        o.identity = "standby-b".into();
        o.health_addr = Some(standby_addr);
    });
    let standby = wait_get(standby_addr, "/readyz", |code, _| code == 200).await;
    assert!(standby.contains("\"leader\":false"), "{standby}");
    let (code, body) = get(standby_addr, "/healthz")
        .await
        .expect("healthz answers");
    assert_eq!((code, body.as_str()), (200, "ok"));

    // Discovery details: this control plane serves the Workload API.
    let ready = wait_get(leader_addr, "/readyz", |_, body| {
        body.contains("workload-pdb")
    })
    .await;
    let details: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(
        details["optionalApis"]["workloadApi"]["served"],
        json!(true),
        "{ready}"
    );

    // Metrics: a policy-free annotated Deployment counts as managed once its PDB exists.
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    deployments
        .create(&PostParams::default(), &standard_deployment("m"))
        .await
        .unwrap();
    let managed = format!(
        "pdb_operator_deployments_managed{{namespace=\"{n}\",availability_class=\"standard\"}} 1"
    );
    let created = format!(
        "pdb_operator_pdbs_created_total{{namespace=\"{n}\",availability_class=\"standard\",workload_function=\"core\"}} 1"
    );
    let text = wait_get(leader_addr, "/metrics", |_, body| body.contains(&managed)).await;
    assert!(text.contains(&created), "{text}");
    assert!(text.contains("pdb_operator_info{"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // The standby reconciled nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, standby_metrics) = get(standby_addr, "/metrics")
        .await
        .expect("standby metrics");
    assert!(
        !standby_metrics.contains("pdb_operator_pdbs_created_total{"),
        "{standby_metrics}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_deleted_deployment_leaves_the_managed_gauge_at_the_next_sweep() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-sweep").await;
    let n = ns.name().to_string();
    let (_op, addr) = start_operator_with_metrics(&cluster, &n);
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    for name in ["kept", "gone"] {
        deployments
            .create(&PostParams::default(), &standard_deployment(name))
            .await
            .unwrap();
    }
    let series = format!(
        "pdb_operator_deployments_managed{{namespace=\"{n}\",availability_class=\"standard\"}}"
    );
    wait_get(addr, "/metrics", |_, body| {
        body.contains(&format!("{series} 2"))
    })
    .await;

    deployments
        .delete("gone", &Default::default())
        .await
        .unwrap();
    // The sweep runs every SWEEP_INTERVAL (30 s) and reads the controllers' stores: no LIST.
    let text = wait_get(addr, "/metrics", |_, body| {
        body.contains(&format!("{series} 1"))
    })
    .await;
    assert!(!text.contains(&format!("{series} 2")), "{text}");
}
