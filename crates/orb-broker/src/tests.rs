//! Lifecycle tests of the broker against a SQLite store and the scripted provider.

mod reclaims;
mod resume;
mod returns;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use jiff::Timestamp;
use orb_core::lifecycle::Verdict;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::provider::{MachineFailure, ProviderError, ReclaimNotice};
use orb_core::request::{RequestStatus, RequestType};
use orb_core::template::wire::template_from_value;
use orb_core::test_support;
use orb_store::{RequestFilter, Store};
use rstest::rstest;
use serde_json::json;

use super::UnknownNames;
use super::test_provider::{ReadAheadMode, ScriptedProvider, report};
use super::*;
use crate::catalog::{Catalog, RefusedTemplate};

struct Fixture {
    _dir: tempfile::TempDir,
    broker: Broker,
    provider: Arc<ScriptedProvider>,
    now: Arc<AtomicI64>,
}

impl Fixture {
    fn advance(&self, secs: i64) {
        self.now.fetch_add(secs, Ordering::SeqCst);
    }

    /// Returns `keys`, refusing names orb does not know.
    async fn return_machines(&self, keys: &[MachineKey]) -> RequestView {
        self.broker
            .return_machines(keys, UnknownNames::Refuse)
            .await
            .unwrap()
    }

    /// A status read of a request that is stored.
    async fn refresh(&self, id: &RequestId) -> RequestView {
        self.broker.refresh(id).await.unwrap().unwrap()
    }

    /// The provider's answer to the next status read.
    fn next_status(&self, verdict: Verdict, machines: &[(&str, MachineStatus)]) {
        self.provider
            .statuses
            .lock()
            .unwrap()
            .push_back(Ok(report(verdict, machines)));
    }

    /// The provider's next release fails for `ids`, with `reason`.
    fn fail_release_of(&self, ids: &[&String], reason: &str) {
        *self.provider.release_failures.lock().unwrap() = ids
            .iter()
            .map(|id| MachineFailure {
                machine_id: (*id).clone(),
                reason: reason.into(),
            })
            .collect();
    }

    async fn insert_request(&self, request: &mut orb_core::request::Request) {
        self.broker
            .store
            .insert_request(request, &mut [])
            .await
            .unwrap();
    }

    async fn stored_machines(&self, ids: &[String]) -> Vec<Machine> {
        self.broker.store.find_machines(ids).await.unwrap()
    }

    async fn stored_requests(&self) -> usize {
        self.broker
            .store
            .list_requests(&RequestFilter::default())
            .await
            .unwrap()
            .len()
    }
}

fn catalog() -> Catalog {
    let templates = [
        json!({"templateId": "worker", "imageId": "busybox:1.36", "maxNumber": 4}),
        json!({"templateId": "unlimited", "imageId": "busybox:1.36", "maxNumber": -1}),
        json!({"templateId": "broken", "namespace": "Not_A_Label"}),
        json!({"templateId": "set", "imageId": "busybox:1.36", "maxNumber": 4,
               "providerApi": "StatefulSet"}),
        json!({"templateId": "deploy", "imageId": "busybox:1.36", "maxNumber": 4,
               "providerApi": "Deployment"}),
        json!({"templateId": "job", "imageId": "busybox:1.36", "maxNumber": 4,
               "providerApi": "Job"}),
    ];
    Catalog {
        file: None,
        templates: templates
            .iter()
            .map(|t| template_from_value(t, None, "t").unwrap().template)
            .collect(),
        warnings: vec![],
        refused: vec![RefusedTemplate {
            template_id: "sneaky".into(),
            reason: "template \"sneaky\" is refused: audit_high_risk_pod_fields (from template \
                     sneaky): template \"sneaky\" may not override \"audit_high_risk_pod_fields\""
                .into(),
        }],
    }
}

async fn fixture_with(provider: ProviderHandle, scripted: Arc<ScriptedProvider>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite_file(&dir.path().join("orb.db"))
        .await
        .unwrap();
    let now = Arc::new(AtomicI64::new(1_767_225_600));
    let clock_now = now.clone();
    Fixture {
        _dir: dir,
        broker: Broker {
            store,
            provider,
            settings: BrokerSettings {
                provider_name: "kube".into(),
                provider_type: "k8s".into(),
                grace_secs: 300,
                max_machines_per_request: 10,
                default_max_machines: 10,
            },
            catalog: crate::catalog::CatalogCell::new(catalog()),
            clock: Arc::new(move || {
                Timestamp::from_second(clock_now.load(Ordering::SeqCst)).unwrap()
            }),
            refreshed: Default::default(),
        },
        provider: scripted,
        now,
    }
}

async fn fixture() -> Fixture {
    let scripted = Arc::new(ScriptedProvider::default());
    fixture_with(ProviderHandle::ready(scripted.clone()), scripted).await
}

async fn fixture_without_provider() -> Fixture {
    let scripted = Arc::new(ScriptedProvider::default());
    let handle = ProviderHandle::lazy(|| {
        Err(ProviderError::Misconfigured(
            "no cluster in this test".into(),
        ))
    });
    fixture_with(handle, scripted).await
}

#[tokio::test]
async fn an_acquire_is_stored_in_progress_with_its_machines_and_a_deadline() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    assert_eq!(view.request.status, RequestStatus::InProgress);
    assert_eq!(view.machines.len(), 2);
    let stored = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, view.request);
    assert_eq!(
        stored.deadline_at.unwrap().as_second() - stored.started_at.unwrap().as_second(),
        300
    );
    assert_eq!(f.provider.calls(), vec!["acquire worker x2"]);
}

/// A status read that finds nothing new hands on the store's kept machine list instead of
/// copying it (at 5,000 machines the copy was a tenth of a read through `orb serve`); a read
/// that changes a machine works on a copy, so an earlier view and the kept list never show a
/// change that was not stored.
#[tokio::test]
async fn an_unchanged_status_read_shares_the_kept_machine_list() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let id = view.request.request_id.clone();
    let (a, b) = (
        view.machines[0].machine_id.clone(),
        view.machines[1].machine_id.clone(),
    );
    // The provider hands out the same tags allocation every read, as the watch cache does.
    let tags: orb_core::shared::Shared<std::collections::BTreeMap<String, String>> =
        std::collections::BTreeMap::from([("team".to_string(), "grid".to_string())]).into();
    let seen = |b_status: MachineStatus| {
        let mut r = report(
            Verdict::InProgress,
            &[(&a, MachineStatus::Running), (&b, b_status)],
        );
        for o in &mut r.machines {
            o.tags = tags.clone();
        }
        Ok(r)
    };
    let mut views = Vec::new();
    for b_status in [
        MachineStatus::Running,
        MachineStatus::Running,
        MachineStatus::Running,
        MachineStatus::Failed,
    ] {
        f.provider
            .statuses
            .lock()
            .unwrap()
            .push_back(seen(b_status));
        views.push(f.refresh(&id).await);
    }
    // First read: the machines change (running, tagged) and are written. Second: the rows
    // read back hold equal tags in their own allocations; the read shares the provider's,
    // on a copy that becomes the kept list. Third: nothing to fold, nothing copied.
    assert!(
        views[0]
            .machines
            .iter()
            .all(|m| m.status == MachineStatus::Running)
    );
    assert!(
        views[1]
            .machines
            .iter()
            .all(|m| orb_core::shared::Shared::ptr_eq(&m.tags, &tags))
    );
    assert!(
        MachineList::ptr_eq(&views[2].machines, &views[1].machines),
        "an unchanged read copies nothing"
    );
    // Fourth: machine b failed. The read's list is a copy; the earlier views are untouched.
    assert!(!MachineList::ptr_eq(&views[3].machines, &views[2].machines));
    assert_eq!(views[3].machines[1].status, MachineStatus::Failed);
    assert_eq!(views[2].machines[1].status, MachineStatus::Running);
    assert_eq!(views[1].machines[1].status, MachineStatus::Running);
    let stored = f.broker.machines_of(&views[3].request).await.unwrap();
    assert_eq!(
        stored, *views[3].machines,
        "what is shown is what is stored"
    );
    assert_eq!(
        f.provider
            .calls()
            .iter()
            .filter(|c| c.starts_with("status "))
            .count(),
        4
    );
}

#[tokio::test]
async fn a_request_changed_while_the_provider_acquires_still_records_its_machines() {
    let f = fixture().await;
    *f.provider.concurrent_writer.lock().unwrap() = Some(f.broker.store.clone());
    let view = f
        .broker
        .request_machines("worker", 2)
        .await
        .expect("a concurrent status write must not fail the acquire");
    assert_eq!(view.machines.len(), 2);
    let stored = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        *stored.provider_data,
        json!({"pod_names": view.request.resource_ids})
    );
    assert_eq!(stored.version, view.request.version);
    let machines = f.broker.machines_of(&stored).await.unwrap();
    assert_eq!(machines.len(), 2);
}

/// A status read that acted (it released a timed-out pod) and then lost the write to another
/// process's read: the retry folds the same answer onto the fresh row. Asking the provider
/// again would only see the pod gone, and the machine would read "no longer exists" without
/// ever saying it timed out.
#[tokio::test]
async fn a_status_read_whose_write_conflicts_keeps_what_the_provider_answered() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    let mut timed_out = report(
        Verdict::Partial { is_final: false },
        &[(a, MachineStatus::Running), (b, MachineStatus::Failed)],
    );
    timed_out.machines[1].status_reason =
        Some("timed out: pending for more than 8s (pod_timeout_seconds)".into());
    let gone = report(
        Verdict::Partial { is_final: false },
        &[(a, MachineStatus::Running), (b, MachineStatus::Terminated)],
    );
    f.provider
        .statuses
        .lock()
        .unwrap()
        .extend([Ok(timed_out), Ok(gone)]);
    *f.provider.status_writer.lock().unwrap() = Some(f.broker.store.clone());
    let refreshed = f.refresh(&view.request.request_id).await;
    let statuses = f
        .provider
        .calls()
        .iter()
        .filter(|c| c.starts_with("status "))
        .count();
    assert_eq!(
        statuses,
        1,
        "the provider is asked once: {:?}",
        f.provider.calls()
    );
    let machine = refreshed
        .machines
        .iter()
        .find(|m| &m.machine_id == b)
        .unwrap();
    assert_eq!(machine.status, MachineStatus::Failed);
    assert!(
        machine
            .status_reason
            .as_deref()
            .is_some_and(|r| r.contains("timed out")),
        "{machine:?}"
    );
    let stored = f.broker.machines_of(&refreshed.request).await.unwrap();
    assert_eq!(
        stored, *refreshed.machines,
        "what is shown is what is stored"
    );
}

/// A finished acquire whose every machine went without an orb return: a Deployment or a
/// StatefulSet brings hosts back on its own, so a read that saw every pod gone (between
/// their deletion and recreation) must not be the last; bare pods never come back.
#[rstest]
#[case::statefulset("set", true)]
#[case::deployment("deploy", true)]
#[case::bare_pods("worker", false)]
#[tokio::test]
async fn a_finished_acquire_whose_pods_all_vanished_is_followed_only_under_a_controller(
    #[case] template: &str,
    #[case] followed: bool,
) {
    let f = fixture().await;
    let gone = finished_then_all_gone(&f, template, &[MachineStatus::Running]).await;
    let id = &gone.request.request_id;
    let calls = f.provider.calls().len();
    let next = f.refresh(id).await;
    assert_eq!(next.request.status, RequestStatus::Complete);
    if followed {
        assert_eq!(
            f.provider.calls().len(),
            calls + 1,
            "the provider is asked again"
        );
        assert_eq!(
            statuses(&next.machines),
            [MachineStatus::Running; 2],
            "the hosts the controller brought back are recorded"
        );
    } else {
        assert_eq!(f.provider.calls().len(), calls, "nothing left to follow");
        assert_eq!(statuses(&next.machines), [MachineStatus::Terminated; 2]);
    }
}

/// A 2-machine acquire of `template` that completed, then a read saw both machines gone;
/// the provider's next reports say both are in each status of `then` in turn.
async fn finished_then_all_gone(
    f: &Fixture,
    template: &str,
    then: &[MachineStatus],
) -> RequestView {
    let view = f.broker.request_machines(template, 2).await.unwrap();
    let id = &view.request.request_id;
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    let both = |status| Ok(report(Verdict::Fulfilled, &[(a, status), (b, status)]));
    {
        let mut reports = f.provider.statuses.lock().unwrap();
        reports.extend([
            both(MachineStatus::Running),
            both(MachineStatus::Terminated),
        ]);
        reports.extend(then.iter().map(|&s| both(s)));
    }
    let complete = f.refresh(id).await;
    assert_eq!(complete.request.status, RequestStatus::Complete);
    let gone = f.refresh(id).await;
    assert_eq!(statuses(&gone.machines), [MachineStatus::Terminated; 2]);
    gone
}

fn statuses(machines: &[Machine]) -> Vec<MachineStatus> {
    machines.iter().map(|m| m.status).collect()
}

/// A cancel deleted the controller, and a return took its machines: neither leaves anything
/// the controller could bring back, so the request is answered from storage.
#[tokio::test]
async fn a_cancelled_or_returned_statefulset_acquire_is_not_followed() {
    let f = fixture().await;
    let view = f.broker.request_machines("set", 2).await.unwrap();
    f.broker.cancel(&view.request.request_id).await.unwrap();
    let calls = f.provider.calls().len();
    let after = f.refresh(&view.request.request_id).await;
    assert_eq!(after.request.status, RequestStatus::Cancelled);
    assert_eq!(
        f.provider.calls().len(),
        calls,
        "a cancelled acquire is settled"
    );

    let view = f.broker.request_machines("set", 2).await.unwrap();
    let id = &view.request.request_id;
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    f.next_status(
        Verdict::Fulfilled,
        &[(a, MachineStatus::Running), (b, MachineStatus::Running)],
    );
    f.refresh(id).await;
    let mut stored = f.broker.machines_of(&view.request).await.unwrap();
    let returner = RequestId::new_return();
    for m in &mut stored {
        m.status = MachineStatus::Terminated;
        m.return_request_id = Some(returner.clone());
    }
    let mut request = f.broker.store.get_request(id).await.unwrap().unwrap();
    f.broker
        .store
        .update_request(&mut request, &mut stored)
        .await
        .unwrap();
    let calls = f.provider.calls().len();
    f.refresh(id).await;
    assert_eq!(
        f.provider.calls().len(),
        calls,
        "machines given back are settled"
    );
}

/// The next two status reports for a 2-machine acquire: one of two running, then both.
fn script_partial_then_fulfilled(f: &Fixture, view: &RequestView) {
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    f.provider.statuses.lock().unwrap().extend([
        Ok(report(
            Verdict::Partial { is_final: false },
            &[(a, MachineStatus::Running), (b, MachineStatus::Pending)],
        )),
        Ok(report(
            Verdict::Fulfilled,
            &[(a, MachineStatus::Running), (b, MachineStatus::Running)],
        )),
    ]);
}

#[tokio::test]
async fn verdicts_drive_the_request_to_complete() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    script_partial_then_fulfilled(&f, &view);
    let first = f.refresh(&view.request.request_id).await;
    assert_eq!(first.request.status, RequestStatus::PartialPending);
    assert_eq!(first.request.fulfilled_count, 1);
    let second = f.refresh(&view.request.request_id).await;
    assert_eq!(second.request.status, RequestStatus::Complete);
    assert!(
        second
            .machines
            .iter()
            .all(|m| m.status == MachineStatus::Running)
    );
    // A finished request whose machines may still exist is still followed: a machine that
    // fails later is recorded, but the request's own status stays what it ended as.
    let failed_later = report(
        Verdict::Failed {
            reason: "image pull".into(),
        },
        &[
            (
                second.machines[0].machine_id.as_str(),
                MachineStatus::Failed,
            ),
            (
                second.machines[1].machine_id.as_str(),
                MachineStatus::Running,
            ),
        ],
    );
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Ok(failed_later));
    let later = f.refresh(&view.request.request_id).await;
    assert_eq!(later.request.status, RequestStatus::Complete);
    assert_eq!(later.machines[0].status, MachineStatus::Failed);
    // Once every machine is gone, a request of bare pods is answered from storage alone
    // (a_finished_acquire_whose_pods_all_vanished_is_followed_only_under_a_controller).
}

#[tokio::test]
async fn a_status_read_hands_the_provider_its_read_ahead_and_drops_an_unneeded_one() {
    let f = fixture().await;
    *f.provider.read_ahead.lock().unwrap() = Some(ReadAheadMode::Finish);
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let id = view.request.request_id.clone();
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    f.provider.statuses.lock().unwrap().extend([
        Ok(report(
            Verdict::Fulfilled,
            &[(a, MachineStatus::Running), (b, MachineStatus::Running)],
        )),
        Ok(report(
            Verdict::Failed {
                reason: "gone".into(),
            },
            &[
                (a, MachineStatus::Terminated),
                (b, MachineStatus::Terminated),
            ],
        )),
    ]);
    let done = f.refresh(&id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);
    let calls = f.provider.calls();
    assert!(
        calls.contains(&format!("read-ahead {id}"))
            && calls.contains(&format!("status {id} with read ahead for {id}")),
        "{calls:?}"
    );
    // Both machines gone: the next read of the finished request is answered from storage;
    // a read ahead that never finishes is dropped rather than awaited.
    f.refresh(&id).await;
    *f.provider.read_ahead.lock().unwrap() = Some(ReadAheadMode::Never);
    let before = f.provider.calls().len();
    let settled = tokio::time::timeout(std::time::Duration::from_secs(10), f.broker.refresh(&id))
        .await
        .expect("the refresh does not wait for a read it does not need")
        .unwrap()
        .unwrap();
    assert!(
        settled
            .machines
            .iter()
            .all(|m| m.status == MachineStatus::Terminated)
    );
    assert_eq!(
        f.provider.calls()[before..],
        [
            format!("read-ahead {id}"),
            format!("read-ahead {id} dropped")
        ]
    );
}

#[tokio::test]
async fn a_refresh_is_logged_while_the_request_is_unfinished_and_forgotten_after() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let id = view.request.request_id.clone();
    let minute = std::time::Duration::from_secs(60);
    assert!(!f.broker.refreshed_within(&id, minute), "not read yet");
    script_partial_then_fulfilled(&f, &view);
    f.refresh(&id).await;
    assert!(f.broker.refreshed_within(&id, minute));
    assert!(
        !f.broker
            .refreshed_within(&id, std::time::Duration::from_nanos(1)),
        "older than a nanosecond by now"
    );
    let done = f.refresh(&id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);
    assert!(
        !f.broker.refreshed_within(&id, minute),
        "a finished request is forgotten"
    );
}

/// A cluster that stops answering while an acquire creates is an outage to ride out, not a
/// failure: the request stays in progress, is not judged by its deadline, and the next status
/// read resumes it (creates are idempotent) once the cluster answers.
#[tokio::test]
async fn an_acquire_cut_off_by_the_cluster_is_resumed_by_the_next_status_read() {
    let f = fixture().await;
    *f.provider.acquire_error.lock().unwrap() =
        Some(ProviderError::Interrupted("connection refused".into()));
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    assert_eq!(view.request.status, RequestStatus::InProgress);
    let message = view.request.status_message.clone().unwrap();
    assert!(message.contains("resumes this acquire"), "{message}");
    assert!(view.machines.is_empty());
    // Long past its deadline, the first read resumes it instead of timing it out.
    f.advance(1_000);
    let resumed = f.refresh(&view.request.request_id).await;
    assert_eq!(
        f.provider
            .calls()
            .iter()
            .filter(|c| c.starts_with("acquire"))
            .count(),
        2,
        "the acquire ran again: {:?}",
        f.provider.calls()
    );
    assert_eq!(resumed.machines.len(), 2, "its machines are recorded now");
}

/// While another live process holds the claim (it is creating right now), a status read
/// neither resumes the acquire nor lets the deadline judge it.
#[tokio::test]
async fn an_acquire_still_being_created_elsewhere_is_left_to_its_creator() {
    let f = fixture().await;
    let mut request = test_support::request(RequestType::Acquire)
        .created((f.broker.clock)())
        .status(RequestStatus::InProgress)
        .deadline((f.broker.clock)())
        .build();
    f.insert_request(&mut request).await;
    let creator = f
        .broker
        .store
        .try_claim(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    f.advance(10);
    let view = f.refresh(&request.request_id).await;
    assert_eq!(
        view.request.status,
        RequestStatus::InProgress,
        "not timed out"
    );
    assert!(view.note.unwrap().contains("still creating"));
    assert!(f.provider.calls().is_empty(), "{:?}", f.provider.calls());
    drop(creator);
    let resumed = f.refresh(&request.request_id).await;
    assert_eq!(resumed.machines.len(), 1, "resumed once its creator let go");
}

#[tokio::test]
async fn a_failed_create_is_stored_as_failed_with_the_reason() {
    let f = fixture().await;
    *f.provider.acquire_error.lock().unwrap() = Some(ProviderError::Rejected(
        "pods is forbidden: exceeded quota".into(),
    ));
    let view = f.broker.request_machines("worker", 1).await.unwrap();
    assert_eq!(view.request.status, RequestStatus::Failed);
    assert_eq!(
        view.request.status_message.as_deref(),
        Some("pods is forbidden: exceeded quota")
    );
    let stored = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, RequestStatus::Failed);
}

#[rstest]
#[case::zero("worker", 0, "at least 1")]
#[case::over_per_request("unlimited", 11, "max_machines_per_request (10)")]
#[case::over_max_number("worker", 5, "at most 4 more")]
#[case::unknown_template(
    "nope",
    1,
    "available templates: worker, unlimited, broken, set, deploy"
)]
#[case::invalid_template("broken", 1, "namespace")]
#[case::refused_at_load("sneaky", 1, "may not override \"audit_high_risk_pod_fields\"")]
#[tokio::test]
async fn bad_requests_are_refused_before_anything_is_stored(
    #[case] template: &str,
    #[case] count: u32,
    #[case] needle: &str,
) {
    let f = fixture().await;
    let err = f
        .broker
        .request_machines(template, count)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
    assert_eq!(err.class(), ErrorClass::InvalidInput);
    assert_eq!(f.stored_requests().await, 0);
    assert!(f.provider.calls().is_empty());
}

#[tokio::test]
async fn a_template_the_provider_refuses_up_front_leaves_no_request_behind() {
    let f = fixture().await;
    *f.provider.preflight_error.lock().unwrap() = Some(ProviderError::Rejected(
        "request rejected before anything was created: privileged".into(),
    ));
    let err = f.broker.request_machines("worker", 1).await.unwrap_err();
    assert!(err.to_string().contains("privileged"), "{err}");
    assert_eq!(err.class(), ErrorClass::InvalidInput);
    assert_eq!(f.stored_requests().await, 0);
    assert!(f.provider.calls().is_empty(), "{:?}", f.provider.calls());
}

/// A template whose planning is slow (its Jinja renders up to the render timeout) holds no
/// async worker: on a one-thread runtime, another task still runs while the listing and an
/// acquire plan it.
#[tokio::test]
async fn a_slow_template_check_holds_no_async_worker() {
    let f = fixture().await;
    *f.provider.preflight_delay.lock().unwrap() = Some(std::time::Duration::from_millis(600));
    let started = std::time::Instant::now();
    let ticks = tokio::spawn(async move {
        let mut late = std::time::Duration::ZERO;
        for _ in 0..10 {
            let before = std::time::Instant::now();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            late = late.max(before.elapsed());
        }
        late
    });
    f.broker.servable_templates().await.unwrap();
    f.broker.request_machines("worker", 1).await.unwrap();
    let late = ticks.await.unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_millis(1200));
    assert!(
        late < std::time::Duration::from_millis(400),
        "a 20 ms sleep took {late:?}: the check blocked the runtime"
    );
}

/// An unfinished acquire reserves what it asked for until its machines are stored: a second
/// request cannot slip under maxNumber in between.
#[tokio::test]
async fn an_unfinished_acquire_reserves_its_count_against_max_number() {
    let f = fixture().await;
    let mut pending = test_support::request(RequestType::Acquire)
        .count(3)
        .created((f.broker.clock)())
        .status(RequestStatus::InProgress)
        .build();
    f.insert_request(&mut pending).await;
    let err = f.broker.request_machines("worker", 2).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("0 exist and unfinished requests will create 3 more"),
        "{err}"
    );
    f.broker.request_machines("worker", 1).await.unwrap();
}

#[tokio::test]
async fn live_machines_count_against_max_number() {
    let f = fixture().await;
    f.broker.request_machines("worker", 3).await.unwrap();
    let err = f.broker.request_machines("worker", 2).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("3 exist and unfinished requests will create 0 more, so at most 1 more"),
        "{err}"
    );
    f.broker.request_machines("worker", 1).await.unwrap();
}

#[tokio::test]
async fn a_missing_provider_is_reported_before_storing() {
    let f = fixture_without_provider().await;
    let err = f.broker.request_machines("worker", 1).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Provider);
    assert_eq!(f.stored_requests().await, 0);
}

fn by_name(name: &str) -> MachineKey {
    MachineKey {
        machine_id: None,
        name: Some(name.into()),
    }
}

#[tokio::test]
async fn a_return_naming_machines_only_by_name_works() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 2).await.unwrap();
    let name = acquire.machines[0].name.clone();
    let ret = f.return_machines(&[by_name(&name)]).await;
    assert_eq!(ret.request.request_type, RequestType::Return);
    assert_eq!(ret.request.status, RequestStatus::InProgress);
    assert_eq!(ret.machines.len(), 1);
    assert_eq!(
        ret.machines[0].return_request_id.as_ref(),
        Some(&ret.request.request_id)
    );
    assert_eq!(
        f.provider.calls().last().unwrap(),
        &format!("release {name}")
    );
    f.next_status(Verdict::Fulfilled, &[(&name, MachineStatus::Terminated)]);
    let done = f.refresh(&ret.request.request_id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);
    assert_eq!(done.machines[0].status, MachineStatus::Terminated);
}

#[tokio::test]
async fn a_return_of_machines_of_two_acquires_hands_each_its_own_acquires_record() {
    let f = fixture().await;
    let first = f.broker.request_machines("worker", 2).await.unwrap();
    let second = f.broker.request_machines("worker", 2).await.unwrap();
    let names: Vec<String> = [&second.machines[1], &first.machines[0], &second.machines[0]]
        .iter()
        .chain(&[&first.machines[1]])
        .map(|m| m.name.clone())
        .collect();
    let keys: Vec<MachineKey> = names.iter().map(|n| by_name(n)).collect();
    let ret = f.return_machines(&keys).await;
    f.broker.refresh(&ret.request.request_id).await.unwrap();
    let calls = f.provider.machine_records.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "one release, one status read: {calls:?}");
    for machines in calls {
        let mut seen: Vec<&str> = machines.iter().map(|(id, _)| id.as_str()).collect();
        seen.sort();
        let mut wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        wanted.sort();
        assert_eq!(seen, wanted);
        for (id, record) in &machines {
            let pods = record["pod_names"].as_array().unwrap();
            assert!(
                pods.iter().any(|p| p == id.as_str()),
                "{id} was handed another acquire's record: {record}"
            );
        }
    }
}

#[tokio::test]
async fn unknown_names_refuse_or_are_reported_once() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let known = by_name(&acquire.machines[0].name);
    let err = f
        .broker
        .return_machines(&[known.clone(), by_name("ghost")], UnknownNames::Refuse)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ghost"), "{err}");
    assert_eq!(
        f.stored_requests().await,
        1,
        "nothing stored for a refused return"
    );
    let only_ghosts = f
        .broker
        .return_machines(&[by_name("ghost")], UnknownNames::ReportAsFailed)
        .await;
    assert!(
        only_ghosts.is_err(),
        "a return of nothing orb manages is refused"
    );
    let ret = f
        .broker
        .return_machines(&[known, by_name("ghost")], UnknownNames::ReportAsFailed)
        .await
        .unwrap();
    assert_eq!(ret.request.unknown_machines, vec!["ghost".to_string()]);
}

#[tokio::test]
async fn a_second_return_of_the_same_machine_is_refused() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let sel = by_name(&acquire.machines[0].name);
    f.return_machines(std::slice::from_ref(&sel)).await;
    let err = f
        .broker
        .return_machines(&[sel], UnknownNames::Refuse)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already being returned"), "{err}");
}

#[tokio::test]
async fn returning_machines_that_are_already_gone_still_asks_the_provider() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let id = acquire.machines[0].machine_id.clone();
    f.next_status(Verdict::InProgress, &[(&id, MachineStatus::Terminated)]);
    f.broker.refresh(&acquire.request.request_id).await.unwrap();
    let ret = f.return_machines(&[by_name(&id)]).await;
    // The provider is still asked: what orb saw gone may have left objects behind (a failed
    // Job of a lost host), and it answers "already gone" for the rest.
    assert_eq!(f.provider.calls().last().unwrap(), &format!("release {id}"));
    f.next_status(Verdict::Fulfilled, &[(&id, MachineStatus::Terminated)]);
    let done = f.refresh(&ret.request.request_id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);
}

#[tokio::test]
async fn a_failed_release_fails_the_return() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let id = acquire.machines[0].machine_id.clone();
    f.fail_release_of(&[&id], "forbidden");
    let ret = f.return_machines(&[by_name(&id)]).await;
    assert_eq!(ret.request.status, RequestStatus::Failed);
    assert_eq!(
        ret.machines[0].status_reason.as_deref(),
        Some("release failed: forbidden; the machine is free to be returned again")
    );
}

#[tokio::test]
async fn a_refused_release_fails_the_return_and_frees_the_machines_for_another_return() {
    let f = fixture().await;
    let (ids, selectors) = acquired(&f, 2).await;
    let refusal = "releasing ordinal 0 also needs ordinal 1 to go";
    *f.provider.release_error.lock().unwrap() = Some(ProviderError::Rejected(refusal.into()));

    let refused = f.return_machines(&selectors).await;
    assert_eq!(refused.request.status, RequestStatus::Failed);
    assert_eq!(refused.request.status_message.as_deref(), Some(refusal));
    assert!(
        refused
            .machines
            .iter()
            .all(|m| m.return_request_id.is_none())
    );
    let stored_request = f
        .broker
        .store
        .get_request(&refused.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored_request.status, RequestStatus::Failed);
    let stored = f.stored_machines(&ids).await;
    assert_eq!(stored.len(), 2);
    assert!(
        stored.iter().all(|m| m.return_request_id.is_none()),
        "a refused return must not leave machines marked as being returned: {stored:?}"
    );

    let again = f.return_machines(&selectors).await;
    assert_ne!(again.request.status, RequestStatus::Failed);
    assert!(
        again
            .machines
            .iter()
            .all(|m| m.return_request_id.as_ref() == Some(&again.request.request_id))
    );
}

fn cut_off_next_release(f: &Fixture) {
    *f.provider.release_error.lock().unwrap() = Some(ProviderError::Interrupted(
        "the Kubernetes API did not answer".into(),
    ));
}

/// An acquire of `count` workers: its machine ids, and selectors naming them.
async fn acquired(f: &Fixture, count: u32) -> (Vec<String>, Vec<MachineKey>) {
    let acquire = f.broker.request_machines("worker", count).await.unwrap();
    let ids: Vec<String> = acquire
        .machines
        .iter()
        .map(|m| m.machine_id.clone())
        .collect();
    let selectors = ids.iter().map(|id| by_name(id)).collect();
    (ids, selectors)
}

fn releases(f: &Fixture) -> usize {
    f.provider
        .calls()
        .iter()
        .filter(|c| c.starts_with("release "))
        .count()
}

#[tokio::test]
async fn a_release_cut_off_by_an_outage_is_resumed_by_the_next_status_read() {
    let f = fixture().await;
    let (ids, selectors) = acquired(&f, 2).await;
    cut_off_next_release(&f);

    let cut = f.return_machines(&selectors).await;
    // Not failed: in progress, holding its machines, nothing recorded.
    assert_eq!(cut.request.status, RequestStatus::InProgress);
    assert!(is_unrecorded_return(&cut.request));
    let message = cut.request.status_message.clone().unwrap_or_default();
    assert!(
        message.contains("did not answer") && message.contains("resumes this return"),
        "{message}"
    );
    let stored = f.stored_machines(&ids).await;
    assert!(
        stored
            .iter()
            .all(|m| m.return_request_id.as_ref() == Some(&cut.request.request_id)),
        "{stored:?}"
    );
    assert!(!f.provider.calls().iter().any(|c| c.starts_with("abandon ")));

    // Still out on the first read: the release is tried again and the read says why.
    cut_off_next_release(&f);
    let still = f.refresh(&cut.request.request_id).await;
    assert_eq!(still.request.status, RequestStatus::InProgress);
    assert!(still.note.unwrap_or_default().contains("did not answer"));
    assert_eq!(releases(&f), 2);

    // Back: the next read releases, records it and follows the machines as usual.
    f.next_status(
        Verdict::Fulfilled,
        &[
            (&ids[0], MachineStatus::Terminated),
            (&ids[1], MachineStatus::Terminated),
        ],
    );
    let done = f.refresh(&cut.request.request_id).await;
    assert_eq!(releases(&f), 3);
    assert!(!is_unrecorded_return(&done.request));
    assert_eq!(done.request.status, RequestStatus::Complete);
    // A recorded return is never released again.
    f.broker.refresh(&cut.request.request_id).await.unwrap();
    assert_eq!(releases(&f), 3);
}

#[tokio::test]
async fn a_return_the_cluster_keeps_cut_off_ends_failed_at_its_deadline_and_frees_its_machines() {
    let f = fixture().await;
    let (ids, selectors) = acquired(&f, 2).await;
    cut_off_next_release(&f);
    let cut = f.return_machines(&selectors).await;
    f.advance(301);
    let ended = f.refresh(&cut.request.request_id).await;
    assert_eq!(ended.request.status, RequestStatus::Failed);
    let message = ended.request.status_message.clone().unwrap_or_default();
    assert!(
        message.contains("before the return's deadline") && message.contains("did not answer"),
        "{message}"
    );
    // No release past the deadline; the marks are undone and the machines are free.
    assert_eq!(releases(&f), 1);
    assert!(
        f.provider.calls().iter().any(|c| c.starts_with("abandon ")),
        "{:?}",
        f.provider.calls()
    );
    let stored = f.stored_machines(&ids).await;
    assert!(
        stored.iter().all(|m| m.return_request_id.is_none()),
        "{stored:?}"
    );
    let again = f.return_machines(&selectors).await;
    assert_eq!(again.request.status, RequestStatus::InProgress);
    assert_eq!(again.machines.len(), 2);
}

#[tokio::test]
async fn a_return_left_unrecorded_is_resumed_only_once_its_claim_is_free() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let id = acquire.machines[0].machine_id.clone();
    // The process releasing it dies before recording: the stored return is what is left.
    cut_off_next_release(&f);
    let ret = f.return_machines(&[by_name(&id)]).await;
    let return_id = ret.request.request_id.clone();

    // While another process holds the claim, a read leaves the release to it.
    let held = f.broker.store.try_claim(&return_id).await.unwrap().unwrap();
    let waiting = f.refresh(&return_id).await;
    assert!(is_unrecorded_return(&waiting.request));
    assert!(
        waiting
            .note
            .unwrap_or_default()
            .contains("in another orb process")
    );
    assert!(
        f.broker
            .resume_interrupted_return(&return_id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(releases(&f), 1);

    // Its holder gone, the next read resumes it at once: no wait for the deadline.
    drop(held);
    let resumed = f.refresh(&return_id).await;
    assert_eq!(releases(&f), 2);
    assert!(!is_unrecorded_return(&resumed.request));
    assert_eq!(resumed.request.status, RequestStatus::InProgress);
    assert_eq!(
        resumed.machines[0].return_request_id.as_ref(),
        Some(&return_id)
    );
    assert!(
        f.broker
            .unfinished_returns()
            .await
            .unwrap()
            .iter()
            .any(|r| r.request_id == return_id)
    );
}

#[tokio::test]
async fn without_a_provider_the_deadline_still_settles_requests() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let offline = fixture_without_provider().await;
    // Same database, a broker that cannot reach the provider.
    let broker = Broker {
        store: f.broker.store.clone(),
        provider: offline.broker.provider,
        settings: f.broker.settings.clone(),
        catalog: crate::catalog::CatalogCell::new(catalog()),
        clock: f.broker.clock.clone(),
        refreshed: Default::default(),
    };
    let early = broker
        .refresh(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(early.request.status, RequestStatus::InProgress);
    assert!(early.note.unwrap().contains("no cluster in this test"));
    f.advance(301);
    let late = broker
        .refresh(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(late.request.status, RequestStatus::Timeout);
    assert_eq!(
        late.request.status_message.as_deref(),
        Some("Deadline exceeded: 0/2 fulfilled")
    );
}

/// A cancel's answer: the request cancelled and every machine of it terminated.
fn assert_cancelled_whole(view: &RequestView) {
    assert_eq!(view.request.status, RequestStatus::Cancelled);
    assert!(
        view.machines
            .iter()
            .all(|m| m.status == MachineStatus::Terminated),
        "{:?}",
        view.machines
    );
}

#[tokio::test]
async fn cancel_deletes_and_closes_the_request() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let cancelled = f.broker.cancel(&view.request.request_id).await.unwrap();
    assert_cancelled_whole(&cancelled);
    let again = f.broker.cancel(&view.request.request_id).await.unwrap_err();
    assert!(
        again
            .to_string()
            .contains("already cancelled and nothing of it is left"),
        "{again}"
    );
    let unknown = f
        .broker
        .cancel(&RequestId::new_acquire())
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("not found"), "{unknown}");
}

#[tokio::test]
async fn a_write_made_while_a_cancel_deletes_does_not_fail_the_cancel() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    *f.provider.cancel_writer.lock().unwrap() = Some(f.broker.store.clone());
    let cancelled = f.broker.cancel(&view.request.request_id).await.unwrap();
    assert_cancelled_whole(&cancelled);
    let calls = f.provider.calls();
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("cancel ")).count(),
        1,
        "the deletes are not repeated: {calls:?}"
    );
}

#[tokio::test]
async fn a_refresh_while_a_cancel_deletes_answers_from_storage() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let id = view.request.request_id.clone();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    *f.provider.cancel_gate.lock().unwrap() = Some((started_tx, release_rx));
    // Were the provider asked, it would report every machine gone.
    f.next_status(
        Verdict::Failed {
            reason: "all machines lost".into(),
        },
        &[],
    );
    let meanwhile = async {
        started.await.unwrap();
        let during = f.refresh(&id).await;
        release.send(()).unwrap();
        during
    };
    let (cancelled, during) = tokio::join!(f.broker.cancel(&id), meanwhile);
    assert_eq!(during.request.status, view.request.status);
    assert!(
        !f.provider.calls().contains(&format!("status {id}")),
        "the provider was asked during the cancel: {:?}",
        f.provider.calls()
    );
    assert_eq!(cancelled.unwrap().request.status, RequestStatus::Cancelled);
    // Once the cancel is over, refreshes ask again (a finished request from storage).
    assert_eq!(
        f.refresh(&id).await.request.status,
        RequestStatus::Cancelled
    );
}

#[tokio::test]
async fn a_report_from_an_out_of_date_view_is_applied_and_says_so() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 1).await.unwrap();
    let id = view.machines[0].machine_id.clone();
    let mut stale = report(Verdict::Fulfilled, &[(&id, MachineStatus::Running)]);
    stale.note = Some("served from a watch failing for 12 s".into());
    f.provider.statuses.lock().unwrap().push_back(Ok(stale));
    let seen = f.refresh(&view.request.request_id).await;
    assert_eq!(seen.request.status, RequestStatus::Complete);
    assert_eq!(
        seen.note.as_deref(),
        Some("served from a watch failing for 12 s")
    );
    // The note is for that one reader: nothing of it is stored.
    let stored = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !stored
            .status_message
            .unwrap_or_default()
            .contains("watch failing"),
    );
}

#[tokio::test]
async fn reclaims_combine_stored_losses_and_provider_notices() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 3).await.unwrap();
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    // Machine 0 vanished (seen by a status poll), 1 is being evicted, 2 is returned by HF.
    let mut gone = orb_core::provider::MachineObservation::new(&ids[0], MachineStatus::Terminated);
    gone.launch_time = Some((f.broker.clock)());
    gone.status_reason = Some("pod deleted outside orb".into());
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Ok(orb_core::provider::StatusReport {
            verdict: Verdict::InProgress,
            fulfilled: 0,
            failed: 0,
            machines: vec![gone.into()],
            message: None,
            note: None,
        }));
    f.broker.refresh(&view.request.request_id).await.unwrap();
    f.return_machines(&[by_name(&ids[2])]).await;
    *f.provider.notices.lock().unwrap() = vec![
        ReclaimNotice {
            machine_id: ids[1].clone(),
            name: ids[1].clone(),
            grace_period_secs: 30,
            reason: "Evicted".into(),
        },
        ReclaimNotice {
            machine_id: ids[2].clone(),
            name: ids[2].clone(),
            grace_period_secs: 0,
            reason: "returned by HF, must not be asked about".into(),
        },
    ];
    let (reclaims, note) = f.broker.reclaims(&[]).await.unwrap();
    assert_eq!(note, None);
    let summary: Vec<(String, u64)> = reclaims
        .iter()
        .map(|r| (r.machine_id.clone(), r.grace_period_secs))
        .collect();
    let mut expected = vec![(ids[0].clone(), 0), (ids[1].clone(), 30)];
    expected.sort();
    assert_eq!(summary, expected);
    assert!(f.provider.calls().last().unwrap().starts_with("reclaims "));
    assert!(!f.provider.calls().last().unwrap().contains(&ids[2]));
}

/// Stores `statuses` for the request's machines through one scripted status read.
async fn observe(f: &Fixture, view: &RequestView, verdict: Verdict, statuses: &[MachineStatus]) {
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    let pairs: Vec<(&str, MachineStatus)> = ids
        .iter()
        .map(String::as_str)
        .zip(statuses.iter().copied())
        .collect();
    f.next_status(verdict, &pairs);
    f.broker.refresh(&view.request.request_id).await.unwrap();
}

#[tokio::test]
async fn a_failed_machine_is_returned_like_any_other() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    observe(
        &f,
        &view,
        Verdict::Partial { is_final: true },
        &[MachineStatus::Failed, MachineStatus::Running],
    )
    .await;
    let failed = &view.machines[0].machine_id;
    let ret = f.return_machines(&[by_name(failed)]).await;
    assert_eq!(ret.request.status, RequestStatus::InProgress);
    assert_eq!(
        f.provider.calls().last().unwrap(),
        &format!("release {failed}"),
        "the failed machine's objects are released, not skipped as gone"
    );
    // By request too: the failed machine is part of what `--request-id` returns.
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    observe(
        &f,
        &view,
        Verdict::Partial { is_final: true },
        &[MachineStatus::Failed, MachineStatus::Running],
    )
    .await;
    let ret = f
        .broker
        .return_request_machines(&view.request.request_id)
        .await
        .unwrap();
    assert_eq!(ret.machines.len(), 2);
}

#[tokio::test]
async fn a_failed_machine_counts_against_max_number_until_it_is_gone() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 4).await.unwrap();
    use MachineStatus::{Failed, Running, Terminated};
    observe(
        &f,
        &view,
        Verdict::Partial { is_final: true },
        &[Failed, Running, Running, Running],
    )
    .await;
    let refused = f.broker.request_machines("worker", 1).await.unwrap_err();
    assert!(refused.to_string().contains("4 exist"), "{refused}");
    observe(
        &f,
        &view,
        Verdict::Partial { is_final: true },
        &[Terminated, Running, Running, Running],
    )
    .await;
    f.broker.request_machines("worker", 1).await.unwrap();
}

#[tokio::test]
async fn a_finished_acquire_with_objects_left_can_be_cancelled_and_keeps_its_status() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    observe(
        &f,
        &view,
        Verdict::Failed {
            reason: "image pull".into(),
        },
        &[MachineStatus::Failed, MachineStatus::Failed],
    )
    .await;
    let cancelled = f.broker.cancel(&view.request.request_id).await.unwrap();
    assert_eq!(cancelled.request.status, RequestStatus::Failed);
    let message = cancelled.request.status_message.clone().unwrap();
    assert!(
        message.contains("after it ended: Cancelled: deleted 2"),
        "{message}"
    );
    assert!(
        cancelled
            .machines
            .iter()
            .all(|m| m.status == MachineStatus::Terminated)
    );
}

#[tokio::test]
async fn a_return_past_its_deadline_frees_its_machines_and_clears_what_it_left() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    observe(
        &f,
        &view,
        Verdict::Fulfilled,
        &[MachineStatus::Running, MachineStatus::Running],
    )
    .await;
    let id = view.machines[0].machine_id.clone();
    let ret = f.return_machines(&[by_name(&id)]).await;
    // The machine never goes; the return reaches its deadline.
    f.advance(301);
    let mut still_there = report(Verdict::InProgress, &[(&id, MachineStatus::Running)]);
    still_there.fulfilled = 0;
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Ok(still_there));
    let ended = f.refresh(&ret.request.request_id).await;
    assert_eq!(ended.request.status, RequestStatus::Timeout);
    assert_eq!(ended.machines[0].return_request_id, None);
    let reason = ended.machines[0].status_reason.clone().unwrap();
    assert!(reason.contains("free to be returned again"), "{reason}");
    assert!(
        f.provider.calls().contains(&format!("abandon {id}")),
        "{:?}",
        f.provider.calls()
    );
    // ... so a new return is accepted.
    let again = f.return_machines(&[by_name(&id)]).await;
    assert_eq!(again.request.status, RequestStatus::InProgress);
}

#[tokio::test]
async fn machines_a_release_takes_along_join_the_return_and_an_ended_acquire_is_closed() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 3).await.unwrap();
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    // Like a Job: returning one host deletes the whole Job and ends the acquire.
    *f.provider.also_released.lock().unwrap() = vec![ids[1].clone(), ids[2].clone()];
    *f.provider.ended.lock().unwrap() = vec![orb_core::provider::EndedAcquire {
        request_id: view.request.request_id.to_string(),
        reason: "the Job was returned".into(),
    }];
    let ret = f.return_machines(&[by_name(&ids[0])]).await;
    let mut covered = ret.request.machine_ids.clone();
    covered.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(covered, all, "every host of the Job is in the return");
    assert_eq!(ret.request.requested_count, 3);
    assert!(
        ret.machines
            .iter()
            .all(|m| m.return_request_id.as_ref() == Some(&ret.request.request_id))
    );
    let acquire = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(acquire.status, RequestStatus::Cancelled);
    let message = acquire.status_message.unwrap();
    assert!(message.contains("the Job was returned"), "{message}");
}

#[tokio::test]
async fn reclaims_report_failed_machines_and_refresh_finished_requests_first() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    observe(
        &f,
        &view,
        Verdict::Fulfilled,
        &[MachineStatus::Running, MachineStatus::Running],
    )
    .await;
    // The request is complete; since then one pod failed. getReturnRequests sees it.
    let ids: Vec<String> = view.machines.iter().map(|m| m.machine_id.clone()).collect();
    let mut failed = orb_core::provider::MachineObservation::new(&ids[0], MachineStatus::Failed);
    failed.status_reason = Some("Error: container orb exited with code 1".into());
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Ok(orb_core::provider::StatusReport {
            verdict: Verdict::Fulfilled,
            fulfilled: 1,
            failed: 1,
            machines: vec![
                failed.into(),
                orb_core::provider::MachineObservation::new(&ids[1], MachineStatus::Running).into(),
            ],
            message: None,
            note: None,
        }));
    let (reclaims, _) = f.broker.reclaims(&[]).await.unwrap();
    assert_eq!(reclaims.len(), 1, "{reclaims:?}");
    assert_eq!(reclaims[0].machine_id, ids[0]);
    assert_eq!(reclaims[0].grace_period_secs, 0);
    assert!(reclaims[0].reason.contains("exited with code 1"));
    let stored = f
        .broker
        .store
        .get_request(&view.request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.status,
        RequestStatus::Complete,
        "the request stays complete"
    );
}

/// getReturnRequests refreshes a finished StatefulSet acquire whose hosts were all recorded
/// gone before it reports them: the controller recreated them meanwhile, so nothing is
/// reclaimed; once a read sees them gone, they are.
#[tokio::test]
async fn reclaims_do_not_report_statefulset_hosts_that_came_back() {
    let f = fixture().await;
    let then = [MachineStatus::Running, MachineStatus::Terminated];
    let gone = finished_then_all_gone(&f, "set", &then).await;
    let [a, b] = [&gone.machines[0].machine_id, &gone.machines[1].machine_id];
    let keys = [MachineKey::id(a.clone()), MachineKey::id(b.clone())];
    let (reclaims, _) = f.broker.reclaims(&keys).await.unwrap();
    assert!(reclaims.is_empty(), "the hosts are back: {reclaims:?}");
    let (reclaims, _) = f.broker.reclaims(&keys).await.unwrap();
    assert_eq!(reclaims.len(), 2, "gone again: {reclaims:?}");
}

/// A quick pace, so the watch tests poll every few milliseconds.
fn quick() -> crate::watch::Pace {
    crate::watch::Pace {
        first: std::time::Duration::from_millis(5),
        max: std::time::Duration::from_millis(20),
    }
}

#[tokio::test]
async fn a_watch_reports_each_change_once_and_ends_after_the_terminal_status() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 2).await.unwrap();
    let id = view.request.request_id.clone();
    let [a, b] = [&view.machines[0].machine_id, &view.machines[1].machine_id];
    let partial = report(
        Verdict::Partial { is_final: false },
        &[(a, MachineStatus::Running), (b, MachineStatus::Pending)],
    );
    f.provider.statuses.lock().unwrap().extend([
        Ok(partial.clone()),
        // Nothing changed: no report, the watch keeps polling.
        Ok(partial),
        Ok(report(
            Verdict::Fulfilled,
            &[(a, MachineStatus::Running), (b, MachineStatus::Running)],
        )),
    ]);
    let mut watch = crate::watch::Watch::new(id.clone(), quick(), Some(view));
    let mut seen = Vec::new();
    while let Some(next) = watch.next(&f.broker).await {
        let next = next.unwrap();
        seen.push((next.request.status, next.request.fulfilled_count));
    }
    assert_eq!(
        seen,
        vec![
            (RequestStatus::InProgress, 0),
            (RequestStatus::PartialPending, 1),
            (RequestStatus::Complete, 2),
        ]
    );
    let polls = f
        .provider
        .calls()
        .iter()
        .filter(|c| **c == format!("status {id}"))
        .count();
    assert_eq!(polls, 3, "{:?}", f.provider.calls());
    assert!(watch.next(&f.broker).await.is_none(), "ended for good");
}

#[tokio::test]
async fn a_watch_of_an_unknown_request_ends_with_gone() {
    let f = fixture().await;
    let id = RequestId::new_acquire();
    let mut watch = crate::watch::Watch::new(id.clone(), quick(), None);
    match watch.next(&f.broker).await {
        Some(Err(BrokerError::UnknownRequest(gone))) => assert_eq!(gone, id.to_string()),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(watch.next(&f.broker).await.is_none());
}

#[tokio::test]
async fn a_watch_reports_a_status_the_provider_could_not_answer_with_its_note() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 1).await.unwrap();
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(Err(ProviderError::Forbidden("forbidden: pods".into())));
    let mut watch = crate::watch::Watch::new(view.request.request_id.clone(), quick(), None);
    let first = watch.next(&f.broker).await.unwrap();
    // A status read the provider cannot answer is not an error of the read: the stored view
    // comes back with a note saying why, and the watch goes on.
    let view = first.unwrap();
    assert!(
        view.note
            .as_deref()
            .is_some_and(|n| n.contains("forbidden")),
        "{view:?}"
    );
    assert!(!view.request.status.is_terminal());
}

#[test]
fn pace_starts_at_a_quarter_of_the_ceiling_and_never_below_100_ms() {
    use crate::watch::Pace;
    use std::time::Duration;
    let p = Pace::up_to(Duration::from_secs(2));
    assert_eq!(p.first, Duration::from_millis(500));
    assert_eq!(p.max, Duration::from_secs(2));
    assert_eq!(
        Pace::up_to(Duration::from_millis(200)).first,
        Duration::from_millis(100)
    );
    assert_eq!(
        Pace::up_to(Duration::from_millis(50)).first,
        Duration::from_millis(50)
    );
}

#[tokio::test]
async fn statuses_answer_every_id_in_order_and_set_unknown_ones_apart() {
    let f = fixture().await;
    let view = f.broker.request_machines("worker", 1).await.unwrap();
    let known = view.request.request_id.to_string();
    let missing = RequestId::new_acquire().to_string();
    let ids = vec![missing.clone(), known.clone(), "not-an-id".to_string()];
    let found = f.broker.statuses(&ids).await.unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(found[0], crate::Lookup::Unknown(missing));
    match &found[1] {
        crate::Lookup::Found(v) => assert_eq!(v.request.request_id.to_string(), known),
        other => panic!("expected the request, got {other:?}"),
    }
    assert_eq!(found[2], crate::Lookup::Unknown("not-an-id".into()));
}

#[tokio::test]
async fn a_return_by_name_takes_machine_ids_or_host_names_and_refuses_strangers() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 2).await.unwrap();
    let by_id = acquire.machines[0].machine_id.clone();
    let by_host = acquire.machines[1].name.clone();
    let err = f
        .broker
        .return_named(&[by_id.clone(), "ghost".into()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ghost"), "{err}");
    assert_eq!(
        f.stored_requests().await,
        1,
        "nothing stored for a refused return"
    );
    let ret = f.broker.return_named(&[by_id, by_host]).await.unwrap();
    assert_eq!(ret.request.request_type, RequestType::Return);
    assert_eq!(ret.machines.len(), 2);
}

#[rstest]
#[case(ProviderError::Rejected("audit".into()), ErrorClass::InvalidInput)]
#[case(ProviderError::Conflict("taken".into()), ErrorClass::InvalidInput)]
#[case(ProviderError::Forbidden("rbac".into()), ErrorClass::Provider)]
#[case(ProviderError::Unavailable("quota".into()), ErrorClass::Provider)]
#[case(ProviderError::Interrupted("no answer".into()), ErrorClass::Provider)]
#[case(ProviderError::Misconfigured("no kubeconfig".into()), ErrorClass::Provider)]
fn provider_errors_keep_their_kind_up_to_the_doors(
    #[case] err: ProviderError,
    #[case] class: ErrorClass,
) {
    assert_eq!(BrokerError::Provider(err).class(), class);
}

/// The life of a machine to its purge: refused while it runs and while its return is under
/// way, allowed once the return has finished; the requests go afterwards, by purge or by a
/// cleanup that measures age on the broker's clock.
#[tokio::test]
async fn records_can_be_purged_once_nothing_needs_them() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("worker", 1).await.unwrap();
    let acquire_id = acquire.request.request_id.clone();
    let id = acquire.machines[0].machine_id.clone();
    let refused = f.broker.purge_request(&acquire_id).await.unwrap_err();
    assert!(
        matches!(&refused, BrokerError::PurgeRefused(t) if t.contains("still in_progress") && t.contains("cancel it")),
        "{refused}"
    );
    f.next_status(Verdict::Fulfilled, &[(&id, MachineStatus::Running)]);
    f.broker.refresh(&acquire_id).await.unwrap();
    let refused = f.broker.purge_machine(&id).await.unwrap_err();
    assert!(refused.to_string().contains("return it first"), "{refused}");
    let ret = f.return_machines(&[by_name(&id)]).await;
    assert!(
        f.broker
            .purge_request(&ret.request.request_id)
            .await
            .is_err()
    );
    f.next_status(Verdict::Fulfilled, &[(&id, MachineStatus::Terminated)]);
    let done = f.refresh(&ret.request.request_id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);

    let purged = f.broker.purge_machine(&id).await.unwrap();
    assert_eq!(purged.machine_id, id);
    assert!(matches!(
        f.broker.purge_machine(&id).await.unwrap_err(),
        BrokerError::UnknownMachine(_)
    ));
    assert!(
        f.broker
            .stored_view(&acquire_id)
            .await
            .unwrap()
            .unwrap()
            .machines
            .is_empty()
    );

    // Too young for a day-old cutoff; a dry run an hour later counts both, the real run
    // removes both.
    let ask = |secs, dry_run| purge::CleanupAsk {
        older_than: jiff::SignedDuration::from_secs(secs),
        statuses: vec![],
        dry_run,
    };
    let none = f.broker.cleanup(&ask(86_400, false)).await.unwrap();
    assert!(none.removed.request_ids.is_empty(), "{none:?}");
    f.advance(3_600);
    let dry = f.broker.cleanup(&ask(60, true)).await.unwrap();
    assert_eq!(dry.removed.request_ids.len(), 2, "{dry:?}");
    assert_eq!(f.stored_requests().await, 2, "a dry run removes nothing");
    let real = f.broker.cleanup(&ask(60, false)).await.unwrap();
    assert_eq!(real.removed, dry.removed);
    assert_eq!(f.stored_requests().await, 0);

    let bad = purge::CleanupAsk {
        statuses: vec![RequestStatus::Acquiring],
        ..ask(60, false)
    };
    assert!(matches!(
        f.broker.cleanup(&bad).await.unwrap_err(),
        BrokerError::InvalidCleanup(t) if t.contains("acquiring is not finished")
    ));
}

#[tokio::test]
async fn the_gc_reads_machines_of_finished_requests_only() {
    let f = fixture().await;
    let open = f.broker.request_machines("worker", 2).await.unwrap();
    let done = f.broker.request_machines("worker", 2).await.unwrap();
    script_partial_then_fulfilled(&f, &done);
    for _ in 0..2 {
        f.broker.refresh(&done.request.request_id).await.unwrap();
    }
    let ids = [
        open.request.request_id.to_string(),
        done.request.request_id.to_string(),
        "req-00000000-0000-0000-0000-000000000000".to_string(),
        "not an id".to_string(),
    ];
    let found = f.broker.stored_requests_for_gc(ids).await.unwrap();
    let open_id = open.request.request_id.to_string();
    let done_id = done.request.request_id.to_string();
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        {
            let mut k = vec![&open_id, &done_id];
            k.sort();
            k
        },
        "unknown and malformed ids are left out"
    );
    let (request, machines) = &found[&done_id];
    assert_eq!(request.status, RequestStatus::Complete);
    assert_eq!(
        machines.len(),
        2,
        "a finished request's machines decide its objects"
    );
    let (request, machines) = &found[&open_id];
    assert_eq!(request.status, RequestStatus::InProgress);
    assert!(
        machines.is_empty(),
        "an unfinished request owns all its objects; its machines are not read"
    );
}
