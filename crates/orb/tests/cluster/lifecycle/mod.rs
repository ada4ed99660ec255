//! Machines off the happy path, on the real local control plane: one matrix of machine states
//! (running, pending for lack of room, image pull failure, crash loop, failed later, exited 0,
//! deleted outside orb, evicted) × operations (status through the CLI, HostFactory and REST;
//! return by id; return by request; cancel; the pod-timeout GC) × the four handlers where the
//! cell applies. Test names read as the table: `<state>::<handler>::<operation>`. Each cell
//! asserts the cluster's objects, what orb stored and what it reports. The must-show cases of
//! the lifecycle (a Job past its deadline, a Deployment return among Pending pods, the pod
//! timeout at its default) are in [`scenarios`]. Needs the control plane (`cp up`).

mod crashes;
mod limits;
mod return_crashes;
mod returns;
mod scenarios;
pub(crate) mod world;

use std::time::Duration;

use serde_json::Value;
use world::{Kind, Setup, World, machine, machine_ids, summary};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Pending,
    ImagePull,
    CrashLoop,
    FailedLater,
    Succeeded,
    DeletedOutside,
    Evicted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Status,
    ReturnById,
    ReturnByRequest,
    Cancel,
    PodTimeout,
}

/// The shortened pod timeout of the GC column (the default, 300 s, has its own test).
const SHORT_POD_TIMEOUT: u64 = 8;

fn setup(state: State, kind: Kind, op: Op) -> Setup {
    let s = Setup::new(kind);
    let s = match state {
        State::Pending => s.on_node_with_room(1),
        State::ImagePull => s.annotate("kwok.orb-rs.io/waiting-reason", "ErrImagePull"),
        State::CrashLoop => s.annotate("kwok.orb-rs.io/crash-loop", "true"),
        State::FailedLater => s
            .annotate("kwok.orb-rs.io/fail-after", "4s")
            .annotate("kwok.orb-rs.io/exit-code", "3"),
        State::Succeeded if kind == Kind::Job => {
            s.annotate("pod-complete.stage.kwok.x-k8s.io/delay", "3s")
        }
        State::Succeeded => s.annotate("kwok.orb-rs.io/succeed-after", "3s"),
        State::Running | State::DeletedOutside | State::Evicted => s,
    };
    if op == Op::PodTimeout {
        s.env(
            "ORB_K8S_POD_TIMEOUT_SECONDS",
            &SHORT_POD_TIMEOUT.to_string(),
        )
    } else {
        s
    }
}

/// How the subject machine reads once it is in `state`: the orb statuses accepted, the
/// HostFactory `result`, and a word its reason contains.
struct Reads {
    statuses: &'static [&'static str],
    result: &'static [&'static str],
    reason: Option<&'static str>,
    /// Reported by getReturnRequests (the cluster took or ended the host).
    reclaimed: bool,
}

fn reads(state: State, kind: Kind) -> Reads {
    // A StatefulSet recreates a lost or failed pod under the same name: the machine comes back
    // as a new incarnation (a new pod uid), so it may read running again at any moment.
    let reincarnates = kind == Kind::StatefulSet;
    match state {
        State::Running => Reads {
            statuses: &["running"],
            result: &["succeed"],
            reason: None,
            reclaimed: false,
        },
        State::Pending => Reads {
            statuses: &["pending"],
            result: &["executing"],
            reason: Some("Unschedulable"),
            reclaimed: false,
        },
        State::ImagePull => Reads {
            statuses: &["failed"],
            result: &["fail"],
            reason: Some("ErrImagePull"),
            reclaimed: true,
        },
        State::CrashLoop => Reads {
            statuses: &["failed"],
            result: &["fail"],
            reason: Some("CrashLoop"),
            reclaimed: true,
        },
        State::FailedLater if reincarnates => Reads {
            statuses: &[
                "failed",
                "running",
                "pending",
                "shutting-down",
                "terminated",
            ],
            result: &["fail", "succeed", "executing"],
            reason: None,
            reclaimed: false,
        },
        State::FailedLater => Reads {
            statuses: &["failed"],
            result: &["fail"],
            reason: Some("code 3"),
            reclaimed: true,
        },
        State::Succeeded => Reads {
            statuses: &["stopped"],
            result: &["fail"],
            reason: Some("Completed"),
            reclaimed: true,
        },
        State::DeletedOutside | State::Evicted if reincarnates => Reads {
            statuses: &["running", "pending", "terminated"],
            result: &["succeed", "executing", "fail"],
            reason: None,
            reclaimed: false,
        },
        State::DeletedOutside | State::Evicted => Reads {
            statuses: &["terminated"],
            result: &["fail"],
            reason: Some("no longer exists"),
            reclaimed: true,
        },
    }
}

/// A request brought into a state: its id, the machine under test, that machine's pod uid
/// when the state was reached, and the other machine.
struct Arranged {
    id: String,
    subject: String,
    uid: Option<String>,
    other: String,
    view: Value,
}

fn status_of<'a>(view: &'a Value, id: &str) -> &'a str {
    machine(view, id)["status"].as_str().unwrap_or("?")
}

fn reason_of<'a>(view: &'a Value, id: &str) -> &'a str {
    machine(view, id)["status_reason"].as_str().unwrap_or("")
}

/// The machine a return can take alone: a StatefulSet's highest ordinal, else the last name.
fn top(kind: Kind, ids: &[String]) -> String {
    let mut ids = ids.to_vec();
    if kind == Kind::StatefulSet {
        ids.sort_by_key(|n| n.rsplit('-').next().unwrap().parse::<u32>().unwrap_or(0));
    } else {
        ids.sort();
    }
    ids.last().unwrap().clone()
}

fn other_of(ids: &[String], subject: &str) -> String {
    ids.iter().find(|m| *m != subject).unwrap().clone()
}

/// Requests 2 machines and waits until the subject is in `state`.
async fn arrange(w: &World, state: State) -> Arranged {
    let kind = w.setup.kind;
    let id = w.request(2);
    let both = |want: &'static str| {
        move |v: &Value| {
            let ids = machine_ids(v);
            ids.len() == 2 && ids.iter().all(|m| status_of(v, m) == want)
        }
    };
    let (subject, view) = match state {
        State::Running | State::DeletedOutside | State::Evicted => {
            let view = w
                .wait_status(&id, "2 running machines", both("running"))
                .await;
            (top(kind, &machine_ids(&view)), view)
        }
        State::Pending => {
            let view = w
                // Pending for want of room: the scheduler has said so (a pod it has not looked
                // at yet is pending too, with no reason, which is not the state arranged here).
                .wait_status(&id, "1 running and 1 unschedulable machine", |v| {
                    let ids = machine_ids(v);
                    let count = |s: &str| ids.iter().filter(|m| status_of(v, m) == s).count();
                    let unschedulable = ids.iter().any(|m| {
                        status_of(v, m) == "pending" && reason_of(v, m).contains("Unschedulable")
                    });
                    ids.len() == 2
                        && count("running") == 1
                        && count("pending") == 1
                        && unschedulable
                })
                .await;
            let ids = machine_ids(&view);
            let pending = ids
                .iter()
                .find(|m| status_of(&view, m) == "pending")
                .unwrap()
                .clone();
            (pending, view)
        }
        State::ImagePull | State::CrashLoop => {
            let view = w
                .wait_status(&id, "2 failed machines", both("failed"))
                .await;
            (top(kind, &machine_ids(&view)), view)
        }
        State::Succeeded => {
            let view = w
                .wait_status(&id, "2 exited machines", both("stopped"))
                .await;
            (top(kind, &machine_ids(&view)), view)
        }
        State::FailedLater if kind == Kind::StatefulSet => {
            // The controller deletes and recreates a failed pod at once, so orb may never see
            // it Failed: what it must see is the host coming back as a new incarnation.
            let view = w
                .wait_status(&id, "2 running machines", both("running"))
                .await;
            let subject = top(kind, &machine_ids(&view));
            let first_uid = machine(&view, &subject)["uid"].clone();
            let view = w
                .wait_status(&id, &format!("{subject} failed or recreated"), |v| {
                    let m = machine(v, &subject);
                    m["status"] == "failed" || m["uid"] != first_uid
                })
                .await;
            (subject, view)
        }
        State::FailedLater => {
            let view = w
                .wait_status(&id, "a machine failed with exit code 3", |v| {
                    machine_ids(v)
                        .iter()
                        .any(|m| status_of(v, m) == "failed" && reason_of(v, m).contains("code 3"))
                })
                .await;
            let ids = machine_ids(&view);
            let failed: Vec<String> = ids
                .iter()
                .filter(|m| status_of(&view, m) == "failed")
                .cloned()
                .collect();
            (top(kind, &failed), view)
        }
    };
    let pods = w.pods(&id).await;
    let uid = pods.get(&subject).and_then(|p| p.metadata.uid.clone());
    let ids = machine_ids(&view);
    let other = other_of(&ids, &subject);
    if matches!(state, State::DeletedOutside | State::Evicted) {
        if state == State::DeletedOutside {
            w.delete_pod(&subject).await;
        } else {
            w.evict_pod(&subject).await;
        }
        let expect = reads(state, kind);
        let view = w
            .wait_status(&id, &format!("orb to see {subject} go"), |v| {
                let m = machine(v, &subject);
                let status = m["status"].as_str().unwrap_or("");
                let new_incarnation = m["uid"].as_str() != uid.as_deref();
                expect.statuses.contains(&status)
                    && (kind != Kind::StatefulSet || new_incarnation || status == "terminated")
            })
            .await;
        return Arranged {
            id,
            subject,
            uid,
            other,
            view,
        };
    }
    Arranged {
        id,
        subject,
        uid,
        other,
        view,
    }
}

/// Whether pod `name` with uid `uid` still exists (not being deleted).
async fn pod_exists(w: &World, id: &str, name: &str, uid: Option<&str>) -> bool {
    w.pods(id)
        .await
        .get(name)
        .is_some_and(|p| uid.is_none() || p.metadata.uid.as_deref() == uid)
}

/// The controller name of a request (its machines' resource id), or None for bare pods.
fn controller_of(w: &World, view: &Value) -> Option<String> {
    if w.setup.kind == Kind::Pod {
        return None;
    }
    view["request"]["resource_ids"][0]
        .as_str()
        .map(String::from)
}

/// Whether the state's pods keep changing by themselves: a Deployment or StatefulSet replaces
/// a failed or lost pod, a failed Job stops its other pods.
fn churns(state: State, kind: Kind) -> bool {
    kind != Kind::Pod
        && matches!(
            state,
            State::FailedLater | State::DeletedOutside | State::Evicted
        )
}

async fn cell(state: State, kind: Kind, op: Op) {
    let prefix = format!("lc-{:?}-{:?}", state, kind).to_ascii_lowercase();
    let mut w = World::new(&prefix, setup(state, kind, op)).await;
    let a = arrange(&w, state).await;
    match op {
        Op::Status => check_status(&mut w, &a, state).await,
        Op::ReturnById => check_return_by_id(&w, &a, state).await,
        Op::ReturnByRequest => check_return_by_request(&w, &a).await,
        Op::Cancel => check_cancel(&w, &a).await,
        Op::PodTimeout => check_pod_timeout(&w, &a, state).await,
    }
}

async fn check_status(w: &mut World, a: &Arranged, state: State) {
    let kind = w.setup.kind;
    let expect = reads(state, kind);
    // CLI (what was stored on the way here).
    let status = status_of(&a.view, &a.subject);
    assert!(
        expect.statuses.contains(&status),
        "CLI: {} reads {status}: {}",
        a.subject,
        summary(&a.view)
    );
    if let Some(word) = expect.reason {
        let reason = reason_of(&a.view, &a.subject);
        assert!(
            reason.contains(word),
            "CLI reason of {}: {reason}",
            a.subject
        );
    }
    // HostFactory getRequestStatus.
    let entry = w.hf_status(&a.id);
    let hf = entry["machines"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["machineId"] == a.subject.as_str()))
        .unwrap_or_else(|| panic!("HostFactory: no {} in {entry}", a.subject))
        .clone();
    assert!(
        expect.result.contains(&hf["result"].as_str().unwrap_or("")),
        "HostFactory result of {}: {hf}",
        a.subject
    );
    if hf["result"] == "fail" {
        assert!(
            hf["message"].as_str().is_some_and(|m| !m.is_empty()),
            "a failed host says why: {hf}"
        );
    }
    // HostFactory getReturnRequests: the cluster took (or ended) the host, so HostFactory
    // should give it back; a running or pending host is not reported.
    let listed = w.hf_reclaims();
    if expect.reclaimed {
        assert!(listed.contains(&a.subject), "reclaims: {listed:?}");
    } else if !churns(state, kind) {
        assert!(!listed.contains(&a.subject), "not a reclaim: {listed:?}");
    }
    // REST, through orb serve's watch cache.
    let subject = a.subject.clone();
    let view = w
        .rest_status(&a.id, &format!("REST to report {subject}"), |v| {
            expect.statuses.contains(&status_of(v, &subject))
        })
        .await;
    if let Some(word) = expect.reason {
        assert!(
            reason_of(&view, &a.subject).contains(word),
            "{}",
            summary(&view)
        );
    }
    // A status read changes nothing in the cluster.
    if !churns(state, kind) && !matches!(state, State::DeletedOutside | State::Evicted) {
        assert!(
            pod_exists(w, &a.id, &a.subject, a.uid.as_deref()).await,
            "status removed nothing"
        );
    }
    if kind == Kind::Deployment && matches!(state, State::DeletedOutside | State::Evicted) {
        // The ReplicaSet's replacement is reported as a new machine of the same request.
        let replaced = w
            .wait_status(&a.id, "the replacement pod as a new machine", |v| {
                machine_ids(v).len() >= 3
                    && machine_ids(v)
                        .iter()
                        .any(|m| *m != a.subject && *m != a.other && status_of(v, m) == "running")
            })
            .await;
        assert_eq!(status_of(&replaced, &a.subject), "terminated");
    }
}

async fn check_return_by_id(w: &World, a: &Arranged, state: State) {
    let kind = w.setup.kind;
    let controller = controller_of(w, &a.view);
    // A StatefulSet gives back only its highest ordinals: a pending ordinal 0 under a running
    // ordinal 1 is refused, and nothing changes.
    let ids = machine_ids(&a.view);
    if kind == Kind::StatefulSet && top(kind, &ids) != a.subject && state != State::FailedLater {
        let out = w.run(&["machines", "return", &a.subject]);
        assert_eq!(out.status.code(), Some(2), "{}", world::stderr(&out));
        assert!(
            world::stderr(&out).contains("cannot go alone"),
            "{}",
            world::stderr(&out)
        );
        assert!(pod_exists(w, &a.id, &a.subject, a.uid.as_deref()).await);
        return;
    }
    let other_uid = w
        .pods(&a.id)
        .await
        .get(&a.other)
        .and_then(|p| p.metadata.uid.clone());
    let ret = w.json(&["machines", "return", &a.subject]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = w.wait_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    assert!(
        machine_ids(&done).contains(&a.subject),
        "the return covers {}: {}",
        a.subject,
        summary(&done)
    );
    assert!(
        !pod_exists(w, &a.id, &a.subject, None).await,
        "no pod of {} is left",
        a.subject
    );
    let acquire = w.status(&a.id);
    assert_eq!(
        status_of(&acquire, &a.subject),
        "terminated",
        "{}",
        summary(&acquire)
    );
    assert_eq!(
        machine(&acquire, &a.subject)["return_request_id"],
        ret_id.as_str()
    );
    match kind {
        Kind::Job => {
            // Returning one host deletes the Job: every host goes, in the same return.
            let job = controller.unwrap();
            assert!(!w.controller_exists(&job).await, "the Job is deleted");
            w.wait_pods(&a.id, &[], "every pod of the Job gone").await;
            if !churns(state, kind) {
                // Both hosts were still there: both are in the return. (A failed Job had
                // already stopped its other pod: that one is gone, not returned.)
                assert_eq!(machine_ids(&done).len(), 2, "{}", summary(&done));
            }
            if !world::TERMINAL.contains(&a.view["request"]["status"].as_str().unwrap_or("")) {
                assert_eq!(
                    acquire["request"]["status"],
                    "cancelled",
                    "{}",
                    summary(&acquire)
                );
                let message = acquire["request"]["status_message"].as_str().unwrap_or("");
                assert!(message.contains("was returned"), "{message}");
            }
            let log = std::fs::read_to_string(w.log_file()).unwrap_or_default();
            assert!(
                log.contains("releasing a Job deletes the whole Job"),
                "the Job release is logged in {}: {log}",
                w.log_file().display()
            );
        }
        _ if !churns(state, kind) => {
            assert!(
                pod_exists(w, &a.id, &a.other, other_uid.as_deref()).await,
                "{} was not named and stays",
                a.other
            );
            assert_ne!(status_of(&acquire, &a.other), "terminated");
        }
        _ => {}
    }
}

async fn check_return_by_request(w: &World, a: &Arranged) {
    let controller = controller_of(w, &a.view);
    let ret = w.json(&["machines", "return", "--request-id", &a.id]);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = w.wait_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));
    w.wait_pods(&a.id, &[], "every pod of the request gone")
        .await;
    if let Some(name) = controller {
        assert!(!w.controller_exists(&name).await, "{name} is deleted");
    }
    let acquire = w.status(&a.id);
    for m in machine_ids(&acquire) {
        assert_eq!(
            status_of(&acquire, &m),
            "terminated",
            "{}",
            summary(&acquire)
        );
    }
}

async fn check_cancel(w: &World, a: &Arranged) {
    let controller = controller_of(w, &a.view);
    let before = w.status(&a.id)["request"]["status"].clone();
    let view = w.json(&["requests", "cancel", &a.id]);
    w.wait_pods(&a.id, &[], "every pod of the request gone")
        .await;
    if let Some(name) = controller {
        assert!(!w.controller_exists(&name).await, "{name} is deleted");
    }
    let unfinished = !world::TERMINAL.contains(&before.as_str().unwrap_or(""));
    if unfinished {
        assert_eq!(view["request"]["status"], "cancelled", "{}", summary(&view));
    } else {
        assert_eq!(
            view["request"]["status"], before,
            "a finished request keeps its status"
        );
        let message = view["request"]["status_message"].as_str().unwrap_or("");
        assert!(message.contains("after it ended"), "{message}");
    }
    for m in machine_ids(&view) {
        assert_eq!(status_of(&view, &m), "terminated", "{}", summary(&view));
    }
}

async fn check_pod_timeout(w: &World, a: &Arranged, state: State) {
    let kind = w.setup.kind;
    let before: Vec<(String, Option<String>)> = w
        .pods(&a.id)
        .await
        .into_iter()
        .map(|(n, p)| (n, p.metadata.uid))
        .collect();
    tokio::time::sleep(Duration::from_secs(SHORT_POD_TIMEOUT + 2)).await;
    let view = w.status(&a.id);
    if state != State::Pending {
        for m in machine_ids(&view) {
            assert!(
                !reason_of(&view, &m).contains("timed out"),
                "only a pending machine times out: {}",
                summary(&view)
            );
        }
        if !churns(state, kind) {
            let after: Vec<(String, Option<String>)> = w
                .pods(&a.id)
                .await
                .into_iter()
                .map(|(n, p)| (n, p.metadata.uid))
                .collect();
            assert_eq!(after, before, "the timeout GC removed nothing");
        }
        return;
    }
    // A StatefulSet may delete and recreate a pod its node refused, so a read can catch the
    // subject with no pod for a moment ("terminated", no longer exists); wait for the timeout
    // itself to be recorded.
    let view = w
        .wait_status(&a.id, "the pending machine timed out", |v| {
            (status_of(v, &a.subject) == "failed" || status_of(v, &a.subject) == "terminated")
                && reason_of(v, &a.subject).contains("timed out")
        })
        .await;
    assert!(
        reason_of(&view, &a.subject).contains("timed out"),
        "{}",
        summary(&view)
    );
    let running_uid = before
        .iter()
        .find(|(n, _)| *n == a.other)
        .and_then(|(_, u)| u.clone());
    // Never a running machine: whatever kind, the running pod is untouched.
    assert!(
        pod_exists(w, &a.id, &a.other, running_uid.as_deref()).await,
        "the running pod stays: {}",
        summary(&view)
    );
    match kind {
        Kind::Pod | Kind::Deployment => {
            w.wait_pods(
                &a.id,
                std::slice::from_ref(&a.other),
                "only the running pod left",
            )
            .await
        }
        Kind::StatefulSet => {
            // Only a top ordinal can go; a pending ordinal 0 under a running 1 stays.
            if top(kind, &machine_ids(&a.view)) == a.subject {
                w.wait_pods(
                    &a.id,
                    std::slice::from_ref(&a.other),
                    "the top ordinal scaled away",
                )
                .await;
            }
        }
        Kind::Job => {
            // Deleting a Job pod would fail the Job and stop the running one: it stays, and
            // the request ends partial with the reason.
            assert!(pod_exists(w, &a.id, &a.subject, a.uid.as_deref()).await);
            let view = w.wait_finished(&a.id).await;
            assert_eq!(view["request"]["status"], "partial", "{}", summary(&view));
            let message = view["request"]["status_message"].as_str().unwrap_or("");
            assert!(message.contains("timed out"), "{message}");
        }
    }
}

/// One test per cell: `<state>::<handler>::<operation>`.
macro_rules! matrix {
    ($($state:ident => $variant:ident: [$($kind:ident => $kvariant:ident),*]);* $(;)?) => {
        $(
            mod $state {
                use super::*;
                $(
                    mod $kind {
                        use super::*;
                        #[tokio::test]
                        #[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
                        async fn status() {
                            cell(State::$variant, Kind::$kvariant, Op::Status).await;
                        }
                        #[tokio::test]
                        #[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
                        async fn return_by_id() {
                            cell(State::$variant, Kind::$kvariant, Op::ReturnById).await;
                        }
                        #[tokio::test]
                        #[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
                        async fn return_by_request() {
                            cell(State::$variant, Kind::$kvariant, Op::ReturnByRequest).await;
                        }
                        #[tokio::test]
                        #[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
                        async fn cancel() {
                            cell(State::$variant, Kind::$kvariant, Op::Cancel).await;
                        }
                        #[tokio::test]
                        #[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
                        async fn pod_timeout_gc() {
                            cell(State::$variant, Kind::$kvariant, Op::PodTimeout).await;
                        }
                    }
                )*
            }
        )*
    };
}

// A Deployment's or StatefulSet's pod never exits 0 in a real cluster (restartPolicy Always),
// so `succeeded` applies to bare pods and Jobs only.
matrix! {
    running => Running: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    pending => Pending: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    image_pull_failure => ImagePull: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    crash_loop => CrashLoop: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    failed_later => FailedLater: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    succeeded => Succeeded: [pod => Pod, job => Job];
    deleted_outside_orb => DeletedOutside: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
    evicted => Evicted: [pod => Pod, deployment => Deployment, statefulset => StatefulSet, job => Job];
}
