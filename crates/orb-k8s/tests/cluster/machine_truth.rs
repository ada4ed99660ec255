//! Machine truth (issue #51, 2 and 3) on pods that misbehave as production pods do, played by
//! `kube_fixture::misbehave::Kubelet`: `failed` means failed now, a machine that ran never
//! goes back to `pending`, and the pod timeout never takes a machine that ran; nodes that go
//! NotReady or Unknown, played by `kube_fixture::TestNode::go_down`. Default settings, except
//! where a test says why.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kube_fixture::misbehave::{Exit, Kubelet};
use kube_fixture::{Check, NodeDown, wait_for};
use orb_core::ids::RequestId;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireOutcome, MachineRef, Provider, StatusInput, StatusReport};
use orb_core::template::{ProviderApi, Template};
use orb_core::test_support::status_machines;
use serde_json::json;

use crate::common::*;

const KINDS: [ProviderApi; 4] = [
    ProviderApi::Pod,
    ProviderApi::Deployment,
    ProviderApi::StatefulSet,
    ProviderApi::Job,
];

/// A host template of `kind`; a Job's pods run for ten minutes instead of KWOK's 1 s.
fn host(kind: ProviderApi) -> Template {
    let mut t = template(
        &format!("truth-{}", kind.as_str().to_lowercase()),
        Some(kind),
    );
    if kind == ProviderApi::Job {
        t.annotations.insert(
            "pod-complete.stage.kwok.x-k8s.io/delay".into(),
            "600s".into(),
        );
    }
    t
}

/// One acquired host, read until it runs.
struct Host {
    req: RequestId,
    outcome: AcquireOutcome,
    input: StatusInput,
    /// The first read that found it running, as the broker stores it.
    running: StatusReport,
}

impl Host {
    async fn acquire(h: &Harness, t: &Template) -> Host {
        let (req, outcome) = acquire(h, t, 1).await;
        let input = status_input(&req, t, 1, &outcome);
        let running = wait_for("the host running", WAIT, || async {
            match h.provider.status(input.clone()).await {
                Ok(r)
                    if r.machines.len() == 1 && r.machines[0].status == MachineStatus::Running =>
                {
                    Check::Done(r)
                }
                other => Check::NotYet(format!("{other:?}")),
            }
        })
        .await;
        Host {
            req,
            outcome,
            input,
            running,
        }
    }

    fn pod(&self) -> &str {
        &self.running.machines[0].machine_id
    }

    fn kubelet(&self, h: &Harness) -> Kubelet {
        Kubelet::of(&h.cluster.client, h.ns.name(), self.pod())
    }

    /// A status read that knows what `last` reported, as the broker passes its stored
    /// machines (`None`: a read that knows nothing stored).
    async fn read(&self, h: &Harness, last: Option<&StatusReport>) -> StatusReport {
        let mut input = self.input.clone();
        if let Some(last) = last {
            let api = self.input.provider_api.expect("an acquire has a kind");
            input.machines = status_machines(last.machines.iter().map(|m| MachineRef {
                status: m.status,
                uid: m.uid.clone(),
                ..machine_ref(&self.req, &m.machine_id, &self.outcome, api.as_str())
            }));
        }
        h.provider.status(input).await.expect("status read")
    }

    /// The pod's UID while it is not being deleted; `None` when it is gone or going.
    async fn live_uid(&self, h: &Harness) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
        pods.get_opt(self.pod())
            .await
            .expect("read the pod")
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.uid())
    }
}

fn delivered(kind: ProviderApi, verdict: &Verdict) -> bool {
    match kind {
        // A Job's request completes when the Job does; running, it is underway.
        ProviderApi::Job => *verdict == Verdict::Underway,
        _ => *verdict == Verdict::Fulfilled,
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_running_machine_that_loses_readiness_reads_running_with_the_reason_and_keeps_its_pod() {
    let h = harness("truth-unready", json!({})).await;
    for kind in KINDS {
        let host = Host::acquire(&h, &host(kind)).await;
        let uid = host.live_uid(&h).await;
        host.kubelet(&h).set_ready(false).await;
        let read = host.read(&h, Some(&host.running)).await;
        let m = &read.machines[0];
        assert_eq!(m.status, MachineStatus::Running, "{kind}: {m:?}");
        let reason = m.status_reason.as_deref().unwrap_or_default();
        assert!(
            reason.starts_with("not ready: ContainersNotReady"),
            "{kind}: {reason}"
        );
        assert!(delivered(kind, &read.verdict), "{kind}: {read:?}");
        assert_eq!(host.live_uid(&h).await, uid, "{kind}: the pod stays");
    }
}

/// A pod that restarted (exit 1, then OOMKilled) and runs and is Ready again is a healthy
/// host. Job pods never restart (`restartPolicy: Never`).
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_ready_pod_that_restarted_twice_with_exit_1_and_137_reads_running() {
    let h = harness("truth-restart", json!({})).await;
    for kind in &KINDS[..3] {
        let host = Host::acquire(&h, &host(*kind)).await;
        let kubelet = host.kubelet(&h);
        kubelet.restart(Exit::Error(1)).await;
        let pod = kubelet.restart(Exit::OomKilled).await;
        let restarts = pod.status.unwrap().container_statuses.unwrap()[0].restart_count;
        assert_eq!(restarts, 2, "{kind}");
        // A read that knows nothing stored: the pod alone says it is healthy.
        let read = host.read(&h, None).await;
        assert_eq!(
            (
                read.machines[0].status,
                read.machines[0].status_reason.clone()
            ),
            (MachineStatus::Running, None),
            "{kind}"
        );
        assert!(delivered(*kind, &read.verdict), "{kind}: {read:?}");
    }
}

/// Ready → not Ready → Ready, three times, read every 100 ms as `orb serve` would, each
/// read knowing what the one before stored.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_readiness_flap_never_reads_pending_or_failed_and_never_loses_its_pod() {
    let h = harness("truth-flap", json!({})).await;
    let host = Host::acquire(&h, &host(ProviderApi::Deployment)).await;
    let uid = host.live_uid(&h).await;
    let kubelet = host.kubelet(&h);
    let flap =
        tokio::spawn(async move { kubelet.flap_readiness(Duration::from_millis(500), 3).await });
    let mut last = host.running.clone();
    let mut saw_not_ready = 0;
    while !flap.is_finished() {
        let read = host.read(&h, Some(&last)).await;
        let m = &read.machines[0];
        assert_eq!(m.status, MachineStatus::Running, "{m:?}");
        saw_not_ready += usize::from(m.status_reason.is_some());
        last = read;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    flap.await.expect("the flap ran");
    assert!(saw_not_ready > 0, "no read caught the pod not ready");
    assert_eq!(host.live_uid(&h).await, uid, "the pod stays");
    let read = host.read(&h, Some(&last)).await;
    assert_eq!(
        (
            read.machines[0].status,
            read.machines[0].status_reason.clone()
        ),
        (MachineStatus::Running, None)
    );
}

/// `CrashLoopBackOff` now is failed; recovered (Running and Ready, two restarts with exit 1
/// behind it), the host is running again.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_crash_loop_reads_failed_while_it_lasts_and_running_once_recovered() {
    let h = harness("truth-crash", json!({})).await;
    let host = Host::acquire(&h, &host(ProviderApi::StatefulSet)).await;
    let kubelet = host.kubelet(&h);
    kubelet.crash_loop().await;
    let crashing = host.read(&h, Some(&host.running)).await;
    let m = &crashing.machines[0];
    assert_eq!(m.status, MachineStatus::Failed, "{m:?}");
    assert!(
        m.status_reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("CrashLoopBackOff: container orb"),
        "{m:?}"
    );
    kubelet.recover().await;
    let recovered = host.read(&h, Some(&crashing)).await;
    assert_eq!(
        (
            recovered.machines[0].status,
            recovered.machines[0].status_reason.clone()
        ),
        (MachineStatus::Running, None)
    );
}

/// The pod timeout applies only to units that never started. With an 8 s timeout (the
/// template's, so the test need not wait 300 s; long enough for a pod to start on a loaded
/// machine), a host that ran and lost its readiness past it is never timed out or deleted,
/// even by a read that knows nothing stored of it.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_machine_that_ran_is_never_timed_out_past_a_short_pod_timeout() {
    let h = harness("truth-timeout", json!({})).await;
    let mut hosts = Vec::new();
    for kind in KINDS {
        let mut t = host(kind);
        t.provider_config = Some(json!({"pod_timeout_seconds": 8}));
        let host = Host::acquire(&h, &t).await;
        let uid = host.live_uid(&h).await;
        hosts.push((kind, host, uid));
    }
    tokio::time::sleep(Duration::from_secs(9)).await;
    for (kind, host, uid) in hosts {
        host.kubelet(&h).set_ready(false).await;
        for _ in 0..2 {
            let read = host.read(&h, None).await;
            let m = &read.machines[0];
            assert_eq!(m.status, MachineStatus::Pending, "{kind}: {m:?}");
            assert!(
                !read
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("timed"),
                "{kind}: {read:?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(host.live_uid(&h).await, uid, "{kind}: the pod stays");
        let read = host.read(&h, Some(&host.running)).await;
        assert_eq!(read.machines[0].status, MachineStatus::Running, "{kind}");
    }
}

/// A Pod and a Deployment host on a node of their own; the node goes down as `how` says
/// (the node lifecycle controller marks their pods not Ready) and recovers. Meanwhile both
/// read `running` with a reason that names the node, and their pods stay.
async fn a_running_machine_whose_node_goes_down(how: NodeDown) {
    let h = harness(&format!("truth-{how:?}").to_lowercase(), json!({})).await;
    let node = h.cluster.node_with_room("truth-node", 2).await;
    let mut hosts = Vec::new();
    for kind in [ProviderApi::Pod, ProviderApi::Deployment] {
        let mut t = host(kind);
        t.node_selector = Some(serde_json::from_value(node.node_selector()).unwrap());
        t.tolerations = Some(serde_json::from_value(node.tolerations()).unwrap());
        let host = Host::acquire(&h, &t).await;
        let uid = host.live_uid(&h).await;
        hosts.push((kind, host, uid));
    }
    let outage = node.go_down(how).await;
    let mut last = Vec::new();
    for (kind, host, uid) in &hosts {
        let read = host.read(&h, Some(&host.running)).await;
        let m = &read.machines[0];
        assert_eq!(m.status, MachineStatus::Running, "{how:?} {kind}: {m:?}");
        let reason = m.status_reason.as_deref().unwrap_or_default();
        assert!(
            reason.contains(&format!("its node {} is not ready", node.name)),
            "{how:?} {kind}: {reason}"
        );
        assert!(delivered(*kind, &read.verdict), "{how:?} {kind}: {read:?}");
        assert_eq!(
            host.live_uid(&h).await,
            *uid,
            "{how:?} {kind}: the pod stays"
        );
        last.push(read);
    }
    outage.recover().await;
    for ((kind, host, uid), last) in hosts.iter().zip(&last) {
        let read = host.read(&h, Some(last)).await;
        let m = &read.machines[0];
        assert_eq!(
            (m.status, m.status_reason.as_deref()),
            (MachineStatus::Running, None),
            "{how:?} {kind}"
        );
        assert_eq!(
            host.live_uid(&h).await,
            *uid,
            "{how:?} {kind}: the pod stays"
        );
    }
}

/// The kubelet posts `Ready=False` and goes on renewing its Lease.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_running_machine_whose_node_goes_not_ready_reads_running_with_why_and_keeps_its_pod() {
    a_running_machine_whose_node_goes_down(NodeDown::NotReady).await;
}

/// The kubelet goes silent: the controller sets the node `Unknown` after 50 s.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_running_machine_whose_node_goes_unknown_reads_running_with_why_and_keeps_its_pod() {
    a_running_machine_whose_node_goes_down(NodeDown::Unknown).await;
}

/// KWOK leaves a Running pod's status as a misbehaviour wrote it (its pod stages match
/// Pending pods), so what a test arranged is what orb reads.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn kwok_leaves_a_misbehaving_pods_status_as_written() {
    let h = harness("truth-kwok", json!({})).await;
    let host = Host::acquire(&h, &host(ProviderApi::Pod)).await;
    let kubelet = host.kubelet(&h);
    kubelet.set_ready(false).await;
    let written = kubelet.disruption_target("EvictionByEvictionAPI").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let now = pods.get(host.pod()).await.unwrap();
    assert_eq!(now.status, written.status);
    let conditions = now.status.unwrap().conditions.unwrap();
    let is = |type_: &str, status: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == status)
    };
    assert!(is("Ready", "False") && is("DisruptionTarget", "True"));
}
