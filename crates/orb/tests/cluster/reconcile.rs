//! Start-up reconciliation, orphan GC and the leader Lease of `orb serve` against the real
//! local control plane: managed objects of stored requests are adopted, managed objects of
//! no request are orphans of every kind, only managed objects are ever touched, and of two
//! daemons sharing a store exactly one leads and runs the GC. Needs the control plane
//! (`tools/control-plane/cp up`); the Lease test needs PostgreSQL (`ORB_TEST_POSTGRES_URL`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::support::postgres_url;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fixture::identity::{BrokerIdentity, Managed};
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use orb_broker::{Broker, BrokerSettings, ProviderHandle};
use orb_cli::context::load_catalog_from;
use orb_cli::provider_factory::{ProviderContext, build_kubernetes_provider};
use orb_cli::serve::background::{DaemonOptions, orphan_gc_pass, reconcile};
use orb_cli::serve::daemon::{ClusterRuntime, Daemon};
use orb_cli::serve::{AppState, ServeOptions};
use orb_core::config::ProviderEntry;
use orb_core::ids::RequestId;
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_k8s::K8sProvider;
use orb_k8s::metrics::OrphanLabels;
use orb_store::Store;
use serde_json::{Value, json};

const TEMPLATES: &str = r#"{"templates": [
  {"templateId": "worker", "maxNumber": 50, "imageId": "busybox:1.36"}
]}"#;

struct Setup {
    _root: tempfile::TempDir,
    _identity: BrokerIdentity,
    provider: Arc<K8sProvider>,
    runtime: Arc<ClusterRuntime>,
    broker: Broker,
}

/// A provider on `ns` with `extra` provider settings, and a broker on `store_url` (a fresh
/// SQLite file when `None`).
async fn setup(
    cluster: &TestCluster,
    ns: &TestNamespace,
    provider_name: &str,
    extra: Value,
    store_url: Option<&str>,
) -> Setup {
    // The shipped identity, with the Lease: these tests' daemons elect a leader.
    let identity = cluster
        .broker_identity_for(
            ns,
            Managed::Namespaces(vec![ns.name().to_string()]),
            &["leader_election"],
        )
        .await;
    let root = tempfile::tempdir().unwrap();
    let config_dir = root.path().join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let mut config = json!({
        "namespace": ns.name(),
        "in_cluster": false,
        "kubeconfig_path": identity.kubeconfig,
        "watch_enabled": false,
        "node_watch_enabled": false,
        "events_watch_enabled": false,
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    let entry = ProviderEntry {
        name: provider_name.into(),
        provider_type: "k8s".into(),
        enabled: true,
        default: true,
        config,
        template_defaults: Default::default(),
    };
    let template_file = config_dir.join("kube_templates.json");
    std::fs::write(&template_file, TEMPLATES).unwrap();
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
    let store = match store_url {
        Some(url) => Store::open(url).await.unwrap(),
        None => Store::open_sqlite_file(&root.path().join("work/orb.db"))
            .await
            .unwrap(),
    };
    let broker = Broker {
        store,
        provider: ProviderHandle::ready(provider.clone()),
        settings: BrokerSettings {
            provider_name: entry.name.clone(),
            provider_type: "k8s".into(),
            grace_secs: 300,
            max_machines_per_request: 50,
            default_max_machines: 50,
        },
        catalog: orb_broker::catalog::CatalogCell::new(catalog),
        clock: Arc::new(Timestamp::now),
        refreshed: Default::default(),
    };
    Setup {
        _root: root,
        _identity: identity,
        provider,
        runtime,
        broker,
    }
}

fn labels(request: Option<&str>, managed: bool) -> Value {
    let mut labels = serde_json::Map::new();
    if managed {
        labels.insert("orb.io/managed".into(), json!("true"));
    }
    if let Some(id) = request {
        labels.insert("orb.io/request-id".into(), json!(id));
    }
    Value::Object(labels)
}

fn pod_spec() -> Value {
    json!({"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]})
}

async fn create_pod(client: &Client, ns: &str, name: &str, labels: Value) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": pod_spec(),
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// A managed Deployment, StatefulSet and Job named `<prefix>-deploy|sts|job` labelled with
/// `request`. Their pods are not labelled managed, so only the controllers count.
async fn create_controllers(client: &Client, ns: &str, prefix: &str, request: &str) {
    let meta = |kind: &str| json!({"name": format!("{prefix}-{kind}"), "labels": labels(Some(request), true)});
    let template = |app: &str| json!({"metadata": {"labels": {"app": app}}, "spec": pod_spec()});
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": meta("deploy"),
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": format!("{prefix}-d")}},
                 "template": template(&format!("{prefix}-d"))},
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": meta("sts"),
        "spec": {"replicas": 1, "serviceName": format!("{prefix}-sts"),
                 "selector": {"matchLabels": {"app": format!("{prefix}-s")}},
                 "template": template(&format!("{prefix}-s"))},
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    let mut job_template = template(&format!("{prefix}-j"));
    job_template["spec"]["restartPolicy"] = json!("Never");
    job_template["metadata"]["annotations"] =
        json!({"pod-complete.stage.kwok.x-k8s.io/delay": "20m"});
    let job: Job = serde_json::from_value(json!({
        "metadata": meta("job"),
        "spec": {"template": job_template},
    }))
    .unwrap();
    Api::<Job>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

/// Stores an in-progress acquire that recorded `pods` in `ns`.
async fn store_acquire(store: &Store, ns: &str, pods: &[&str]) -> String {
    let mut request = Request::new(
        RequestId::new_acquire(),
        RequestType::Acquire,
        Some("worker".into()),
        "kubernetes",
        "k8s",
        pods.len() as u32,
        Timestamp::now(),
    );
    request.status = RequestStatus::InProgress;
    request.provider_api = Some(orb_core::ProviderApi::Pod);
    request.provider_data = json!({
        "request_id": request.request_id.to_string(),
        "namespace": ns,
        "provider_api": "Pod",
        "label_prefix": "orb.io",
        "requested_count": pods.len(),
        "pod_names": pods,
    })
    .into();
    store.insert_request(&mut request, &mut []).await.unwrap();
    request.request_id.to_string()
}

fn unknown_request() -> String {
    RequestId::new_acquire().to_string()
}

/// Names of the objects of each kind in `ns` (not being deleted).
async fn names_in(client: &Client, ns: &str) -> BTreeSet<String> {
    async fn of<K>(client: &Client, ns: &str) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        Api::<K>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
            .map(|o| o.name_any())
            .collect()
    }
    let mut all = BTreeSet::new();
    all.extend(of::<Pod>(client, ns).await);
    all.extend(of::<Deployment>(client, ns).await);
    all.extend(of::<StatefulSet>(client, ns).await);
    all.extend(of::<Job>(client, ns).await);
    all
}

fn orphan_count(provider: &K8sProvider, kind: &'static str, action: &'static str) -> u64 {
    provider
        .metrics()
        .orphans
        .get_or_create(&OrphanLabels { kind, action })
        .get()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn reconciliation_adopts_stored_requests_and_reports_every_kind_of_orphan() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("reconcile").await;
    let s = setup(&cluster, &ns, "kubernetes", json!({}), None).await;
    let client = &cluster.client;
    let mine = store_acquire(&s.broker.store, ns.name(), &["mine-0", "mine-1"]).await;
    create_pod(client, ns.name(), "mine-0", labels(Some(&mine), true)).await;
    create_pod(client, ns.name(), "mine-1", labels(Some(&mine), true)).await;
    create_pod(client, ns.name(), "no-request", labels(None, true)).await;
    let stranger = unknown_request();
    create_pod(client, ns.name(), "stranger", labels(Some(&stranger), true)).await;
    create_controllers(client, ns.name(), "lost", &stranger).await;
    // Carries a request id orb never issued but not the managed label: invisible.
    create_pod(
        client,
        ns.name(),
        "not-ours",
        labels(Some(&stranger), false),
    )
    .await;

    let report = reconcile(&s.provider, &s.broker, true).await;
    assert_eq!(report.error, None, "{}", report.summary());
    assert_eq!(report.namespaces, vec![ns.name().to_string()]);
    assert_eq!(report.adopted.get("pod"), Some(&2), "{}", report.summary());
    let orphans: BTreeMap<String, String> = report
        .orphans
        .iter()
        .map(|o| (o.name.clone(), o.why.to_string()))
        .collect();
    assert_eq!(
        orphans.keys().cloned().collect::<Vec<_>>(),
        [
            "lost-deploy",
            "lost-job",
            "lost-sts",
            "no-request",
            "stranger"
        ],
        "{}",
        report.summary()
    );
    assert!(orphans["no-request"].contains("no request-id label"));
    assert!(orphans["lost-job"].contains("not in orb's store"));
    for kind in ["deployment", "statefulset", "job"] {
        assert_eq!(report.objects_seen.get(kind), Some(&1), "{kind}");
    }
    assert_eq!(
        report.objects_seen.get("pod"),
        Some(&4),
        "managed pods only (the controllers' pods carry no managed label)"
    );
    assert_eq!(
        s.provider
            .metrics()
            .adopted
            .get_or_create(&orb_k8s::metrics::KindLabels { kind: "pod" })
            .get(),
        2
    );
    // Reconciliation only reports: everything is still there.
    let names = names_in(client, ns.name()).await;
    for name in [
        "no-request",
        "stranger",
        "lost-deploy",
        "lost-sts",
        "lost-job",
        "not-ours",
    ] {
        assert!(names.contains(name), "{name} was touched: {names:?}");
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn report_only_gc_counts_orphans_and_deletes_nothing() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("gc-report").await;
    let s = setup(
        &cluster,
        &ns,
        "kubernetes",
        json!({"orphan_gc_enabled": true, "auto_cleanup_orphans": false, "orphan_min_age_seconds": 0}),
        None,
    )
    .await;
    let client = &cluster.client;
    create_pod(client, ns.name(), "lonely", labels(None, true)).await;
    create_controllers(client, ns.name(), "gone", &unknown_request()).await;

    let outcome = orphan_gc_pass(&s.provider, &s.broker).await.unwrap();
    assert_eq!(outcome.reported.len(), 4, "{outcome:?}");
    assert!(outcome.deleted.is_empty());
    for kind in ["pod", "deployment", "statefulset", "job"] {
        assert_eq!(orphan_count(&s.provider, kind, "reported"), 1, "{kind}");
        assert_eq!(orphan_count(&s.provider, kind, "deleted"), 0, "{kind}");
    }
    let names = names_in(client, ns.name()).await;
    for name in ["lonely", "gone-deploy", "gone-sts", "gone-job"] {
        assert!(
            names.contains(name),
            "{name} was deleted in report-only mode"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn auto_cleanup_deletes_old_orphans_of_all_kinds_and_spares_young_adopted_and_unmanaged() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("gc-delete").await;
    let s = setup(
        &cluster,
        &ns,
        "kubernetes",
        json!({"orphan_gc_enabled": true, "auto_cleanup_orphans": true, "orphan_min_age_seconds": 3}),
        None,
    )
    .await;
    let client = &cluster.client;
    let mine = store_acquire(&s.broker.store, ns.name(), &["kept-0"]).await;
    create_pod(client, ns.name(), "kept-0", labels(Some(&mine), true)).await;
    create_pod(client, ns.name(), "old-lonely", labels(None, true)).await;
    create_controllers(client, ns.name(), "old", &unknown_request()).await;
    create_pod(client, ns.name(), "unmanaged", labels(None, false)).await;
    // creationTimestamp has one-second resolution: let the first objects age past 3 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    create_pod(client, ns.name(), "young-lonely", labels(None, true)).await;
    create_controllers(client, ns.name(), "young", &unknown_request()).await;

    let outcome = orphan_gc_pass(&s.provider, &s.broker).await.unwrap();
    let deleted: BTreeSet<String> = outcome.deleted.iter().map(|o| o.name.clone()).collect();
    assert_eq!(
        deleted,
        ["old-deploy", "old-job", "old-lonely", "old-sts"]
            .map(String::from)
            .into(),
        "{outcome:?}"
    );
    assert!(outcome.failed.is_empty(), "{outcome:?}");
    for kind in ["pod", "deployment", "statefulset", "job"] {
        assert_eq!(orphan_count(&s.provider, kind, "deleted"), 1, "{kind}");
    }
    let gone = ["old-lonely", "old-deploy", "old-sts", "old-job"];
    let names = wait_for(
        "the old orphans to be gone",
        Duration::from_secs(60),
        || async {
            let names = names_in(client, ns.name()).await;
            if gone.iter().any(|n| names.contains(*n)) {
                Check::NotYet(format!("{names:?}"))
            } else {
                Check::Done(names)
            }
        },
    )
    .await;
    for name in [
        "kept-0",
        "unmanaged",
        "young-lonely",
        "young-deploy",
        "young-sts",
        "young-job",
    ] {
        assert!(names.contains(name), "{name} was deleted: {names:?}");
    }
}

async fn daemon(s: &Setup) -> Daemon {
    let state = AppState::with_kubernetes(
        Broker {
            store: s.broker.store.clone(),
            provider: ProviderHandle::ready(s.provider.clone()),
            settings: s.broker.settings.clone(),
            catalog: orb_broker::catalog::CatalogCell::new((*s.broker.catalog.current()).clone()),
            clock: Arc::new(Timestamp::now),
            refreshed: Default::default(),
        },
        ServeOptions::default(),
        s.runtime.clone(),
    );
    Daemon::start(
        s.runtime.clone(),
        state,
        DaemonOptions {
            leader_elect: true,
            lease_duration: Duration::from_secs(6),
            lease_grace: Duration::from_secs(3),
            refresh_interval: Duration::from_secs(1),
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn of_two_replicas_one_leads_runs_the_gc_and_hands_over_when_it_stops() {
    let Some(url) = postgres_url() else { return };
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("lease").await;
    // The Lease is named after the provider: unique per run, in the test namespace.
    let provider_name = format!("lease-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let gc = json!({"orphan_gc_enabled": true, "orphan_gc_interval_seconds": 1,
                    "auto_cleanup_orphans": false, "orphan_min_age_seconds": 0});
    let a = setup(&cluster, &ns, &provider_name, gc.clone(), Some(&url)).await;
    let b = setup(&cluster, &ns, &provider_name, gc, Some(&url)).await;
    create_pod(&cluster.client, ns.name(), "orphan", labels(None, true)).await;

    let daemon_a = daemon(&a).await;
    let daemon_b = daemon(&b).await;
    let leader_of = |s: &Setup| s.runtime.is_leader();
    wait_for("one leader", Duration::from_secs(30), || async {
        match (leader_of(&a), leader_of(&b)) {
            (true, false) | (false, true) => Check::Done(()),
            other => Check::NotYet(format!("leaders (a, b) = {other:?}")),
        }
    })
    .await;
    let (leader, standby, leader_daemon, standby_daemon) = if leader_of(&a) {
        (&a, &b, daemon_a, daemon_b)
    } else {
        (&b, &a, daemon_b, daemon_a)
    };
    assert_eq!(leader.provider.metrics().leader.get(), 1);
    assert_eq!(standby.provider.metrics().leader.get(), 0);
    wait_for(
        "the leader's GC to report the orphan",
        Duration::from_secs(30),
        || async {
            match orphan_count(&leader.provider, "pod", "reported") {
                0 => Check::NotYet("not yet".into()),
                n => Check::Done(n),
            }
        },
    )
    .await;
    // Several GC intervals later the standby has still run none.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        leader_of(leader) && !leader_of(standby),
        "leadership flapped"
    );
    assert_eq!(orphan_count(&standby.provider, "pod", "reported"), 0);

    leader_daemon.shutdown().await;
    assert_eq!(leader.provider.metrics().leader.get(), 0);
    wait_for(
        "the standby to take over",
        Duration::from_secs(30),
        || async {
            if leader_of(standby) {
                Check::Done(())
            } else {
                Check::NotYet("still standby".into())
            }
        },
    )
    .await;
    wait_for(
        "the new leader's GC to run",
        Duration::from_secs(30),
        || async {
            match orphan_count(&standby.provider, "pod", "reported") {
                0 => Check::NotYet("not yet".into()),
                n => Check::Done(n),
            }
        },
    )
    .await;
    standby_daemon.shutdown().await;
}

/// `orphan_gc_enabled` (default false) really decides whether orb serve runs the GC: two
/// daemons configured alike except for it, each with an old orphan and auto cleanup on;
/// the enabled one deletes its orphan, the other never touches (or even counts) its own.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn orphan_gc_runs_only_when_orphan_gc_enabled() {
    let cluster = TestCluster::connect().await;
    let ns_on = cluster.namespace("gc-on").await;
    let ns_off = cluster.namespace("gc-off").await;
    let common = json!({"auto_cleanup_orphans": true, "orphan_gc_interval_seconds": 1,
                        "orphan_min_age_seconds": 0});
    let mut on_settings = common.clone();
    on_settings["orphan_gc_enabled"] = json!(true);
    let on = setup(&cluster, &ns_on, "gc-on", on_settings, None).await;
    let off = setup(&cluster, &ns_off, "gc-off", common, None).await;
    assert!(
        !off.provider.config().orphan_gc_enabled,
        "the default is off"
    );
    create_pod(&cluster.client, ns_on.name(), "orphan", labels(None, true)).await;
    create_pod(&cluster.client, ns_off.name(), "orphan", labels(None, true)).await;
    let daemon_off = daemon(&off).await;
    let daemon_on = daemon(&on).await;
    wait_for(
        "the enabled GC to delete its orphan",
        Duration::from_secs(60),
        || async {
            match orphan_count(&on.provider, "pod", "deleted") {
                0 => Check::NotYet("not yet".into()),
                n => Check::Done(n),
            }
        },
    )
    .await;
    // The disabled daemon has been running at least as long, with the same interval.
    assert!(
        off.runtime.is_leader(),
        "it leads, so only the setting kept the GC away"
    );
    assert_eq!(orphan_count(&off.provider, "pod", "deleted"), 0);
    assert_eq!(orphan_count(&off.provider, "pod", "reported"), 0);
    assert!(
        names_in(&cluster.client, ns_off.name())
            .await
            .contains("orphan"),
        "the orphan of the disabled GC is still there"
    );
    daemon_on.shutdown().await;
    daemon_off.shutdown().await;
}
