//! One burst of the bench: create N Deployments (`in_flight` creates at a time, or at a steady
//! rate) in a namespace and time, per Deployment, from its create call's return to this
//! process receiving the watch event of its `<name>-pdb`, whoever writes it (the operator or
//! the bare loop). One clock, this process's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// How long a burst may take until its last PDB.
pub const WAIT_ALL: Duration = Duration::from_secs(600);

/// The bench's Deployment: 2 replicas, label `bench=yes` (what the PDBPolicy selects).
pub fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": "yes"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "bench": "yes"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .unwrap()
}

/// When each `<deployment>-pdb` was first seen on the watch.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches the namespace's PDBs; returns once the watch's initial list is done.
async fn watch_pdbs(client: &Client, namespace: &str, seen: Seen) -> tokio::task::JoinHandle<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let stream = watcher(api, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let mut s = seen.lock().unwrap();
                    s.entry(p.name_any()).or_insert(now);
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("bench: PDB watch error (retrying): {e}"),
            }
        }
    });
    ready_rx
        .await
        .expect("PDB watch ended before its first list");
    task
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What one burst measured.
pub struct Burst {
    /// Create → PDB seen, milliseconds, sorted.
    pub latencies_ms: Vec<f64>,
    /// From the first create call to the last create's return.
    pub create_seconds: f64,
    /// From the first create call to the last PDB seen.
    pub all_pdbs_seconds: f64,
}

impl Burst {
    pub fn p50(&self) -> f64 {
        percentile(&self.latencies_ms, 0.5)
    }
    pub fn p99(&self) -> f64 {
        percentile(&self.latencies_ms, 0.99)
    }
    pub fn max(&self) -> f64 {
        *self.latencies_ms.last().unwrap()
    }
}

/// Writes a second below which the cluster counts as quiet: on an idle control plane only
/// leases are renewed (a few a second).
const QUIET_WRITES_PER_SECOND: f64 = 15.0;
/// How long [`settle`] waits for a quiet cluster at most.
const SETTLE_AT_MOST: Duration = Duration::from_secs(180);

/// Write requests (POST, PUT, PATCH, DELETE, APPLY) the apiserver has served so far, from its
/// `apiserver_request_total`.
async fn apiserver_writes(client: &Client) -> Option<f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(req).await.ok()?;
    let writes = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];
    let total = text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| writes.iter().any(|v| l.contains(&format!("verb=\"{v}\""))))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    Some(total)
}

/// Waits until the apiserver serves fewer than [`QUIET_WRITES_PER_SECOND`] writes a second for
/// three seconds in a row. After a burst the controller-manager goes on creating ReplicaSets
/// and pods for tens of seconds (and deleting them after a namespace delete); a burst started
/// meanwhile shares the apiserver with that backlog, so whoever runs second in a round would
/// be measured on a busier cluster. Returns the seconds waited.
pub async fn settle(client: &Client) -> f64 {
    let t0 = Instant::now();
    let Some(mut last) = apiserver_writes(client).await else {
        eprintln!("bench: cannot read the apiserver's /metrics; not waiting for a quiet cluster");
        return 0.0;
    };
    let mut quiet_seconds = 0;
    while quiet_seconds < 3 && t0.elapsed() < SETTLE_AT_MOST {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(now) = apiserver_writes(client).await else {
            break;
        };
        quiet_seconds = if now - last < QUIET_WRITES_PER_SECOND {
            quiet_seconds + 1
        } else {
            0
        };
        last = now;
    }
    if quiet_seconds < 3 {
        eprintln!(
            "bench: the cluster was not quiet after {} s; measuring anyway",
            SETTLE_AT_MOST.as_secs()
        );
    }
    t0.elapsed().as_secs_f64()
}

/// Waits for a quiet cluster ([`settle`]), creates `count` Deployments `bench-NNNN` in
/// `namespace`, `in_flight` at a time (`rate` > 0: that many a second), and waits until each
/// has its PDB. `whose` names the PDB writer for
/// the timeout message.
pub async fn burst(
    client: &Client,
    namespace: &str,
    count: usize,
    in_flight: usize,
    rate: f64,
    whose: &str,
) -> Burst {
    let settled = settle(client).await;
    eprintln!("bench: cluster quiet after {settled:.0} s; burst for {whose} in {namespace}");
    let seen: Seen = Arc::default();
    let watch = watch_pdbs(client, namespace, seen.clone()).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let names: Vec<String> = (0..count).map(|i| format!("bench-{i:04}")).collect();
    let t_create = Instant::now();
    let created: Vec<(String, Instant)> =
        futures::stream::iter(names.clone().into_iter().enumerate())
            .map(|(i, name)| {
                let api = api.clone();
                async move {
                    if rate > 0.0 {
                        let start = t_create + Duration::from_secs_f64(i as f64 / rate);
                        tokio::time::sleep_until(start.into()).await;
                    }
                    api.create(&PostParams::default(), &deployment(&name))
                        .await
                        .map(|_| (name, Instant::now()))
                }
            })
            .buffer_unordered(in_flight)
            .try_collect()
            .await
            .expect("creating a Deployment");
    let create_seconds = t_create.elapsed().as_secs_f64();
    let t_wait = Instant::now();
    loop {
        let have = {
            let s = seen.lock().unwrap();
            names
                .iter()
                .filter(|n| s.contains_key(&format!("{n}-pdb")))
                .count()
        };
        if have == count {
            break;
        }
        assert!(
            t_wait.elapsed() < WAIT_ALL,
            "{have} of {count} PDBs after {} s; see {whose}",
            WAIT_ALL.as_secs(),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_pdbs_seconds = t_create.elapsed().as_secs_f64();
    watch.abort();
    let mut latencies_ms: Vec<f64> = {
        let s = seen.lock().unwrap();
        created
            .iter()
            .map(|(n, t)| {
                let at = s[&format!("{n}-pdb")];
                at.saturating_duration_since(*t).as_secs_f64() * 1000.0
            })
            .collect()
    };
    latencies_ms.sort_by(f64::total_cmp);
    Burst {
        latencies_ms,
        create_seconds,
        all_pdbs_seconds,
    }
}

/// Creates namespace `name`.
pub async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// Deletes namespace `name` and waits until it is gone (its 2,000 pods deleted), so the next
/// burst starts on the same cluster as the first.
pub async fn delete_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::background()).await;
    let t0 = Instant::now();
    while api.get_opt(name).await.ok().flatten().is_some() {
        assert!(
            t0.elapsed() < WAIT_ALL,
            "namespace {name} still there after {} s",
            WAIT_ALL.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
