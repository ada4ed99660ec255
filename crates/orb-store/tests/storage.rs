//! One storage suite, run on SQLite always and on PostgreSQL when `ORB_TEST_POSTGRES_URL`
//! names a server (the CI script starts one). Every scenario uses fresh ids, so a shared
//! PostgreSQL database can be reused between runs.

use std::collections::BTreeMap;

use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineList, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::shared::Shared;
use orb_core::test_support::{self, at};
use orb_store::{Backend, EventFilter, EventKind, MachineFilter, RequestFilter, Store, StoreError};
use serde_json::json;

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

fn acquire(template: &str, created: i64) -> Request {
    test_support::request(RequestType::Acquire)
        .template(template)
        .provider("kubernetes", "k8s")
        .count(2)
        .created(at(created))
        .kind(ProviderApi::Pod)
        .provider_data(json!({"namespace": "batch", "pod_names": ["a", "b"]}))
        .build()
}

fn machine(request: &Request, name: &str, status: MachineStatus) -> Machine {
    test_support::machine(name)
        .of(request)
        .resource(name)
        .uid(&unique("uid"))
        .status(status)
        .ip("10.1.2.3")
        .launched(at(5))
        .instance_type("k8s/Pod")
        .tag("team", "hpc")
        .provider_data(json!({"node": "n1"}))
        .created(at(1))
        .updated(at(2))
        .build()
}

async fn round_trip(store: &Store) {
    let template = unique("tpl");
    let mut request = acquire(&template, 0);
    request.started_at = Some(at(1));
    request.deadline_at = Some(at(301));
    let mut machines = vec![
        machine(&request, &unique("m"), MachineStatus::Running),
        machine(&request, &unique("m"), MachineStatus::Pending),
    ];
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    assert_eq!(request.version, 1);
    let loaded = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(loaded, request, "request round trip");
    let stored = store
        .list_machines(&MachineFilter {
            request_id: Some(request.request_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    machines.sort_by(|a, b| a.machine_id.cmp(&b.machine_id));
    assert_eq!(
        stored, machines,
        "machines round trip, ordered by creation then id"
    );
    assert_eq!(
        store.get_request(&RequestId::new_acquire()).await.unwrap(),
        None,
        "unknown ids read as None"
    );
}

async fn stale_writes_conflict_and_change_nothing(store: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    store.insert_request(&mut request, &mut []).await.unwrap();
    let mut first = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    let mut second = first.clone();
    first.status = RequestStatus::InProgress;
    store.update_request(&mut first, &mut []).await.unwrap();
    assert_eq!(first.version, 2);
    second.status = RequestStatus::Cancelled;
    let err = store
        .update_request(&mut second, &mut [])
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Conflict {
                entity: "request",
                expected_version: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("try again"));
    let now = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status, RequestStatus::InProgress);
    assert_eq!(now.version, 2);
}

async fn a_state_change_is_one_transaction(store: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    let name = unique("m");
    let mut machines = vec![machine(&request, &name, MachineStatus::Pending)];
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    // Another process moves the machine on.
    let mut other = machines.clone();
    other[0].status = MachineStatus::Running;
    store
        .update_request(&mut request.clone(), &mut [])
        .await
        .unwrap();
    let mut fresh = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    let mut theirs = other.clone();
    store.update_request(&mut fresh, &mut theirs).await.unwrap();
    // Our stale copy of the machine must sink the whole change, request included.
    let mut ours = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    ours.status = RequestStatus::Complete;
    machines[0].status = MachineStatus::Failed;
    let err = store
        .update_request(&mut ours, &mut machines)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: "machine",
                ..
            }
        ),
        "{err}"
    );
    let after = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.status, RequestStatus::Pending, "request rolled back");
    assert_eq!(after.version, 3);
    let stored = store
        .find_machines(std::slice::from_ref(&name))
        .await
        .unwrap();
    assert_eq!(stored[0].status, MachineStatus::Running);
}

async fn duplicates_are_refused_whole(store: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    store.insert_request(&mut request, &mut []).await.unwrap();
    let mut again = request.clone();
    again.version = 0;
    let orphan = unique("m");
    let mut machines = vec![machine(&again, &orphan, MachineStatus::Pending)];
    let err = store
        .insert_request(&mut again, &mut machines)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::AlreadyExists {
                entity: "request",
                ..
            }
        ),
        "{err}"
    );
    assert!(store.find_machines(&[orphan]).await.unwrap().is_empty());
}

async fn lookups_and_filters(store: &Store) {
    let template = unique("tpl");
    let mut older = acquire(&template, 10);
    older.status = RequestStatus::Complete;
    let mut newer = acquire(&template, 20);
    let live = unique("live");
    let gone = unique("gone");
    let failed = unique("failed");
    let mut machines = vec![
        machine(&older, &live, MachineStatus::Running),
        machine(&older, &gone, MachineStatus::Terminated),
        // A failed pod is still in the cluster: it counts as live until it is seen gone.
        machine(&older, &failed, MachineStatus::Failed),
    ];
    machines[0].name = format!("{live}.host");
    store
        .insert_request(&mut older, &mut machines)
        .await
        .unwrap();
    store.insert_request(&mut newer, &mut []).await.unwrap();
    let mut ret = test_support::request(RequestType::Return)
        .no_template()
        .provider("kubernetes", "k8s")
        .created(at(30))
        .machine_ids([live.clone()])
        .build();
    machines[0].return_request_id = Some(ret.request_id.clone());
    let mut touched = vec![machines[0].clone()];
    store.insert_request(&mut ret, &mut touched).await.unwrap();

    let listed = store
        .list_requests(&RequestFilter {
            template_id: Some(template.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = listed.iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(
        ids,
        vec![newer.request_id.clone(), older.request_id.clone()],
        "newest first"
    );
    let complete = store
        .list_requests(&RequestFilter {
            template_id: Some(template.clone()),
            statuses: vec![RequestStatus::Complete, RequestStatus::Failed],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(complete.len(), 1);
    let returns = store
        .list_requests(&RequestFilter {
            request_type: Some(RequestType::Return),
            limit: Some(500),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(returns.iter().any(|r| r.request_id == ret.request_id));
    assert!(
        returns
            .iter()
            .all(|r| r.request_type == RequestType::Return)
    );

    let by_name = store
        .find_machines(&[format!("{live}.host")])
        .await
        .unwrap();
    assert_eq!(by_name.len(), 1, "found by name");
    let by_id = store
        .find_machines(&[live.clone(), unique("nobody")])
        .await
        .unwrap();
    assert_eq!(by_id[0].machine_id, live, "found by id, unknown ignored");
    // Far more keys than one statement may bind (SQLite stops at 32,766 variables).
    let mut many: Vec<String> = (0..40_000).map(|i| format!("nobody-{i}")).collect();
    many.insert(20_000, live.clone());
    many.push(format!("{live}.host"));
    let found = store.find_machines(&many).await.unwrap();
    assert_eq!(
        found.len(),
        1,
        "one machine, named twice in different chunks"
    );
    assert_eq!(found[0].machine_id, live);
    assert_eq!(by_id[0].return_request_id.as_ref(), Some(&ret.request_id));

    let live_of_template = store
        .list_machines(&MachineFilter {
            live_only: true,
            template_id: Some(template.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut live_ids: Vec<_> = live_of_template
        .iter()
        .map(|m| m.machine_id.clone())
        .collect();
    live_ids.sort();
    let mut want = vec![live.clone(), failed.clone()];
    want.sort();
    assert_eq!(
        live_ids, want,
        "running and failed machines are live, terminated ones not"
    );
    let not_returning = store
        .list_machines(&MachineFilter {
            live_only: true,
            not_returning: true,
            template_id: Some(template.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let followed = store.requests_with_live_machines().await.unwrap();
    assert!(followed.contains(&older.request_id), "{followed:?}");
    assert!(
        !followed.contains(&newer.request_id),
        "no machines: nothing to follow"
    );
    let not_returning: Vec<_> = not_returning.iter().map(|m| m.machine_id.clone()).collect();
    assert_eq!(
        not_returning,
        vec![failed.clone()],
        "the live machine is in a return"
    );
    let in_return = store
        .list_machines(&MachineFilter {
            return_request_id: Some(ret.request_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(in_return.len(), 1);
}

/// Machine lists are read as one JSON value: text that needs escaping, absent optional
/// columns and nested provider data come back exactly, and an empty match is an empty list.
async fn awkward_values_survive_a_list_read(store: &Store) {
    let mut request = acquire("awkward", 50);
    let mut odd = machine(&request, &unique("odd"), MachineStatus::Failed);
    odd.status_reason =
        Some("quote \" backslash \\ newline \n tab \t nul-free ünïcødé ✓ 🚀".into());
    odd.tags = BTreeMap::from([
        ("key with \"quotes\"".into(), "line\nbreak".into()),
        ("empty".into(), String::new()),
    ])
    .into();
    odd.provider_data =
        json!({"nested": {"list": [1, 2.5, null, true, "x"]}, "big": i64::MAX}).into();
    odd.launch_time = None;
    odd.private_ip = None;
    odd.price_type = None;
    odd.provider_api = None;
    let mut plain = machine(&request, &unique("plain"), MachineStatus::Running);
    plain.created_at = at(0);
    let mut machines = vec![odd.clone(), plain.clone()];
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    let listed = store
        .list_machines(&MachineFilter {
            request_id: Some(request.request_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let names: Vec<&str> = listed.iter().map(|m| m.machine_id.as_str()).collect();
    assert_eq!(
        names,
        [plain.machine_id.as_str(), odd.machine_id.as_str()],
        "listed in creation order"
    );
    let back = &listed[1];
    assert_eq!(back.status_reason, odd.status_reason);
    assert_eq!(back.tags, odd.tags);
    assert_eq!(back.provider_data, odd.provider_data);
    assert_eq!(back.launch_time, None);
    assert_eq!(back.private_ip, None);
    assert_eq!(back.provider_api, None);
    assert_eq!(back.status, MachineStatus::Failed);
    assert_eq!(back.version, 1);
    let found = store
        .find_machines(std::slice::from_ref(&odd.name))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].status_reason, odd.status_reason);
    let none = store
        .list_machines(&MachineFilter {
            template_id: Some(unique("no-such-template")),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty(), "no match is an empty list, not an error");
}

/// The history: one event at insert, one per status change written with it, none for a write
/// that keeps the status or that conflicts; the broker-wide read filters by number, time and
/// type.
async fn each_status_change_is_one_event_of_the_history(store: &Store) {
    let mut request = acquire(&unique("tpl"), 10);
    request.last_transition_at = at(10);
    store.insert_request(&mut request, &mut []).await.unwrap();
    let created = store.request_events(&request.request_id).await.unwrap();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].kind, EventKind::Created);
    assert_eq!(created[0].status, RequestStatus::Pending);
    assert_eq!(created[0].previous_status, None);
    assert_eq!(created[0].at, at(10));

    let mut stale = request.clone();
    request.status = RequestStatus::InProgress;
    request.status_message = Some("creating 2 pods".into());
    request.last_transition_at = at(11);
    store.update_request(&mut request, &mut []).await.unwrap();
    // The same status again (a count or message changes): no event.
    request.fulfilled_count = 1;
    request.status_message = Some("1 of 2 running".into());
    store.update_request(&mut request, &mut []).await.unwrap();
    // A write that lost the race writes no event either.
    stale.status = RequestStatus::Cancelled;
    assert!(store.update_request(&mut stale, &mut []).await.is_err());
    request.status = RequestStatus::Complete;
    request.status_message = None;
    request.last_transition_at = at(12);
    store.update_request(&mut request, &mut []).await.unwrap();

    let history = store.request_events(&request.request_id).await.unwrap();
    let steps: Vec<(EventKind, RequestStatus, Option<RequestStatus>)> = history
        .iter()
        .map(|e| (e.kind, e.status, e.previous_status))
        .collect();
    assert_eq!(
        steps,
        [
            (EventKind::Created, RequestStatus::Pending, None),
            (
                EventKind::StatusChanged,
                RequestStatus::InProgress,
                Some(RequestStatus::Pending)
            ),
            (
                EventKind::StatusChanged,
                RequestStatus::Complete,
                Some(RequestStatus::InProgress)
            ),
        ]
    );
    assert_eq!(history[1].message.as_deref(), Some("creating 2 pods"));
    assert_eq!(history[1].at, at(11));
    assert!(history.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(store.last_event_seq().await.unwrap() >= history[2].seq);

    // Broker-wide: after a number, since a time, of one type.
    let after = store
        .events(&EventFilter {
            after_seq: Some(history[0].seq),
            ..Default::default()
        })
        .await
        .unwrap();
    let mine: Vec<i64> = after
        .iter()
        .filter(|e| e.request_id == request.request_id)
        .map(|e| e.seq)
        .collect();
    assert_eq!(mine, [history[1].seq, history[2].seq]);
    let changes = store
        .events(&EventFilter {
            after_seq: Some(history[0].seq - 1),
            kind: Some(EventKind::StatusChanged),
            since: Some(at(12)),
            limit: Some(10),
        })
        .await
        .unwrap();
    assert!(
        changes
            .iter()
            .all(|e| e.kind == EventKind::StatusChanged && e.at >= at(12)),
        "{changes:?}"
    );
    assert!(
        changes.iter().any(|e| e.seq == history[2].seq),
        "{changes:?}"
    );
    assert_eq!(
        store
            .request_events(&RequestId::new_acquire())
            .await
            .unwrap(),
        []
    );
    assert_eq!(
        "request.nope".parse::<EventKind>().unwrap_err(),
        "unknown event type \"request.nope\" (known: request.created, request.status_changed)"
    );
}

/// `request_machines` may answer from this process's last read, but only while no process
/// changed a machine of the list: `store` reads, `other` (another process's handle on the
/// same database) writes, and every write shows in `store`'s next read.
async fn a_kept_machine_list_follows_every_write_of_another_process(store: &Store, other: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    let mut machines = vec![
        machine(&request, &unique("m"), MachineStatus::Pending),
        machine(&request, &unique("m"), MachineStatus::Pending),
    ];
    other
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    let mine = MachineFilter {
        request_id: Some(request.request_id.clone()),
        ..Default::default()
    };
    let read = |store: &Store| {
        let store = store.clone();
        let filter = mine.clone();
        async move { store.request_machines(&filter).await.unwrap() }
    };
    let first = read(store).await;
    assert_eq!(first, store.list_machines(&mine).await.unwrap());
    assert_eq!(first.len(), 2);
    assert_eq!(read(store).await, first, "an unchanged list reads the same");

    // Another process changes one machine: its new status and version are read.
    let mut changed = vec![first[1].clone()];
    changed[0].status = MachineStatus::Running;
    changed[0].status_reason = Some("ready".into());
    other
        .update_request(&mut request, &mut changed)
        .await
        .unwrap();
    let second = read(store).await;
    assert_eq!(second, other.list_machines(&mine).await.unwrap());
    assert_eq!(second[1].status, MachineStatus::Running);
    assert_eq!(second[1].version, first[1].version + 1);
    assert_eq!(second[0], first[0]);

    // A change this process makes itself is read too (nothing else committed meanwhile).
    let mut mine_changed = vec![second[0].clone()];
    mine_changed[0].status_reason = Some("changed here".into());
    store
        .update_request(&mut request, &mut mine_changed)
        .await
        .unwrap();
    let own = read(store).await;
    assert_eq!(own[0].status_reason.as_deref(), Some("changed here"));
    assert_eq!(own[0].version, second[0].version + 1);
    assert_eq!(own, other.list_machines(&mine).await.unwrap());
    assert_eq!(read(store).await, own, "and reads the same again");

    // ... and a machine it adds (a replacement pod) is read too.
    let mut added = vec![machine(&request, &unique("m"), MachineStatus::Pending)];
    other
        .update_request(&mut request, &mut added)
        .await
        .unwrap();
    let third = read(store).await;
    assert_eq!(third.len(), 3);
    assert_eq!(third, other.list_machines(&mine).await.unwrap());

    // A return's list is kept and followed the same way.
    let mut ret = test_support::request(RequestType::Return)
        .provider("kubernetes", "k8s")
        .count(1)
        .created(at(9))
        .build();
    let mut taken = vec![third[0].clone()];
    taken[0].return_request_id = Some(ret.request_id.clone());
    other.insert_request(&mut ret, &mut taken).await.unwrap();
    let returning = MachineFilter {
        return_request_id: Some(ret.request_id.clone()),
        ..Default::default()
    };
    let held = store.request_machines(&returning).await.unwrap();
    assert_eq!(held.len(), 1);
    let mut gone = held.clone();
    gone[0].status = MachineStatus::Returned;
    other.update_request(&mut ret, &mut gone).await.unwrap();
    let after = store.request_machines(&returning).await.unwrap();
    assert_eq!(after[0].status, MachineStatus::Returned);
    assert_eq!(after, other.list_machines(&returning).await.unwrap());
}

/// On SQLite `get_request` may answer from this process's last read (its name lists shared,
/// not decoded again), but only while nothing was committed: `store` reads, `other` (another
/// process's handle on the same database) writes and purges, and each shows in `store`'s next
/// read.
async fn a_kept_request_follows_every_write_of_another_process(store: &Store, other: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    request.resource_ids = vec!["a".to_string(), "b".to_string()].into();
    other.insert_request(&mut request, &mut []).await.unwrap();
    let id = request.request_id.clone();
    let first = store.get_request(&id).await.unwrap().unwrap();
    assert_eq!(first, request);
    // The first read cannot tell when it was current; the second proves it and the third,
    // with nothing committed in between, hands out the kept one.
    let second = store.get_request(&id).await.unwrap().unwrap();
    let third = store.get_request(&id).await.unwrap().unwrap();
    assert_eq!(third, first, "an unchanged request reads the same");
    if store.backend() == Backend::Sqlite {
        assert!(
            Shared::ptr_eq(&third.provider_data, &second.provider_data)
                && Shared::ptr_eq(&third.resource_ids, &second.resource_ids),
            "and is not decoded again"
        );
    }

    // Another process changes the row: its new values and version are read.
    request.status = RequestStatus::InProgress;
    request.status_message = Some("1 of 2 running".into());
    request.provider_data = json!({"namespace": "batch", "pod_names": ["a", "b", "c"]}).into();
    other.update_request(&mut request, &mut []).await.unwrap();
    let changed = store.get_request(&id).await.unwrap().unwrap();
    assert_eq!(changed, request);
    assert_eq!(changed.version, first.version + 1);
    assert_eq!(changed.provider_data["pod_names"][2], "c");

    // A change this process makes itself is read too.
    let mut mine = changed.clone();
    mine.status = RequestStatus::Complete;
    store.update_request(&mut mine, &mut []).await.unwrap();
    let own = store.get_request(&id).await.unwrap().unwrap();
    assert_eq!(own.status, RequestStatus::Complete);
    assert_eq!(own, other.get_request(&id).await.unwrap().unwrap());

    // A request another process purged is gone here too.
    assert!(other.purge_request(&id).await.unwrap().is_some());
    assert_eq!(store.get_request(&id).await.unwrap(), None);
    assert_eq!(store.get_request(&id).await.unwrap(), None);
}

/// A list handed back with `share_request_machines` becomes the kept list when it holds the
/// same machines at the same versions with equal values: the next read hands out that very
/// list (its tags and provider data in the handed-back allocations). A list with one value
/// that differs is never kept, so the next read still gives the stored values.
async fn a_kept_list_shares_equal_values_handed_back(store: &Store) {
    let mut request = acquire(&unique("tpl"), 0);
    let mut machines = vec![
        machine(&request, &unique("m"), MachineStatus::Running),
        machine(&request, &unique("m"), MachineStatus::Running),
    ];
    for m in &mut machines {
        m.tags.insert("team".into(), "grid".into());
        m.provider_data = json!({"node_name": "kwok-node-0"}).into();
    }
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    let mine = MachineFilter {
        request_id: Some(request.request_id.clone()),
        ..Default::default()
    };
    let read = store.request_machine_list(&mine).await.unwrap();
    let again = store.request_machine_list(&mine).await.unwrap();
    assert!(
        MachineList::ptr_eq(&read, &again),
        "an unchanged list is handed out again, not copied"
    );
    // Equal values in fresh allocations, as a provider's observation brings them.
    let fresh = |list: &MachineList| -> MachineList {
        let mut copy = list.clone();
        for m in copy.iter_mut() {
            m.tags = (*m.tags).clone().into();
            m.provider_data = (*m.provider_data).clone().into();
        }
        copy
    };

    // Not equal: must never become the kept list.
    let mut differing = fresh(&read);
    differing[1].provider_data = json!({"node_name": "kwok-node-9"}).into();
    store.share_request_machines(&mine, &differing);
    let after_differing = store.request_machine_list(&mine).await.unwrap();
    assert!(MachineList::ptr_eq(&after_differing, &read));
    assert_eq!(after_differing[1].provider_data["node_name"], "kwok-node-0");

    let observed = fresh(&read);
    assert!(!Shared::ptr_eq(&observed[0].tags, &read[0].tags));
    store.share_request_machines(&mine, &observed);
    let after = store.request_machine_list(&mine).await.unwrap();
    assert_eq!(after, read, "sharing changes no value");
    assert!(MachineList::ptr_eq(&after, &observed));
    assert!(Shared::ptr_eq(
        &after[1].provider_data,
        &observed[1].provider_data
    ));
    assert_eq!(*after, store.list_machines(&mine).await.unwrap());

    // A list read before a machine of it was written is not kept over the new row.
    let mut changed = vec![after[0].clone()];
    changed[0].status = MachineStatus::Failed;
    let mut row = store
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    store.update_request(&mut row, &mut changed).await.unwrap();
    let stale = fresh(&after);
    store.share_request_machines(&mine, &stale);
    let current = store.request_machine_list(&mine).await.unwrap();
    assert_eq!(current[0].status, MachineStatus::Failed);
    assert!(!MachineList::ptr_eq(&current, &stale));
    assert_eq!(*current, store.list_machines(&mine).await.unwrap());
}

/// The names a template listing reports are exactly those of the live machines a full list
/// read gives, in the same order, without decoding whole machines.
async fn live_machine_names_match_the_live_list(store: &Store) {
    let template = unique("tpl");
    let mut first = acquire(&template, 40);
    let mut second = acquire(&template, 50);
    let (a, b, c) = (unique("a"), unique("b"), unique("c"));
    let mut first_machines = vec![
        machine(&first, &b, MachineStatus::Running),
        machine(&first, &c, MachineStatus::Returned),
    ];
    let mut second_machines = vec![machine(&second, &a, MachineStatus::Failed)];
    second_machines[0].created_at = at(9);
    store
        .insert_request(&mut first, &mut first_machines)
        .await
        .unwrap();
    store
        .insert_request(&mut second, &mut second_machines)
        .await
        .unwrap();
    let names: Vec<String> = store
        .live_machine_names()
        .await
        .unwrap()
        .into_iter()
        .filter(|(t, _)| *t == template)
        .map(|(_, name)| name)
        .collect();
    let listed: Vec<String> = store
        .list_machines(&MachineFilter {
            live_only: true,
            template_id: Some(template.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, listed);
    assert_eq!(names, [b, a], "live ones only, oldest first");
}

/// The per-status counts `/metrics` reports are those of a full list of the requests.
async fn request_counts_by_status_match_the_list(store: &Store) {
    let template = unique("count");
    for (i, status) in [
        RequestStatus::Complete,
        RequestStatus::Complete,
        RequestStatus::Failed,
        RequestStatus::InProgress,
    ]
    .into_iter()
    .enumerate()
    {
        let mut request = acquire(&template, 60 + i as i64);
        request.status = status;
        store.insert_request(&mut request, &mut []).await.unwrap();
    }
    let mut listed: std::collections::HashMap<RequestStatus, i64> = Default::default();
    for r in store
        .list_requests(&RequestFilter::default())
        .await
        .unwrap()
    {
        *listed.entry(r.status).or_default() += 1;
    }
    let counted: std::collections::HashMap<RequestStatus, i64> = store
        .count_requests_by_status()
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(counted, listed);
    assert!(counted[&RequestStatus::Complete] >= 2 && counted[&RequestStatus::Failed] >= 1);
}

async fn whole_suite(store: &Store) {
    request_counts_by_status_match_the_list(store).await;
    live_machine_names_match_the_live_list(store).await;
    a_kept_list_shares_equal_values_handed_back(store).await;
    round_trip(store).await;
    each_status_change_is_one_event_of_the_history(store).await;
    awkward_values_survive_a_list_read(store).await;
    stale_writes_conflict_and_change_nothing(store).await;
    a_state_change_is_one_transaction(store).await;
    duplicates_are_refused_whole(store).await;
    lookups_and_filters(store).await;
}

#[tokio::test]
async fn storage_suite_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/orb.db");
    let store = Store::open_sqlite_file(&path).await.unwrap();
    whole_suite(&store).await;
    let other = Store::open_sqlite_file(&path).await.unwrap();
    a_kept_machine_list_follows_every_write_of_another_process(&store, &other).await;
    a_kept_request_follows_every_write_of_another_process(&store, &other).await;
    other.close().await;
    store.close().await;
    // Reopening finds the schema current (the version in the file's header) and the data.
    let store = Store::open_sqlite_file(&path).await.unwrap();
    let all = store
        .list_requests(&RequestFilter::default())
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        18,
        "every request written by the suite survived a reopen"
    );
}

/// A machine row edited by hand into something orb cannot read is reported by machine id and
/// column, whether the bad value breaks the whole-list read (a wrong type) or only the check
/// after it (an unknown status).
#[tokio::test]
async fn hand_edited_machine_rows_are_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    let store = Store::open_sqlite_file(&path).await.unwrap();
    let mut request = acquire("edited", 0);
    let mut machines = vec![
        machine(&request, "edited-1", MachineStatus::Running),
        machine(&request, "edited-2", MachineStatus::Running),
    ];
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    let filter = MachineFilter {
        request_id: Some(request.request_id.clone()),
        ..Default::default()
    };
    let url = format!("sqlite://{}", path.display());
    let mut raw = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    for (edit, column) in [
        (
            "UPDATE machines SET status = 'exploded' WHERE machine_id = 'edited-2'",
            "status",
        ),
        (
            "UPDATE machines SET status = 'running', updated_at = 'last tuesday' \
             WHERE machine_id = 'edited-2'",
            "updated_at",
        ),
    ] {
        sqlx::query(edit).execute(&mut raw).await.unwrap();
        let err = store.list_machines(&filter).await.unwrap_err();
        match &err {
            StoreError::Corrupt {
                entity,
                id,
                message,
            } => {
                assert_eq!((*entity, id.as_str()), ("machine", "edited-2"), "{err}");
                assert!(message.contains(&format!("column {column}")), "{err}");
            }
            other => panic!("expected a corrupt-row error for {column}, got {other:?}"),
        }
        assert!(err.to_string().contains("edited by hand"), "{err}");
    }
}

/// Kinds are written in `ProviderApi`'s spelling; rows written before (any case) still read,
/// and a kind orb does not know is an error naming the row and the value, never a silent `None`.
#[tokio::test]
async fn stored_kinds_read_back_and_unknown_kinds_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    let store = Store::open_sqlite_file(&path).await.unwrap();
    let mut request = acquire("kinds", 0);
    request.provider_api = Some(ProviderApi::StatefulSet);
    let mut machines = vec![machine(&request, "kinds-1", MachineStatus::Running)];
    machines[0].provider_api = Some(ProviderApi::StatefulSet);
    store
        .insert_request(&mut request, &mut machines)
        .await
        .unwrap();
    let id = request.request_id.clone();
    let filter = MachineFilter {
        request_id: Some(id.clone()),
        ..Default::default()
    };
    let url = format!("sqlite://{}", path.display());
    let mut raw = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let column: (String,) = sqlx::query_as("SELECT provider_api FROM requests")
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert_eq!(column.0, "StatefulSet", "the canonical spelling is stored");

    sqlx::query("UPDATE requests SET provider_api = 'statefulset'")
        .execute(&mut raw)
        .await
        .unwrap();
    let back = store.get_request(&id).await.unwrap().unwrap();
    assert_eq!(back.provider_api, Some(ProviderApi::StatefulSet));

    sqlx::query("UPDATE requests SET provider_api = 'VirtualMachine'")
        .execute(&mut raw)
        .await
        .unwrap();
    let err = store.get_request(&id).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, StoreError::Corrupt { entity: "request", id: row, .. } if *row == id.to_string()),
        "{err:?}"
    );
    assert!(text.contains("column provider_api"), "{text}");
    assert!(text.contains("\"VirtualMachine\""), "{text}");

    sqlx::query("UPDATE machines SET provider_api = 'VirtualMachine'")
        .execute(&mut raw)
        .await
        .unwrap();
    let err = store.list_machines(&filter).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, StoreError::Corrupt { entity: "machine", id, .. } if id == "kinds-1"),
        "{err:?}"
    );
    assert!(text.contains("column provider_api"), "{text}");
    assert!(text.contains("\"VirtualMachine\""), "{text}");
}

#[tokio::test]
async fn storage_suite_on_postgres() {
    let Ok(url) = std::env::var("ORB_TEST_POSTGRES_URL") else {
        // scripts/test.sh starts a real server and sets both variables, so there a missing
        // URL is a broken set-up, not a reason to skip.
        assert!(
            std::env::var_os("ORB_REQUIRE_POSTGRES").is_none(),
            "ORB_REQUIRE_POSTGRES is set but ORB_TEST_POSTGRES_URL is not"
        );
        eprintln!(
            "skipped: ORB_TEST_POSTGRES_URL unset (set it to a postgres:// URL to run this suite)"
        );
        return;
    };
    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.backend(), orb_store::Backend::Postgres);
    whole_suite(&store).await;
    let other = Store::open(&url).await.unwrap();
    a_kept_machine_list_follows_every_write_of_another_process(&store, &other).await;
    a_kept_request_follows_every_write_of_another_process(&store, &other).await;
}

#[tokio::test]
async fn unsupported_urls_are_explained() {
    let err = Store::open("mysql://db/orb").await.unwrap_err().to_string();
    assert!(
        err.contains("sqlite://") && err.contains("postgres://"),
        "{err}"
    );
}

/// HostFactory runs each script as its own process, so the first calls on a new machine open
/// a database file nobody has made yet all at once. Every one of them must come up with the
/// whole schema, not fail on a migration another one was applying.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_stores_opening_one_fresh_sqlite_file_at_once_all_come_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orb.db");
    let opens = (0..20).map(|_| {
        let path = path.clone();
        tokio::spawn(async move { Store::open_sqlite_file(&path).await })
    });
    for (i, opened) in futures::future::join_all(opens)
        .await
        .into_iter()
        .enumerate()
    {
        let store = opened
            .unwrap()
            .unwrap_or_else(|e| panic!("store {i} did not open: {e}"));
        assert!(
            store
                .request_events(&RequestId::new_acquire())
                .await
                .unwrap()
                .is_empty()
        );
        store.close().await;
    }
}
