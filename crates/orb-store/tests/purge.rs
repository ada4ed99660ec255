//! Purges and cleanups, on SQLite always and on PostgreSQL when `ORB_TEST_POSTGRES_URL` names a
//! server: what may go goes whole, what may not stays untouched, a dry run commits nothing,
//! and a writer racing a purge never loses a live record. Fresh ids (and a cutoff only this
//! run's rows meet) keep a shared PostgreSQL database reusable.

mod support;

use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::test_support::{self, at};
use orb_store::{
    CleanupFilter, MachineFilter, PurgeBlocker, PurgeOutcome, Purged, Store, StoreError,
};

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

fn acquire(status: RequestStatus, finished: i64) -> Request {
    let mut r = test_support::request(RequestType::Acquire)
        .template(&unique("tpl"))
        .status(status)
        .created(at(finished - 10))
        .build();
    if status.is_terminal() {
        r.completed_at = Some(at(finished));
    }
    r
}

fn machine(of: &Request, status: MachineStatus) -> Machine {
    test_support::machine(&unique("m"))
        .of(of)
        .status(status)
        .build()
}

async fn stored(store: &Store, request: &mut Request, machines: &mut [Machine]) {
    store.insert_request(request, machines).await.unwrap();
}

async fn machines_of(store: &Store, id: &RequestId) -> Vec<Machine> {
    store
        .list_machines(&MachineFilter {
            request_id: Some(id.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
}

async fn machine_purges(store: &Store) {
    let mut done = acquire(RequestStatus::Complete, 0);
    let mut ms = vec![
        machine(&done, MachineStatus::Terminated),
        machine(&done, MachineStatus::Running),
        machine(&done, MachineStatus::Failed),
    ];
    stored(store, &mut done, &mut ms).await;

    let purged = store.purge_machine(&ms[0].machine_id).await.unwrap();
    assert_eq!(
        purged,
        Some(PurgeOutcome::Purged(Purged {
            request_ids: vec![],
            machine_ids: vec![ms[0].machine_id.clone()],
        }))
    );
    for live in &ms[1..] {
        match store.purge_machine(&live.machine_id).await.unwrap() {
            Some(PurgeOutcome::Refused(blockers)) => assert_eq!(
                blockers,
                vec![PurgeBlocker::LiveMachine {
                    machine_id: live.machine_id.clone(),
                    status: live.status
                }]
            ),
            other => panic!("a live machine must stay, got {other:?}"),
        }
    }
    let left: Vec<String> = machines_of(store, &done.request_id)
        .await
        .into_iter()
        .map(|m| m.machine_id)
        .collect();
    let mut live: Vec<String> = ms[1..].iter().map(|m| m.machine_id.clone()).collect();
    live.sort();
    assert_eq!(left, live, "only the dead machine went");
    assert_eq!(store.purge_machine(&unique("nobody")).await.unwrap(), None);

    // A dead machine of an acquire still running, and one a return in progress still holds.
    let mut running = acquire(RequestStatus::InProgress, 0);
    let mut gone = vec![machine(&running, MachineStatus::Terminated)];
    stored(store, &mut running, &mut gone).await;
    assert!(matches!(
        store.purge_machine(&gone[0].machine_id).await.unwrap(),
        Some(PurgeOutcome::Refused(b)) if matches!(&b[..], [PurgeBlocker::HeldBy { request_id, .. }] if *request_id == running.request_id)
    ));
    let mut finished = acquire(RequestStatus::Complete, 0);
    let mut returned = vec![machine(&finished, MachineStatus::Returned)];
    stored(store, &mut finished, &mut returned).await;
    let mut ret = test_support::request(RequestType::Return)
        .status(RequestStatus::InProgress)
        .build();
    returned[0].return_request_id = Some(ret.request_id.clone());
    store.insert_request(&mut ret, &mut returned).await.unwrap();
    assert!(matches!(
        store.purge_machine(&returned[0].machine_id).await.unwrap(),
        Some(PurgeOutcome::Refused(b)) if matches!(&b[..], [PurgeBlocker::HeldBy { request_id, .. }] if *request_id == ret.request_id)
    ));
}

async fn request_purges(store: &Store) {
    // Finished, every machine gone: the request and its machines go together.
    let mut done = acquire(RequestStatus::Complete, 0);
    let mut ms = vec![
        machine(&done, MachineStatus::Terminated),
        machine(&done, MachineStatus::Returned),
    ];
    stored(store, &mut done, &mut ms).await;
    assert!(
        !store
            .request_events(&done.request_id)
            .await
            .unwrap()
            .is_empty()
    );
    match store.purge_request(&done.request_id).await.unwrap() {
        Some(PurgeOutcome::Purged(p)) => {
            assert_eq!(p.request_ids, vec![done.request_id.clone()]);
            assert_eq!(p.machine_ids.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.get_request(&done.request_id).await.unwrap(), None);
    assert!(machines_of(store, &done.request_id).await.is_empty());
    assert!(
        store
            .request_events(&done.request_id)
            .await
            .unwrap()
            .is_empty(),
        "its history goes with it"
    );
    assert_eq!(store.purge_request(&done.request_id).await.unwrap(), None);

    // Unfinished, or finished with one machine left: nothing at all goes.
    let mut running = acquire(RequestStatus::Acquiring, 0);
    stored(store, &mut running, &mut []).await;
    let mut partial = acquire(RequestStatus::Partial, 0);
    let mut pm = vec![
        machine(&partial, MachineStatus::Terminated),
        machine(&partial, MachineStatus::Pending),
    ];
    stored(store, &mut partial, &mut pm).await;
    for (request, blocker) in [
        (
            &running,
            PurgeBlocker::Unfinished {
                request_id: running.request_id.clone(),
                status: RequestStatus::Acquiring,
            },
        ),
        (
            &partial,
            PurgeBlocker::LiveMachine {
                machine_id: pm[1].machine_id.clone(),
                status: MachineStatus::Pending,
            },
        ),
    ] {
        assert_eq!(
            store.purge_request(&request.request_id).await.unwrap(),
            Some(PurgeOutcome::Refused(vec![blocker]))
        );
        assert_eq!(
            store
                .get_request(&request.request_id)
                .await
                .unwrap()
                .as_ref(),
            Some(request)
        );
    }
    pm.sort_by(|a, b| a.machine_id.cmp(&b.machine_id));
    assert_eq!(machines_of(store, &partial.request_id).await, pm);
    assert!(
        !store
            .request_events(&partial.request_id)
            .await
            .unwrap()
            .is_empty(),
        "a refused purge keeps the history"
    );

    // A process holding the claim is working on the request: it stays.
    let mut claimed = acquire(RequestStatus::Failed, 0);
    stored(store, &mut claimed, &mut []).await;
    let held = store.try_claim(&claimed.request_id).await.unwrap().unwrap();
    assert_eq!(
        store.purge_request(&claimed.request_id).await.unwrap(),
        Some(PurgeOutcome::Refused(vec![PurgeBlocker::Claimed {
            request_id: claimed.request_id.clone()
        }]))
    );
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(matches!(
        store.purge_request(&claimed.request_id).await.unwrap(),
        Some(PurgeOutcome::Purged(_))
    ));
}

/// A writer that read a record before the purge and writes after it gets a conflict: the
/// purge never silently drops a change, and the change never resurrects half a record.
async fn a_write_after_a_purge_conflicts(store: &Store) {
    let mut done = acquire(RequestStatus::Complete, 0);
    let mut ms = vec![machine(&done, MachineStatus::Terminated)];
    stored(store, &mut done, &mut ms).await;
    let mut stale = done.clone();
    assert!(matches!(
        store.purge_request(&done.request_id).await.unwrap(),
        Some(PurgeOutcome::Purged(_))
    ));
    stale.status_message = Some("late".into());
    let err = store.update_request(&mut stale, &mut ms).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(store.get_request(&done.request_id).await.unwrap(), None);
}

/// Rows of the cleanup test finish decades before any other test's, so its cutoff selects
/// only them, even on a PostgreSQL database other suites share.
const LONG_AGO: i64 = -1_000_000_000;

async fn cleanups(store: &Store) {
    let old_done = {
        let mut r = acquire(RequestStatus::Cancelled, LONG_AGO + 100);
        let mut m = vec![machine(&r, MachineStatus::Terminated)];
        stored(store, &mut r, &mut m).await;
        r
    };
    let old_live = {
        let mut r = acquire(RequestStatus::Cancelled, LONG_AGO + 100);
        let mut m = vec![machine(&r, MachineStatus::Running)];
        stored(store, &mut r, &mut m).await;
        r
    };
    let recent = {
        let mut r = acquire(RequestStatus::Cancelled, LONG_AGO + 10_000);
        stored(store, &mut r, &mut []).await;
        r
    };
    let filter = |dry_run| CleanupFilter {
        finished_before: at(LONG_AGO + 5_000),
        statuses: vec![RequestStatus::Cancelled],
        dry_run,
    };
    let dry = store.cleanup(&filter(true)).await.unwrap();
    assert!(dry.removed.request_ids.contains(&old_done.request_id));
    assert!(!dry.removed.request_ids.contains(&recent.request_id));
    assert!(dry.kept.iter().any(|(id, b)| *id == old_live.request_id
        && matches!(&b[..], [PurgeBlocker::LiveMachine { .. }])));
    assert!(
        store
            .get_request(&old_done.request_id)
            .await
            .unwrap()
            .is_some(),
        "a dry run removes nothing"
    );
    assert_eq!(machines_of(store, &old_done.request_id).await.len(), 1);

    let real = store.cleanup(&filter(false)).await.unwrap();
    assert_eq!(real, dry, "the real run does what the dry run said");
    assert_eq!(store.get_request(&old_done.request_id).await.unwrap(), None);
    assert!(machines_of(store, &old_done.request_id).await.is_empty());
    for kept in [&old_live, &recent] {
        assert!(store.get_request(&kept.request_id).await.unwrap().is_some());
    }
    // Unfinished statuses select nothing.
    let none = store
        .cleanup(&CleanupFilter {
            finished_before: at(1_000_000),
            statuses: vec![RequestStatus::InProgress],
            dry_run: false,
        })
        .await
        .unwrap();
    assert_eq!(none, Default::default());
}

async fn whole_suite(store: &Store) {
    machine_purges(store).await;
    request_purges(store).await;
    a_write_after_a_purge_conflicts(store).await;
    cleanups(store).await;
}

#[tokio::test]
async fn purge_suite_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite_file(&dir.path().join("orb.db"))
        .await
        .unwrap();
    whole_suite(&store).await;
}

/// Two processes on one database (two stores: their own connections and claims): a purge
/// in one decides on what the other committed, here a return of the machine just started.
async fn a_purge_sees_what_another_process_committed(a: Store, b: Store) {
    let mut done = acquire(RequestStatus::Complete, 0);
    let mut ms = vec![machine(&done, MachineStatus::Terminated)];
    stored(&a, &mut done, &mut ms).await;
    let mut ret = test_support::request(RequestType::Return)
        .status(RequestStatus::InProgress)
        .build();
    ms[0].return_request_id = Some(ret.request_id.clone());
    b.insert_request(&mut ret, &mut ms).await.unwrap();
    for outcome in [
        a.purge_request(&done.request_id).await.unwrap(),
        a.purge_machine(&ms[0].machine_id).await.unwrap(),
    ] {
        assert!(
            matches!(&outcome, Some(PurgeOutcome::Refused(b)) if matches!(&b[..], [PurgeBlocker::HeldBy { request_id, .. }] if *request_id == ret.request_id)),
            "{outcome:?}"
        );
    }
    assert_eq!(machines_of(&a, &done.request_id).await, ms);
    // The other process holds the finished return's claim: it is still writing it.
    ret.status = RequestStatus::Complete;
    b.update_request(&mut ret, &mut []).await.unwrap();
    let held = b.try_claim(&ret.request_id).await.unwrap().unwrap();
    assert_eq!(
        a.purge_request(&ret.request_id).await.unwrap(),
        Some(PurgeOutcome::Refused(vec![PurgeBlocker::Claimed {
            request_id: ret.request_id.clone()
        }]))
    );
    drop(held);
}

#[tokio::test]
async fn a_purge_sees_what_another_process_committed_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    let a = Store::open_sqlite_file(&path).await.unwrap();
    let b = Store::open_sqlite_file(&path).await.unwrap();
    a_purge_sees_what_another_process_committed(a, b).await;
}

#[tokio::test]
async fn a_purge_sees_what_another_process_committed_on_postgres() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let a = Store::open(&url).await.unwrap();
    let b = Store::open(&url).await.unwrap();
    a_purge_sees_what_another_process_committed(a, b).await;
}

#[tokio::test]
async fn purge_suite_on_postgres() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let store = Store::open(&url).await.unwrap();
    whole_suite(&store).await;
}
