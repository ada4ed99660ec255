//! The drain soak (issue #52): two replicas of the real `pdb-operator` binary, leader election
//! on, running as the shipped ServiceAccount, over Deployments, StatefulSets,
//! LeaderWorkerSet-shaped groups and Workload API gangs in all and single mode, while a seeded
//! loop changes them (workloads come and go and scale, gangs add and remove PodGroups and lower
//! minCount, user PDBs appear over managed pods and go, the leader is SIGKILLed once and
//! SIGTERMed once) and nodes are drained one after another through the Eviction API, as
//! `kubectl drain` does (retrying 429).
//!
//! Invariants: no pod selected by two PDBs for longer than [`YIELD`] (the operator needs a moment
//! to yield to a PDB that appears over its pods); no eviction answered 500 outside that moment;
//! an all-mode gang never loses a pod while another of its groups is short; a single-mode group
//! never goes below minCount through evictions; a drain that cannot finish within 150 s has a
//! Warning naming the pod or its workload; at the end every operator PDB has a live owner.
//! Sampled every second ([`invariants`]) and at each allowed eviction ([`drains`]).
//!
//! `ORB_OPSOAK_SECONDS` (default 90) and `ORB_OPSOAK_SEED` (a number or `random`; default 52)
//! choose the run; bench/operator-soak.sh runs it long. A violation fails the test with the seed
//! and the event log to replay it. Run it alone: it installs the LeaderWorkerSet CRD if it is
//! missing, which `live_lws` deletes and reinstalls.
//!
//! Two findings of its first runs are fixed and fail it again if they come back (#52): a
//! PodGroup added to a single-mode gang whose Ready pods, counted healthy while it formed, let a
//! drain take another group below minCount (seed 52 at 19 s: 5 allowed instead of 0; the
//! forming group's live pods are now held in `minAvailable`), and a LeaderWorkerSet's PDB that
//! did not yield to a user's PDB over its pods (two PDBs for 22 s, evictions answered 500; fixed
//! in bfe5e04).
//!
//! Known limits met by the soak, counted and printed instead of failing it: an eviction
//! answered 500 or two PDBs over a pod within [`YIELD`] of a user PDB appearing (the operator
//! cannot yield before it sees the new PDB), and an all-mode gang losing a pod of a second
//! group within 3 s of the first (a PDB counts pods, not groups: docs/pdb-operator/workload-gangs.md).

mod churn;
mod drains;
mod invariants;
mod operators;
mod world;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fixture::TestCluster;
pub(crate) use kube_fixture::soak::{Rng, env_number};
use pdb_operator::crd::PDBPolicy;
use serde_json::json;

use crate::common::{install_crd, install_policy_crds, operator_identity, wait_pdb};
use operators::Operators;
use world::{Shape, UNIT, World};

/// The label of the soak's own nodes (value: its namespace), which every pod selects.
pub(crate) const POOL_LABEL: &str = "pdboperator.test/soak-pool";
/// How long the operator may take to yield when a second PDB appears over its pods.
pub(crate) const YIELD: Duration = Duration::from_secs(10);
/// A gang group this young is still forming (the operator leaves it out of the budget).
pub(crate) const FORMING: Duration = Duration::from_secs(15);

/// Seconds into the run, and the RSS in KiB of each replica.
pub(crate) type RssSample = (u64, Vec<(String, u64)>);

/// What the churn loop, the drains and the sampler share.
pub(crate) struct Soak {
    pub seed: u64,
    pub start: Instant,
    pub ns: String,
    pub admin: Client,
    pub world: tokio::sync::Mutex<World>,
    pub operators: Mutex<Operators>,
    /// Churn and drains stop.
    stop: AtomicBool,
    /// The group controllers stop too.
    done: AtomicBool,
    /// Until when no replica may be leading (a leader was just ended).
    gap_until: Mutex<Instant>,
    /// Unit → when a user PDB over its pods appeared.
    user_pdbs: Mutex<BTreeMap<String, Instant>>,
    /// Group → when the soak last took pods from it (an eviction, a unit restart).
    disturbed: Mutex<BTreeMap<String, Instant>>,
    log: Mutex<Vec<String>>,
    applied: Mutex<BTreeMap<&'static str, u32>>,
    violations: Mutex<Vec<String>>,
    checks: AtomicU64,
    races: AtomicU64,
    /// Pods seen under two PDBs, and the longest time one stayed so (sampled every second).
    pub overlaps: AtomicU64,
    pub longest_overlap_ms: AtomicU64,
    yield_500: AtomicU64,
    pub answers: Mutex<BTreeMap<u16, u64>>,
    pub drains: Mutex<BTreeMap<&'static str, u32>>,
    pub rss: Mutex<Vec<RssSample>>,
}

impl Soak {
    pub fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn event(&self, kind: &'static str, what: String) {
        *self.applied.lock().unwrap().entry(kind).or_default() += 1;
        let line = format!("{:7.1}s {kind}: {what}", self.secs());
        self.log.lock().unwrap().push(line);
    }

    pub fn note(&self, what: String) {
        let line = format!("{:7.1}s   {what}", self.secs());
        self.log.lock().unwrap().push(line);
    }

    /// Records a violation once per `key` (the invariant and its subject).
    pub fn violate(&self, key: &str, what: String) {
        let mut v = self.violations.lock().unwrap();
        if !v.iter().any(|line| line.contains(&format!("[{key}]"))) {
            let line = format!("{:7.1}s [{key}] {what}", self.secs());
            eprintln!("opsoak: VIOLATION {line}");
            self.log.lock().unwrap().push(format!("VIOLATION {line}"));
            v.push(line);
        }
    }

    pub fn checked(&self) {
        self.checks.fetch_add(1, Ordering::Relaxed);
    }

    pub fn noted_race(&self, what: String) {
        self.races.fetch_add(1, Ordering::Relaxed);
        self.note(format!("documented race: {what}"));
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub fn finished(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    pub fn operator_gap(&self) -> bool {
        Instant::now() < *self.gap_until.lock().unwrap()
    }

    fn gap_for(&self, d: Duration) {
        *self.gap_until.lock().unwrap() = Instant::now() + d;
    }

    pub fn mark_disturbed(&self, group: &str) {
        self.disturbed
            .lock()
            .unwrap()
            .insert(group.to_string(), Instant::now());
    }

    pub fn disturbed_within(&self, group: &str, d: Duration) -> bool {
        self.disturbed
            .lock()
            .unwrap()
            .get(group)
            .is_some_and(|t| t.elapsed() < d)
    }

    /// An eviction of `pod` answered 500 (more than one PDB over it): expected only while the
    /// operator yields to a user PDB that just appeared, or has no leader.
    pub fn answered_500(&self, pod: &Pod) {
        let unit = pod.labels().get(UNIT).cloned().unwrap_or_default();
        let fresh = self
            .user_pdbs
            .lock()
            .unwrap()
            .get(&unit)
            .is_some_and(|t| t.elapsed() < YIELD);
        self.checked();
        if fresh || self.operator_gap() {
            self.yield_500.fetch_add(1, Ordering::Relaxed);
            self.note(format!(
                "{} answered 500 while the operator yields",
                pod.name_any()
            ));
        } else {
            self.violate(
                &format!("500:{unit}"),
                format!(
                    "eviction of {} answered 500 (two PDBs over it)",
                    pod.name_any()
                ),
            );
        }
    }
}

/// The LeaderWorkerSet API only (no LWS controller runs here; the soak makes the pods).
async fn install_lws_crd(client: &Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
        "spec": {"group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
            "names": {"plural": "leaderworkersets", "singular": "leaderworkerset",
                      "kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .unwrap();
    install_crd(client, &crd).await;
}

/// The soak's two policies: `standard` (default enforcement) and `mission-critical` (strict),
/// selecting workloads by their `soak-class` label.
async fn create_policies(client: &Client, ns: &str) {
    let api: Api<PDBPolicy> = Api::namespaced(client.clone(), ns);
    for (name, class, extra) in [
        ("soak-standard", "standard", json!({})),
        (
            "soak-critical",
            "mission-critical",
            json!({"enforcement": "strict"}),
        ),
    ] {
        let mut spec = json!({"availabilityClass": class,
            "workloadSelector": {"matchLabels": {"soak-class": name.trim_start_matches("soak-")}}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let p: PDBPolicy = serde_json::from_value(json!({
            "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }
}

fn report(soak: &Soak, seconds: u64) {
    let seed = soak.seed;
    eprintln!(
        "opsoak: seed {seed}, {seconds} s (replay: ORB_OPSOAK_SEED={seed} ORB_OPSOAK_SECONDS={seconds})"
    );
    let applied = soak.applied.lock().unwrap();
    let applied: Vec<String> = applied.iter().map(|(k, n)| format!("{k} {n}")).collect();
    eprintln!("opsoak: changes applied: {}", applied.join(", "));
    let drains = soak.drains.lock().unwrap();
    let total: u32 = drains.values().sum();
    let outcomes: Vec<String> = drains.iter().map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!("opsoak: drains: {total} ({})", outcomes.join(", "));
    let answers = soak.answers.lock().unwrap();
    let n = |c: u16| answers.get(&c).copied().unwrap_or(0);
    let other: Vec<String> = answers
        .iter()
        .filter(|(c, _)| ![200, 429, 500].contains(*c))
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    eprintln!(
        "opsoak: evictions: 200 {}, 429 {}, 500 {} ({} while the operator yielded to a new PDB); other answers: {} (404: the pod was already gone)",
        n(200),
        n(429),
        n(500),
        soak.yield_500.load(Ordering::Relaxed),
        other.join(", ")
    );
    eprintln!(
        "opsoak: invariant checks: {}; documented all-mode races: {}",
        soak.checks.load(Ordering::Relaxed),
        soak.races.load(Ordering::Relaxed)
    );
    eprintln!(
        "opsoak: pods seen under two PDBs: {} (the longest for {:.0} s, sampled every second)",
        soak.overlaps.load(Ordering::Relaxed),
        soak.longest_overlap_ms.load(Ordering::Relaxed) as f64 / 1000.0
    );
    let rss = soak.rss.lock().unwrap();
    let step = rss.len().div_ceil(30).max(1);
    let points: Vec<String> = rss
        .iter()
        .step_by(step)
        .map(|(t, r)| {
            let mib: Vec<String> = r
                .iter()
                .map(|(_, k)| format!("{:.1}", *k as f64 / 1024.0))
                .collect();
            format!("{t}s {}", mib.join("/"))
        })
        .collect();
    let max = rss
        .iter()
        .flat_map(|(_, r)| r.iter().map(|(_, k)| *k))
        .max()
        .unwrap_or(0);
    eprintln!(
        "opsoak: operator RSS MiB (both replicas, every {} s): {}; max {:.1}",
        step * 10,
        points.join(", "),
        max as f64 / 1024.0
    );
    eprintln!(
        "opsoak: violations: {}",
        soak.violations.lock().unwrap().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the local control plane; bench/operator-soak.sh or ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored --exact soak::drain_soak)"]
async fn drain_soak() {
    let seconds = env_number("ORB_OPSOAK_SECONDS", 90);
    let seed = env_number("ORB_OPSOAK_SEED", 52);
    eprintln!(
        "opsoak: seed {seed}, {seconds} s (replay: ORB_OPSOAK_SEED={seed} ORB_OPSOAK_SECONDS={seconds})"
    );
    let setup = Instant::now();
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    install_lws_crd(&cluster.client).await;
    let ns = cluster.namespace("opsoak").await;
    let n = ns.name().to_string();
    let pool = [
        cluster.node_with_room("opsoak", 60).await,
        cluster.node_with_room("opsoak", 60).await,
        cluster.node_with_room("opsoak", 60).await,
    ];
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    for node in &pool {
        let label = json!({"metadata": {"labels": {POOL_LABEL: n}}});
        nodes
            .patch(&node.name, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .unwrap();
    }
    create_policies(&cluster.client, &n).await;
    let kubeconfig = operator_identity(&cluster, &n).await;
    let soak = Arc::new(Soak {
        seed,
        start: Instant::now(),
        ns: n.clone(),
        admin: cluster.client.clone(),
        world: tokio::sync::Mutex::default(),
        operators: Mutex::new(Operators::start(kubeconfig, &n)),
        stop: AtomicBool::new(false),
        done: AtomicBool::new(false),
        gap_until: Mutex::new(Instant::now()),
        user_pdbs: Mutex::default(),
        disturbed: Mutex::default(),
        log: Mutex::default(),
        applied: Mutex::default(),
        violations: Mutex::default(),
        checks: AtomicU64::new(0),
        races: AtomicU64::new(0),
        overlaps: AtomicU64::new(0),
        longest_overlap_ms: AtomicU64::new(0),
        yield_500: AtomicU64::new(0),
        answers: Mutex::default(),
        drains: Mutex::default(),
        rss: Mutex::default(),
    });
    let mut rng = Rng(seed);
    let mut first = Vec::new();
    {
        let mut world = soak.world.lock().await;
        for shape in [
            Shape::Deployment,
            Shape::StatefulSet,
            Shape::Lws,
            Shape::Gang { all: true },
            Shape::Gang { all: false },
        ] {
            let name = world.create(&soak, shape, &mut rng).await;
            soak.event("workload-created", format!("{shape:?} {name}"));
            first.push(name);
        }
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), &n);
    for unit in &first {
        wait_pdb(&pdbs, &format!("{unit}-pdb"), "written", |_| true).await;
    }
    soak.note(format!("set up in {:.1}s", setup.elapsed().as_secs_f64()));
    let keeper = tokio::spawn(world::keep_groups(soak.clone()));
    let sampler = tokio::spawn(invariants::sample_every_second(soak.clone()));
    let names: Vec<String> = pool.iter().map(|p| p.name.clone()).collect();
    let drainer = tokio::spawn(drains::drain_repeatedly(soak.clone(), names, rng.child()));
    let run = Duration::from_secs(seconds);
    churn::churn(&soak, rng.child(), soak.start + run, run).await;
    soak.stop.store(true, Ordering::SeqCst);
    let _ = drainer.await;
    soak.note("churn and drains stopped".into());
    invariants::final_owners(&soak, Duration::from_secs(60)).await;
    soak.done.store(true, Ordering::SeqCst);
    sampler.abort();
    let _ = keeper.await;
    report(&soak, seconds);
    eprintln!("event log:\n{}", soak.log.lock().unwrap().join("\n"));
    let logs = soak.operators.lock().unwrap().logs();
    let violations = soak.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "opsoak seed {seed}: {} violation(s):\n{}\n\noperator logs: {logs}\nevent log (replay: ORB_OPSOAK_SEED={seed} ORB_OPSOAK_SECONDS={seconds}):\n{}",
        violations.len(),
        violations.join("\n"),
        soak.log.lock().unwrap().join("\n")
    );
}
