//! `orb serve` with `node_watch_enabled` and `events_watch_enabled` against the real local
//! control plane: the daemon starts both watchers, a machine stored by the broker carries its
//! node's facts (REST model and `orb machines list` read them from there), and a Karpenter
//! disruption Event about the node makes getReturnRequests (the broker's reclaims) report the
//! machine with the reason. The test runs on a KWOK-managed Node of its own (unique name,
//! tainted so no other test's pod lands there), deleted at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::k8s_provider_entry;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fixture::identity::Managed;
use kube_fixture::{Check, TestCluster, client_from, default_kubeconfig_path, wait_for};
use orb_broker::{Broker, BrokerSettings, ProviderHandle};
use orb_cli::context::load_catalog_from;
use orb_cli::provider_factory::{ProviderContext, build_kubernetes_provider};
use orb_cli::serve::background::DaemonOptions;
use orb_cli::serve::daemon::{ClusterRuntime, Daemon};
use orb_cli::serve::model::MachineInfo;
use orb_cli::serve::{AppState, ServeOptions};
use orb_core::machine::MachineStatus;
use orb_store::Store;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const TAINT: &str = "orb.io/node-watch-serve-test";

/// Deletes the test's Node and Event (in `default`) when the test ends, pass or fail, with a
/// runtime and client of its own (the test's runtime is blocked or gone during drop).
struct Cleanup {
    node: String,
    event: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (node, event) = (self.node.clone(), self.event.clone());
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
                let events: Api<Event> = Api::namespaced(client.clone(), "default");
                let _ = events.delete(&event, &dp).await;
                let _ = Api::<Node>::all(client).delete(&node, &dp).await;
            });
        })
        .join();
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn serve_watchers_put_node_facts_on_stored_machines_and_disruptions_in_reclaims() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve-nodes").await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let node_name = format!("orb-serve-nodes-{suffix}");
    let event_name = format!("{node_name}.disrupt");
    let _cleanup = Cleanup {
        node: node_name.clone(),
        event: event_name.clone(),
    };
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": node_name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux",
                "type": "kwok",
                "beta.kubernetes.io/instance-type": "orbtest.large",
                "failure-domain.beta.kubernetes.io/zone": "orbtest-2b",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
            },
        },
        "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }))
    .unwrap();
    Api::<Node>::all(cluster.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("create the test node");

    let root = tempfile::tempdir().unwrap();
    let config_dir = root.path().join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    // orb as the shipped identity, with the rules of both watches.
    let managed = Managed::Namespaces(vec![ns.name().to_string()]);
    let features = ["node_watch_enabled", "events_watch_enabled"];
    let identity = cluster.broker_identity_for(&ns, managed, &features).await;
    let entry = k8s_provider_entry(
        &cluster,
        &ns,
        json!({"node_watch_enabled": true, "events_watch_enabled": true,
               "kubeconfig_path": identity.kubeconfig}),
    );
    let templates = json!({"templates": [{
        "templateId": "pinned", "maxNumber": 2, "imageId": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "nodeSelector": {"kubernetes.io/hostname": node_name},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }]});
    let template_file = config_dir.join("kube_templates.json");
    std::fs::write(&template_file, templates.to_string()).unwrap();
    let catalog = load_catalog_from(&template_file, &entry).unwrap();
    let context = ProviderContext {
        config_dir,
        work_dir: root.path().join("work"),
    };
    let runtime = Arc::new(
        ClusterRuntime::prepare(
            build_kubernetes_provider(&entry, &context, &BTreeMap::new()).unwrap(),
        )
        .await,
    );
    let provider = runtime.provider().clone();
    let store = Store::open_sqlite_file(&root.path().join("work/orb.db"))
        .await
        .unwrap();
    let broker = || Broker {
        store: store.clone(),
        provider: ProviderHandle::ready(provider.clone()),
        settings: BrokerSettings {
            provider_name: entry.name.clone(),
            provider_type: "k8s".into(),
            grace_secs: 300,
            max_machines_per_request: 5,
            default_max_machines: 5,
        },
        catalog: orb_broker::catalog::CatalogCell::new(catalog.clone()),
        clock: Arc::new(Timestamp::now),
        refreshed: Default::default(),
    };
    let state = AppState::with_kubernetes(broker(), ServeOptions::default(), runtime.clone());
    let daemon = Daemon::start(runtime.clone(), state, DaemonOptions::default())
        .await
        .expect("daemon starts");
    let index = runtime
        .views()
        .nodes
        .clone()
        .expect("the node watch is on, so orb serve builds a node index");
    wait_for("the test node Ready in the node index", WAIT, || async {
        match index.node(&node_name) {
            Some(f) if f.ready => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;

    let broker = broker();
    let view = broker.request_machines("pinned", 1).await.expect("request");
    let id = view.request.request_id.clone();
    let done = wait_for("the request complete", WAIT, || async {
        match broker.refresh(&id).await {
            Ok(Some(v)) if v.request.status.is_terminal() => Check::Done(v),
            Ok(Some(v)) => Check::NotYet(format!("{}", v.request.status)),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(done.machines.len(), 1, "{:?}", done.machines);
    let stored = &done.machines[0];
    assert_eq!(stored.status, MachineStatus::Running, "{stored:?}");
    assert_eq!(stored.instance_type.as_deref(), Some("orbtest.large"));
    assert_eq!(stored.price_type.as_deref(), Some("ondemand"));
    let info = MachineInfo::from(stored);
    let shown = info.node.expect("the REST model shows the node");
    assert_eq!(shown.name, node_name);
    assert_eq!(shown.zone.as_deref(), Some("orbtest-2b"));
    assert_eq!(shown.capacity_type.as_deref(), Some("ondemand"));
    assert_eq!(shown.cpu_millis, Some(4000));
    assert_eq!(shown.memory_bytes, Some(16 << 30));
    assert!(shown.ready);

    let (before, note) = broker.reclaims(&[]).await.expect("reclaims");
    assert_eq!(note, None);
    assert!(
        before.iter().all(|r| r.machine_id != stored.machine_id),
        "{before:?}"
    );

    // Karpenter v1 announces the node's removal.
    let now = Timestamp::now().to_string();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": event_name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        "reason": "DisruptionTerminating",
        "message": "Disrupting Node: Drifted",
        "type": "Normal",
        "source": {"component": "karpenter"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }))
    .unwrap();
    Api::<Event>::namespaced(cluster.client.clone(), "default")
        .create(&PostParams::default(), &event)
        .await
        .expect("create the disruption event");
    let said = format!("node {node_name} is being disrupted by Karpenter: Drift");
    let reclaimed = wait_for("the machine in getReturnRequests", WAIT, || async {
        match broker.reclaims(&[]).await {
            Ok((found, _)) => match found
                .into_iter()
                .find(|r| r.machine_id == stored.machine_id)
            {
                Some(r) => Check::Done(r),
                None => Check::NotYet("not reclaimed yet".into()),
            },
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    assert_eq!(reclaimed.reason, said);
    assert!(reclaimed.grace_period_secs > 0, "{reclaimed:?}");

    daemon.shutdown().await;
}
