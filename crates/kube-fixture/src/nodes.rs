//! A simulated node of one test's own, with room for a chosen number of pods, so that pods
//! stay Pending for real once it is full. It carries a label and a taint named after it: only
//! pods that select and tolerate it land there, and no other test's pods take its room.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::{Check, TestCluster, client_from, wait_for};

/// The label (and taint) key of a test node; its value is the node's name.
pub const TEST_NODE_KEY: &str = "orb-rs.io/test-node";

pub struct TestNode {
    pub name: String,
    kubeconfig: PathBuf,
}

impl TestCluster {
    /// Adds a simulated node `<prefix>-<random>` with room for `pods` pods and waits until it
    /// is Ready. The node is deleted when the guard drops (its pods then go with it).
    pub async fn node_with_room(&self, prefix: &str, pods: u32) -> TestNode {
        let name = format!(
            "{}-{}",
            prefix.to_ascii_lowercase(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    TEST_NODE_KEY: name,
                },
            },
            "spec": {"taints": [{"key": TEST_NODE_KEY, "value": name, "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": pods.to_string()},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": pods.to_string()},
                "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "amd64", "operatingSystem": "linux"},
            },
        }))
        .expect("a valid Node");
        let api: Api<Node> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("creating test node {name}: {e}"));
        let guard = TestNode {
            name: name.clone(),
            kubeconfig: self.kubeconfig.clone(),
        };
        wait_for(
            &format!("test node {name} Ready"),
            Duration::from_secs(60),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let ready = api.get_opt(&name).await.ok().flatten().is_some_and(|n| {
                        n.status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    });
                    if ready {
                        Check::Done(())
                    } else {
                        Check::NotYet("not Ready yet".into())
                    }
                }
            },
        )
        .await;
        guard
    }
}

impl TestNode {
    /// The `nodeSelector` that sends pods to this node.
    pub fn node_selector(&self) -> Value {
        json!({ TEST_NODE_KEY: self.name })
    }

    /// The toleration of this node's taint.
    pub fn tolerations(&self) -> Value {
        json!([{"key": TEST_NODE_KEY, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}])
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if std::env::var("ORB_TEST_KEEP_NAMESPACES").is_ok() {
            eprintln!("keeping test node {} (ORB_TEST_KEEP_NAMESPACES)", self.name);
            return;
        }
        // As for namespaces: a runtime of its own, the request sent, not awaited to the end.
        let name = self.name.clone();
        let kubeconfig = self.kubeconfig.clone();
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(client) = client_from(&kubeconfig).await {
                    let api: Api<Node> = Api::all(client);
                    let _ = api.delete(&name, &DeleteParams::background()).await;
                }
            });
        });
        let _ = handle.join();
    }
}
