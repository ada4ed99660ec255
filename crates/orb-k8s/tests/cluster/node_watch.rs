//! The node and node-events watchers of `orb serve` on the real control plane. The test
//! makes its own KWOK-managed Node (unique name, a taint only its own pod tolerates, so no
//! other test's pod lands there) with cloud labels, runs a machine on it, then posts a
//! Karpenter disruption Event about that node: the machine must carry the node's facts, and
//! then name the disruption in its status and come back from `reclaims` (getReturnRequests).

use std::sync::Arc;

use crate::common::*;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fixture::{Check, client_from, default_kubeconfig_path, wait_for};
use orb_core::machine::MachineStatus;
use orb_core::provider::{Provider, ReclaimQuery};
use orb_k8s::ClusterViews;
use orb_k8s::daemon::NodeIndex;
use orb_k8s::daemon::nodes::{run_event_watch, run_node_watch};
use orb_k8s::metrics::ReasonLabels;
use serde_json::json;
use tokio::sync::watch;

const TAINT: &str = "orb.io/node-watch-test";

/// Deletes a cluster-scoped Node (and the Event in `default`) when the test ends, pass or fail.
struct Cleanup {
    node: String,
    event: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (node, event) = (self.node.clone(), self.event.take());
        // Drop cannot await and the test's runtime is blocked (or gone): use a runtime and a
        // client of our own (a client is driven by the runtime that built it).
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(client) = client_from(&default_kubeconfig_path()).await else {
                    return;
                };
                let dp = DeleteParams::background();
                if let Some(event) = event {
                    let events: Api<Event> = Api::namespaced(client.clone(), "default");
                    let _ = events.delete(&event, &dp).await;
                }
                let nodes: Api<Node> = Api::all(client);
                let _ = nodes.delete(&node, &dp).await;
            });
        })
        .join();
    }
}

fn fake_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "node.kubernetes.io/instance-type": "orbtest.2xlarge",
                "topology.kubernetes.io/zone": "orbtest-1a",
                "topology.kubernetes.io/region": "orbtest-1",
                "karpenter.sh/capacity-type": "spot",
            },
        },
        "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "amd64", "operatingSystem": "linux"},
        },
    }))
    .unwrap()
}

fn karpenter_event(name: &str, node: &str, node_uid: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid},
        "reason": "DisruptionTerminating",
        "message": "Disrupting Node: Underutilized/Delete",
        "type": "Normal",
        "source": {"component": "karpenter"},
        "firstTimestamp": jiff::Timestamp::now().to_string(),
        "lastTimestamp": jiff::Timestamp::now().to_string(),
        "count": 1,
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn machines_carry_node_facts_and_karpenter_disruptions() {
    let mut h = harness("node-watch", json!({})).await;
    let client = h.cluster.client.clone();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let node_name = format!("orb-nodewatch-{suffix}");
    let mut cleanup = Cleanup {
        node: node_name.clone(),
        event: None,
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let created = nodes
        .create(&PostParams::default(), &fake_node(&node_name))
        .await
        .expect("create the test node");
    let node_uid = created.metadata.uid.clone().unwrap_or_default();

    let index = Arc::new(NodeIndex::new(h.provider.metrics().clone()));
    h.provider = h.provider.with_cluster_views(ClusterViews {
        pods: None,
        nodes: Some(index.clone()),
    });
    let (stop, stop_rx) = watch::channel(false);
    let node_loop = tokio::spawn(run_node_watch(
        index.clone(),
        client.clone(),
        stop_rx.clone(),
    ));
    let event_loop = tokio::spawn(run_event_watch(index.clone(), client.clone(), stop_rx));

    // KWOK takes the node over and marks it Ready; the watcher sees the facts.
    let facts = wait_for("the test node Ready in the node index", WAIT, || async {
        match index.node(&node_name) {
            Some(f) if f.ready => Check::Done(f),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(facts.instance_type.as_deref(), Some("orbtest.2xlarge"));
    assert_eq!(facts.zone.as_deref(), Some("orbtest-1a"));
    assert_eq!(facts.region.as_deref(), Some("orbtest-1"));
    assert_eq!(facts.capacity_type.map(|c| c.as_str()), Some("spot"));
    assert_eq!(facts.cpu_millis, Some(8000));
    assert_eq!(facts.memory_bytes, Some(32 << 30));
    assert!(h.provider.metrics().nodes.get() >= 1);

    // A machine pinned to the test node.
    let mut t = template("on-test-node", None);
    t.node_selector = Some([("kubernetes.io/hostname".to_string(), node_name.clone())].into());
    t.tolerations = Some(vec![
        json!({"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}),
    ]);
    let (req, outcome) = acquire(&h, &t, 1).await;
    let input = status_input(&req, &t, 1, &outcome);
    let report = wait_verdict(&h, &input, "fulfilled").await;
    let machine = &report.machines[0];
    assert_eq!(machine.status, MachineStatus::Running);
    assert_eq!(machine.provider_data["node_name"], node_name.as_str());
    assert_eq!(machine.instance_type.as_deref(), Some("orbtest.2xlarge"));
    assert_eq!(machine.price_type.as_deref(), Some("spot"));
    let node = &machine.provider_data["node"];
    assert_eq!(node["zone"], "orbtest-1a");
    assert_eq!(node["region"], "orbtest-1");
    assert_eq!(node["capacity_type"], "spot");
    assert_eq!(node["cpu_millis"], 8000);
    assert_eq!(node["memory_bytes"], 32u64 << 30);
    assert_eq!(machine.status_reason, None, "no disruption yet");

    let query = ReclaimQuery {
        machines: vec![machine_ref(&req, &machine.machine_id, &outcome, "Pod")],
    };
    let before = h.provider.reclaims(query.clone()).await.expect("reclaims");
    assert_eq!(
        before,
        vec![],
        "nothing reclaims the machine before the event"
    );

    // Karpenter announces it will remove the node.
    let event_name = format!("{node_name}.disrupt-{suffix}");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    cleanup.event = Some(event_name.clone());
    events
        .create(
            &PostParams::default(),
            &karpenter_event(&event_name, &node_name, &node_uid),
        )
        .await
        .expect("create the disruption event");

    let said = format!("node {node_name} is being disrupted by Karpenter: Underutilized");
    wait_for("the disruption on the machine's status", WAIT, || async {
        match h.provider.status(input.clone()).await {
            Ok(r) if r.machines[0].status_reason.as_deref() == Some(said.as_str()) => {
                Check::Done(())
            }
            Ok(r) => Check::NotYet(format!("{:?}", r.machines[0].status_reason)),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    let notices = h.provider.reclaims(query).await.expect("reclaims");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].machine_id, machine.machine_id);
    assert_eq!(notices[0].reason, said);
    assert!(notices[0].grace_period_secs > 0, "{notices:?}");
    let counted = h
        .provider
        .metrics()
        .node_disruptions
        .get_or_create(&ReasonLabels {
            reason: "underutilized",
        })
        .get();
    assert!(
        counted >= 1,
        "orb_k8s_node_disruptions_total{{reason=\"underutilized\"}} = {counted}"
    );

    // Both loops stop on the shutdown signal.
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, async {
        node_loop.await.unwrap();
        event_loop.await.unwrap();
    })
    .await
    .expect("the watch loops stop on shutdown");

    // The node leaves the cluster (its pod goes with it when the namespace is dropped).
    drop(cleanup);
    wait_for("the test node deleted", WAIT, || async {
        match nodes.get_opt(&node_name).await {
            Ok(None) => Check::Done(()),
            other => Check::NotYet(format!("{:?}", other.map(|n| n.is_some()))),
        }
    })
    .await;
}
