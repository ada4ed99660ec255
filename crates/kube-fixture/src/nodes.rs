//! A simulated node of one test's own, with room for a chosen number of pods, so that pods
//! stay Pending for real once it is full. It carries a label and a taint named after it: only
//! pods that select and tolerate it land there, and no other test's pods take its room.
//!
//! A test node can also stop reporting and come back ([`TestNode::go_down`]). KWOK plays a
//! node's kubelet only while it holds the node's Lease (`kube-node-lease/<node>`): another
//! holder makes KWOK leave the node and its pods alone. So the fixture takes the Lease over,
//! and from then on is the kubelet, or the kubelet that went silent.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::misbehave::Kubelet;
use crate::{Check, TestCluster, client_from, wait_for};

/// The label (and taint) key of a test node; its value is the node's name.
pub const TEST_NODE_KEY: &str = "orb-rs.io/test-node";

pub struct TestNode {
    pub name: String,
    client: Client,
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
            client: self.client.clone(),
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

/// How a node stops reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeDown {
    /// Its kubelet posts `Ready=False` (`KubeletNotReady`) and goes on renewing its Lease.
    NotReady,
    /// Its kubelet goes silent: after its grace period (50 s) the node lifecycle controller
    /// sets the node's conditions `Unknown` and marks its pods not Ready.
    Unknown,
}

/// Who holds a down node's Lease instead of KWOK.
const HOLDER: &str = "kube-fixture";

/// A node that is down until [`NodeOutage::recover`] (or the end of the test).
pub struct NodeOutage {
    name: String,
    client: Client,
    heartbeat: Option<JoinHandle<()>>,
}

impl TestNode {
    /// Makes the node stop reporting as `how` says, and returns once the control plane has
    /// seen it: the node's `Ready` condition False or Unknown, the node lifecycle
    /// controller's `NoExecute` taint on it (`not-ready` or `unreachable`; its pods are
    /// evicted after their toleration, 300 s by default) and every pod on it not Ready.
    ///
    /// The controller marks the pods not Ready only when it times a node out itself
    /// (`Unknown`); for a kubelet that posts `NotReady` it does not, so then the fixture
    /// writes what the controller writes for `Unknown`: the pod's `Ready` condition False,
    /// no reason, its containers as they were.
    pub async fn go_down(&self, how: NodeDown) -> NodeOutage {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        // A fresh renewTime: the controller counts the grace period from the last renewal
        // it saw, and refuses to time out a node whose Lease changed without one.
        patch_lease(&leases, &self.name, 3600)
            .await
            .unwrap_or_else(|e| panic!("taking the Lease of node {}: {e}", self.name));
        let heartbeat = (how == NodeDown::NotReady).then(|| {
            let name = self.name.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    let _ = patch_lease(&leases, &name, 3600).await;
                }
            })
        });
        let outage = NodeOutage {
            name: self.name.clone(),
            client: self.client.clone(),
            heartbeat,
        };
        let (ready, taint) = match how {
            NodeDown::NotReady => {
                // Time for KWOK to see it lost the Lease, or it marks the node Ready again.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = json!(Timestamp::now());
                let status = json!({"status": {"conditions": [{
                    "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": "container runtime is down (kube-fixture)",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }]}});
                let nodes: Api<Node> = Api::all(self.client.clone());
                nodes
                    .patch_status(
                        &self.name,
                        &PatchParams::default(),
                        &Patch::Strategic(status),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("posting NotReady for node {}: {e}", self.name));
                ("False", "node.kubernetes.io/not-ready")
            }
            NodeDown::Unknown => ("Unknown", "node.kubernetes.io/unreachable"),
        };
        outage.wait_node(ready, Some(taint)).await;
        if how == NodeDown::NotReady {
            for pod in outage.pods().await {
                if condition(&pod, "Ready") == Some("True") {
                    Kubelet::of(&self.client, &pod.namespace().unwrap(), &pod.name_any())
                        .set_ready_condition(false)
                        .await;
                }
            }
        }
        outage
            .wait_pods(
                &format!("the pods of node {} not Ready", self.name),
                "False",
            )
            .await;
        outage
    }
}

impl NodeOutage {
    /// The kubelet reports again: KWOK gets the Lease back and marks the node Ready, the
    /// controller lifts its taint, and the kubelet sets the pods that were Ready before
    /// (containers ready) Ready again. Returns once all that is seen.
    pub async fn recover(self) {
        if let Some(h) = &self.heartbeat {
            h.abort();
        }
        // Expired in a second: KWOK takes it over within its renew interval (10 s).
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        patch_lease(&leases, &self.name, 1)
            .await
            .unwrap_or_else(|e| panic!("giving back the Lease of node {}: {e}", self.name));
        // Only once the controller sees the node Ready: it marks a pod that changes on a
        // node it still thinks down not Ready again.
        self.wait_node("True", None).await;
        for pod in self.pods().await {
            if condition(&pod, "Ready") == Some("False")
                && condition(&pod, "ContainersReady") == Some("True")
            {
                Kubelet::of(&self.client, &pod.namespace().unwrap(), &pod.name_any())
                    .set_ready_condition(true)
                    .await;
            }
        }
        self.wait_pods(
            &format!("the pods of node {} Ready again", self.name),
            "True",
        )
        .await;
    }

    /// Waits until the node's `Ready` condition is `ready` and it carries the `NoExecute`
    /// `taint` (`None`: neither node lifecycle taint).
    async fn wait_node(&self, ready: &str, taint: Option<&str>) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let what = format!(
            "node {} Ready={ready}, NoExecute taint {taint:?}",
            self.name
        );
        wait_for(&what, Duration::from_secs(120), || async {
            let node = nodes.get(&self.name).await.expect("read the test node");
            let status = node
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status);
            let taints: Vec<String> = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.effect == "NoExecute" && t.key.starts_with("node.kubernetes.io/"))
                .map(|t| t.key)
                .collect();
            if status.as_deref() == Some(ready) && taints.iter().map(String::as_str).eq(taint) {
                Check::Done(())
            } else {
                Check::NotYet(format!("Ready={status:?}, NoExecute taints {taints:?}"))
            }
        })
        .await;
    }

    /// Waits until every pod on the node has its `Ready` condition `ready`.
    async fn wait_pods(&self, what: &str, ready: &str) {
        wait_for(what, Duration::from_secs(60), || async {
            let pods = self.pods().await;
            let off: Vec<String> = pods
                .iter()
                .filter(|p| condition(p, "Ready") != Some(ready))
                .map(|p| p.name_any())
                .collect();
            if off.is_empty() {
                Check::Done(())
            } else {
                Check::NotYet(format!("not yet: {off:?}"))
            }
        })
        .await;
    }

    async fn pods(&self) -> Vec<Pod> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", self.name));
        pods.list(&on_node)
            .await
            .expect("list the node's pods")
            .items
    }
}

impl Drop for NodeOutage {
    fn drop(&mut self) {
        if let Some(h) = &self.heartbeat {
            h.abort();
        }
    }
}

/// The node's Lease held by [`HOLDER`] for `seconds` from now.
async fn patch_lease(leases: &Api<Lease>, node: &str, seconds: i32) -> kube::Result<Lease> {
    let spec = json!({"spec": {
        "holderIdentity": HOLDER,
        "leaseDurationSeconds": seconds,
        "renewTime": MicroTime(Timestamp::now()),
    }});
    leases
        .patch(node, &PatchParams::default(), &Patch::Merge(spec))
        .await
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
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
