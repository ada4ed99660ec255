//! The real `pdb-operator` binary SIGKILLed while it is still writing budgets for Deployments
//! that keep arriving, the workloads changed while it is down, then started again: every budget
//! converges to exactly what it should be — one PDB per qualifying Deployment with the right
//! minAvailable, none for a Deployment scaled to one replica, none without a workload.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
use pdb_operator::crd::PDBPolicy;
use serde_json::{Value, json};

/// Deployments of the first wave: `web-NN` (matched by a strict policy of class standard) and
/// `ann-NN` (annotated non-critical), alternating; the first half while the operator runs.
const FIRST_WAVE: usize = 60;
/// Deployments added while no operator runs.
const SECOND_WAVE: usize = 6;

/// The `pdb-operator run` process, scoped to one namespace, without leader election (a
/// SIGKILLed holder would otherwise keep the Lease for its whole duration) and without HTTP.
struct OperatorProcess {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl OperatorProcess {
    fn start(cluster: &TestCluster, ns: &str) -> OperatorProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pdb-operator"))
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "info,kube=warn")
            .args([
                "run",
                "--leader-elect=false",
                "--watch-namespace",
                ns,
                "--health-probe-bind-address",
                "0",
                "--max-concurrent-reconciles",
                "2",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the pdb-operator binary");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        // Drains stderr so the operator never blocks on a full pipe; kept for failure messages.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        OperatorProcess { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn assert_running(&mut self) {
        if let Ok(Some(exit)) = self.child.try_wait() {
            panic!("pdb-operator exited early ({exit}):\n{}", self.log());
        }
    }

    fn kill9(&mut self) {
        let status = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -KILL failed");
        let exit = self.child.wait().unwrap();
        assert!(!exit.success(), "SIGKILL must end the operator: {exit:?}");
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A paused Deployment: the operator reads only the Deployment, so no ReplicaSet or pod is
/// needed, and pausing keeps 130 pods off the shared cluster.
fn deployment(name: &str, replicas: i32, labels: Value, annotations: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "paused": true,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
            }
        }
    }))
    .unwrap()
}

fn wave_deployment(i: usize) -> Deployment {
    if i.is_multiple_of(2) {
        deployment(&format!("web-{i:02}"), 2, json!({"tier": "web"}), json!({}))
    } else {
        deployment(
            &format!("ann-{i:02}"),
            2,
            json!({}),
            json!({"pdboperator.io/availability-class": "non-critical"}),
        )
    }
}

/// What a settled operator must have written: PDB name → (workload, minAvailable).
type Budgets = BTreeMap<String, (String, Value)>;

/// The managed PDBs of the namespace as [`Budgets`], after checking each is owned by exactly
/// one existing Deployment, and no two select the same pods.
async fn actual_budgets(
    pdbs: &Api<PodDisruptionBudget>,
    deployments: &Api<Deployment>,
) -> Result<Budgets, String> {
    let live: BTreeMap<String, String> = deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list deployments: {e}"))?
        .items
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .map(|d| (d.name_any(), d.uid().unwrap_or_default()))
        .collect();
    let list = pdbs
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list PDBs: {e}"))?;
    let mut out = Budgets::new();
    let mut selectors = BTreeMap::new();
    for p in list.items {
        let name = p.name_any();
        let owners = p.metadata.owner_references.clone().unwrap_or_default();
        let [owner] = owners.as_slice() else {
            return Err(format!("{name} has owners {owners:?}, want one Deployment"));
        };
        if owner.kind != "Deployment" || live.get(&owner.name) != Some(&owner.uid) {
            return Err(format!(
                "{name} is owned by {owner:?}, not a live Deployment"
            ));
        }
        let selector = serde_json::to_string(&p.spec.as_ref().and_then(|s| s.selector.clone()))
            .unwrap_or_default();
        if let Some(other) = selectors.insert(selector.clone(), name.clone()) {
            return Err(format!("{name} and {other} both select {selector}"));
        }
        let min = min_available(&p).unwrap_or(Value::Null);
        out.insert(name, (owner.name.clone(), min));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn operator_killed_mid_reconcile_converges_every_budget_after_restart() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-kill").await;
    let n = ns.name().to_string();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), &n);
    let policies: Api<PDBPolicy> = Api::namespaced(cluster.client.clone(), &n);
    let policy: PDBPolicy = serde_json::from_value(json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
        "metadata": {"name": "web"},
        "spec": {"availabilityClass": "standard", "enforcement": "strict",
                 "workloadSelector": {"matchLabels": {"tier": "web"}}}
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();

    let mut first = OperatorProcess::start(&cluster, &n);
    // The Deployments arrive one by one while the operator works through them. The second
    // half waits for the kill, so however slow the operator starts, it cannot have seen all.
    let (killed_tx, killed_rx) = tokio::sync::watch::channel(false);
    let creator = {
        let deployments = deployments.clone();
        let mut killed_rx = killed_rx;
        tokio::spawn(async move {
            for i in 0..FIRST_WAVE {
                if i == FIRST_WAVE / 2 {
                    killed_rx.wait_for(|k| *k).await.expect("kill signalled");
                }
                deployments
                    .create(&PostParams::default(), &wave_deployment(i))
                    .await
                    .unwrap_or_else(|e| panic!("create deployment {i}: {e}"));
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    // Polled tightly: the kill must land after the first budgets, well before the last.
    let deadline = Instant::now() + WAIT;
    loop {
        first.assert_running();
        let seen = pdbs.list(&ListParams::default()).await.unwrap().items.len();
        if seen >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no PDB within {WAIT:?}:\n{}",
            first.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill9();
    killed_tx.send(true).unwrap();
    creator.await.unwrap();
    let at_kill = actual_budgets(&pdbs, &deployments).await.unwrap();
    assert!(
        !at_kill.is_empty() && at_kill.len() < FIRST_WAVE,
        "the kill must land mid-reconcile: {} of {FIRST_WAVE} PDBs exist",
        at_kill.len()
    );
    eprintln!("{} of {FIRST_WAVE} PDBs existed at the kill", at_kill.len());

    // While no operator runs: one budgeted Deployment drops to one replica (its PDB must go),
    // one changes class (its PDB must change), one is deleted, and new ones arrive.
    let budgeted = |prefix: &str| {
        at_kill
            .values()
            .map(|(w, _)| w.clone())
            .filter(|w| w.starts_with(prefix))
            .collect::<Vec<_>>()
    };
    let (webs, anns) = (budgeted("web-"), budgeted("ann-"));
    // At least one kind has two budgets; a missing one is taken from the not-yet-budgeted.
    let scaled = webs
        .first()
        .cloned()
        .unwrap_or_else(|| "web-58".to_string());
    let reclassed = anns
        .first()
        .cloned()
        .unwrap_or_else(|| "ann-59".to_string());
    let deleted = webs
        .get(1)
        .or(anns.get(1))
        .cloned()
        .unwrap_or_else(|| "web-56".to_string());
    deployments
        .patch(
            &scaled,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    deployments
        .patch(
            &reclassed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations":
                {"pdboperator.io/availability-class": "mission-critical"}}})),
        )
        .await
        .unwrap();
    deployments
        .delete(&deleted, &DeleteParams::foreground())
        .await
        .unwrap();
    for i in FIRST_WAVE..FIRST_WAVE + SECOND_WAVE {
        deployments
            .create(&PostParams::default(), &wave_deployment(i))
            .await
            .unwrap();
    }

    // What must hold once the restarted operator settles.
    let mut want = Budgets::new();
    for i in 0..FIRST_WAVE + SECOND_WAVE {
        let d = wave_deployment(i);
        let name = d.name_any();
        if name == scaled || name == deleted {
            continue;
        }
        let min = if name == reclassed {
            // mission-critical 90% of 2 pods would block every drain: clamped to n − 1.
            json!(1)
        } else if name.starts_with("web-") {
            json!("50%")
        } else {
            json!("20%")
        };
        want.insert(format!("{name}-pdb"), (name, min));
    }

    let mut second = OperatorProcess::start(&cluster, &n);
    second.assert_running();
    let converged = wait_for("every budget converges after the restart", WAIT, || async {
        match actual_budgets(&pdbs, &deployments).await {
            Ok(got) if got == want => Check::Done(got),
            Ok(got) => {
                let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
                let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
                let wrong: Vec<_> = got
                    .iter()
                    .filter(|(k, v)| want.get(*k).is_some_and(|w| w != *v))
                    .collect();
                Check::NotYet(format!(
                    "missing {missing:?}, extra {extra:?}, wrong {wrong:?}"
                ))
            }
            Err(e) => Check::NotYet(e),
        }
    })
    .await;
    assert_eq!(converged.len(), FIRST_WAVE + SECOND_WAVE - 2);
    // Settled means settled: a further second changes nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    second.assert_running();
    assert_eq!(
        actual_budgets(&pdbs, &deployments).await.unwrap(),
        want,
        "budgets moved after convergence:\n{}",
        second.log()
    );
}
