//! Returns that never lock machines for good and say what they left out: a release that
//! fails frees its machines with the reason, a machine held by a return that ended is free,
//! and machines of an acquire nobody has read yet can be returned.

use super::*;

#[tokio::test]
async fn a_return_whose_every_release_fails_ends_failed_and_frees_its_machines() {
    let f = fixture().await;
    let (ids, keys) = acquired(&f, 2).await;
    f.fail_release_of(&[&ids[0], &ids[1]], "pods/eviction is forbidden");

    let failed = f.return_machines(&keys).await;
    assert_eq!(failed.request.status, RequestStatus::Failed);
    let message = failed.request.status_message.clone().unwrap_or_default();
    assert!(message.contains("pods/eviction is forbidden"), "{message}");
    for m in f.stored_machines(&ids).await {
        assert_eq!(m.return_request_id, None, "{} stays held", m.machine_id);
        assert!(
            m.status_reason
                .as_deref()
                .is_some_and(|r| r.contains("pods/eviction is forbidden")),
            "{:?}",
            m.status_reason
        );
    }

    f.provider.release_failures.lock().unwrap().clear();
    let again = f.return_machines(&keys).await;
    assert_eq!(again.request.status, RequestStatus::InProgress);
}

#[tokio::test]
async fn a_machine_whose_release_failed_is_freed_while_the_rest_are_returned() {
    let f = fixture().await;
    let (ids, keys) = acquired(&f, 2).await;
    f.fail_release_of(&[&ids[0]], "a PodDisruptionBudget refused the eviction");

    let ret = f.return_machines(&keys).await;
    assert_eq!(ret.request.status, RequestStatus::InProgress);
    assert_eq!(ret.request.machine_ids, vec![ids[1].clone()]);
    assert_eq!(ret.request.requested_count, 2, "what was named");
    let note = ret.note.clone().unwrap_or_default();
    assert!(
        note.contains(&ids[0]) && note.contains("PodDisruptionBudget"),
        "{note}"
    );
    let by_id: HashMap<String, Machine> = f
        .stored_machines(&ids)
        .await
        .into_iter()
        .map(|m| (m.machine_id.clone(), m))
        .collect();
    assert_eq!(by_id[&ids[0]].return_request_id, None);
    assert_eq!(
        by_id[&ids[1]].return_request_id.as_ref(),
        Some(&ret.request.request_id)
    );

    // The rest ends the return on its own, `partial` (HostFactory: complete_with_error): a
    // `complete` would tell HostFactory the host it could not give back is gone.
    f.next_status(Verdict::Fulfilled, &[(&ids[1], MachineStatus::Terminated)]);
    let done = f.refresh(&ret.request.request_id).await;
    assert_eq!(done.request.status, RequestStatus::Partial);
    let message = done.request.status_message.clone().unwrap_or_default();
    assert!(
        message.contains(&ids[0]) && message.contains("PodDisruptionBudget"),
        "the return names the host it left and why: {message}"
    );

    f.provider.release_failures.lock().unwrap().clear();
    let again = f.return_machines(&keys[..1]).await;
    assert_eq!(again.request.machine_ids, vec![ids[0].clone()]);
}

/// A store written by an orb that left machines held by a return that had ended.
#[tokio::test]
async fn a_machine_held_by_a_return_that_ended_can_be_returned_again() {
    let f = fixture().await;
    let (ids, keys) = acquired(&f, 1).await;
    let first = f.return_machines(&keys).await;
    let mut ended = first.request.clone();
    orb_core::lifecycle::apply(
        &mut ended,
        orb_core::lifecycle::LifecycleEvent::Fail {
            reason: "every release failed".into(),
        },
        (f.broker.clock)(),
    )
    .unwrap();
    f.broker
        .store
        .update_request(&mut ended, &mut [])
        .await
        .unwrap();
    assert!(f.stored_machines(&ids).await[0].return_request_id.is_some());

    let again = f.return_machines(&keys).await;
    assert_eq!(
        f.stored_machines(&ids).await[0].return_request_id.as_ref(),
        Some(&again.request.request_id)
    );
}

#[tokio::test]
async fn a_return_of_a_machine_held_by_another_return_says_what_it_left_out() {
    let f = fixture().await;
    let (ids, keys) = acquired(&f, 2).await;
    let first = f.return_machines(&keys[..1]).await;
    let second = f.return_machines(&keys).await;
    assert_eq!(second.request.machine_ids, vec![ids[1].clone()]);
    let note = second.note.clone().unwrap_or_default();
    assert!(
        note.contains(&ids[0])
            && note.contains(first.request.request_id.as_str())
            && note.contains("already being returned"),
        "the left-out machine, who holds it and why: {note:?}"
    );
}

#[tokio::test]
async fn a_return_right_after_an_acquire_nobody_read_finds_its_machines() {
    let f = fixture().await;
    *f.provider.acquire_without_machines.lock().unwrap() = true;
    let acquire = f.broker.request_machines("deploy", 2).await.unwrap();
    assert!(acquire.machines.is_empty(), "a controller's acquire");
    let name = format!("m-{}-0001", &acquire.request.request_id.hex_digits()[..8]);
    f.next_status(
        Verdict::Fulfilled,
        &[
            (&name.replace("-0001", "-0000"), MachineStatus::Running),
            (&name, MachineStatus::Running),
        ],
    );

    let ret = f
        .broker
        .return_named(std::slice::from_ref(&name))
        .await
        .unwrap();
    assert_eq!(ret.request.machine_ids, vec![name.clone()]);
    assert_eq!(
        f.provider.calls().last().unwrap(),
        &format!("release {name}")
    );
}

/// A Deployment acquire that finished, then lost a pod: its ReplicaSet's replacement is
/// recorded by a later read, and HostFactory never hears of it. Returning the hosts it knows
/// takes the replacement along (the provider then deletes the Deployment whole); returning
/// only some of them leaves it with the Deployment.
#[tokio::test]
async fn the_last_known_hosts_of_a_deployment_take_its_replacements_along() {
    let f = fixture().await;
    let acquire = f.broker.request_machines("deploy", 2).await.unwrap();
    let id = acquire.request.request_id.clone();
    let known: Vec<String> = acquire
        .machines
        .iter()
        .map(|m| m.machine_id.clone())
        .collect();
    let (a, b) = (known[0].as_str(), known[1].as_str());
    let running = |extra: &[(&str, MachineStatus)]| {
        let mut all = vec![(a, MachineStatus::Running), (b, MachineStatus::Running)];
        all.extend_from_slice(extra);
        Ok(report(Verdict::Fulfilled, &all))
    };
    f.provider.statuses.lock().unwrap().push_back(running(&[]));
    let done = f.refresh(&id).await;
    assert_eq!(done.request.status, RequestStatus::Complete);
    f.advance(60);
    f.provider
        .statuses
        .lock()
        .unwrap()
        .push_back(running(&[("replacement", MachineStatus::Running)]));
    f.broker.refresh(&id).await.unwrap();

    f.broker.return_named(&[a.to_string()]).await.unwrap();
    assert_eq!(f.provider.calls().last().unwrap(), &format!("release {a}"));
    // A status read of the acquire writes the replacement's row while the release runs
    // (it was in no return when read): the return still records it, and keeps what the read
    // wrote. Before, the return's write conflicted and the caller was told it was refused,
    // though the Deployment had gone.
    *f.provider.release_writer.lock().unwrap() =
        Some((f.broker.store.clone(), "replacement".into()));
    let last = f.broker.return_named(&[b.to_string()]).await.unwrap();
    assert_eq!(
        f.provider.calls().last().unwrap(),
        &format!("release {b},replacement")
    );
    assert_eq!(
        last.request.machine_ids,
        vec![b.to_string(), "replacement".into()]
    );
    let replacement = f
        .stored_machines(&["replacement".to_string()])
        .await
        .remove(0);
    assert_eq!(
        replacement.return_request_id.as_ref(),
        Some(&last.request.request_id)
    );
    assert_eq!(replacement.status_reason.as_deref(), Some("read meanwhile"));
}
