//! Folding what the provider saw into stored machines.

use std::borrow::Cow;

use jiff::Timestamp;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::provider::{MachineObservation, REMOVED_BY_ORB, removed_by_orb};
use orb_core::request::Request;
use orb_core::shared::Shared;

/// A new machine of acquire `request`, as `observation` shows it.
pub(super) fn new_machine(
    observation: &MachineObservation,
    request: &Request,
    now: Timestamp,
) -> Machine {
    let mut machine = Machine {
        machine_id: observation.machine_id.clone(),
        name: observation.name.clone(),
        request_id: request.request_id.clone(),
        return_request_id: None,
        template_id: request.template_id.clone().unwrap_or_default(),
        provider_name: request.provider_name.clone(),
        provider_api: request.provider_api,
        resource_id: None,
        uid: None,
        status: observation.status,
        status_reason: None,
        private_ip: None,
        public_ip: None,
        launch_time: None,
        instance_type: None,
        price_type: None,
        tags: Default::default(),
        provider_data: serde_json::Value::Null.into(),
        created_at: now,
        updated_at: now,
        version: 0,
    };
    observe_into(&mut machine, observation, now);
    machine
}

/// Updates a stored machine from an observation in place; true when anything changed, and
/// then the machine is stamped `now`.
pub(super) fn observe_into(
    machine: &mut Machine,
    observation: &MachineObservation,
    now: Timestamp,
) -> bool {
    let folded = fold_observation(machine, observation, now);
    let changed = folded.changed;
    if let Some(updated) = folded.machine {
        *machine = updated;
    }
    changed
}

/// What folding an observation into a stored machine gave.
pub(super) struct Folded {
    /// The machine as it should now be held, when that is not the stored machine itself: it
    /// changed, or it now shares equal tags or provider data with the observation.
    pub machine: Option<Machine>,
    /// Whether it differs from the stored machine (and so must be written).
    pub changed: bool,
}

/// Folds `observation` into `stored` without touching it: fields are compared before they
/// are copied, and the machine is copied only when something is to be written into it, so a
/// read that sees nothing new copies nothing (a status read of a 5,000-machine request folds
/// 5,000 observations, most of them unchanged, into a list it shares with the store).
pub(super) fn fold_observation(
    stored: &Machine,
    observation: &MachineObservation,
    now: Timestamp,
) -> Folded {
    // A StatefulSet reuses pod names: a different UID is a new incarnation of the host, and
    // nothing learned about the old one (address, start time) may leak into it.
    let reincarnated =
        matches!((&stored.uid, &observation.uid), (Some(old), Some(new)) if old != new);
    let mut machine = Cow::Borrowed(stored);
    let mut changed = false;
    if machine.name != observation.name {
        machine.to_mut().name.clone_from(&observation.name);
        changed = true;
    }
    let failure = carried_failure(&machine, observation.status);
    if machine.status != observation.status {
        machine.to_mut().status = observation.status;
        changed = true;
    }
    let reason = match (failure, &observation.status_reason) {
        (Some(failed), Some(now)) => Some(format!("{failed}{THEN}{now}")),
        (Some(failed), None) => Some(failed),
        (None, now) => {
            if let Some(new) = replaced(&machine.status_reason, now.as_ref(), true) {
                machine.to_mut().status_reason = new;
                changed = true;
            }
            None
        }
    };
    if let Some(reason) = reason
        && machine.status_reason.as_ref() != Some(&reason)
    {
        machine.to_mut().status_reason = Some(reason);
        changed = true;
    }
    // Keep what we learned earlier when a later read is less complete (unless the pod is a
    // new incarnation).
    if let Some(new) = replaced(
        &machine.private_ip,
        observation.private_ip.as_ref(),
        reincarnated,
    ) {
        machine.to_mut().private_ip = new;
        changed = true;
    }
    if let Some(new) = replaced(
        &machine.public_ip,
        observation.public_ip.as_ref(),
        reincarnated,
    ) {
        machine.to_mut().public_ip = new;
        changed = true;
    }
    let launch_time = observation.launch_time.or(if reincarnated {
        None
    } else {
        machine.launch_time
    });
    if machine.launch_time != launch_time {
        machine.to_mut().launch_time = launch_time;
        changed = true;
    }
    if let Some(new) = replaced(
        &machine.instance_type,
        observation.instance_type.as_ref(),
        false,
    ) {
        machine.to_mut().instance_type = new;
        changed = true;
    }
    if let Some(new) = replaced(&machine.price_type, observation.price_type.as_ref(), false) {
        machine.to_mut().price_type = new;
        changed = true;
    }
    // Equal or not, the machine takes the observation's tags and provider data: equal ones
    // then share one allocation with the cached pod, and the next read compares pointers
    // (and, finding the same allocation, copies nothing).
    if !observation.tags.is_empty() && !Shared::ptr_eq(&machine.tags, &observation.tags) {
        changed |= machine.tags != observation.tags;
        machine.to_mut().tags.clone_from(&observation.tags);
    }
    if let Some(new) = replaced(
        &machine.resource_id,
        observation.resource_id.as_ref(),
        false,
    ) {
        machine.to_mut().resource_id = new;
        changed = true;
    }
    if let Some(new) = replaced(&machine.uid, observation.uid.as_ref(), false) {
        machine.to_mut().uid = new;
        changed = true;
    }
    if !observation.provider_data.is_null()
        && !Shared::ptr_eq(&machine.provider_data, &observation.provider_data)
    {
        let mut seen = observation.provider_data.clone();
        // orb removing a machine itself stays known through the reads of its pod going.
        if removed_by_orb(&machine.provider_data)
            && !removed_by_orb(&seen)
            && let Some(data) = seen.as_object_mut()
        {
            data.insert(REMOVED_BY_ORB.into(), true.into());
        }
        changed |= machine.provider_data != seen;
        machine.to_mut().provider_data = seen;
    }
    if changed {
        machine.to_mut().updated_at = now;
    }
    Folded {
        machine: match machine {
            Cow::Owned(updated) => Some(updated),
            Cow::Borrowed(_) => None,
        },
        changed,
    }
}

/// What `slot` becomes when `seen` is put into it: `seen` when it is there and differs;
/// with nothing seen, the slot keeps its value unless `forget`. `None` when the slot stays.
fn replaced(slot: &Option<String>, seen: Option<&String>, forget: bool) -> Option<Option<String>> {
    match seen {
        Some(value) if slot.as_ref() != Some(value) => Some(Some(value.clone())),
        Some(_) => None,
        None if forget && slot.is_some() => Some(None),
        None => None,
    }
}

/// Joins why a machine failed to what happened to it next.
const THEN: &str = "; then ";

/// Why `machine` failed, when its pod is now being deleted or gone (`next`): "pod is being
/// deleted" or "gone" alone would hide it. The failure rides along through every later read of
/// the shutdown (`<failure>; then <what is seen now>`), so a read that catches the pod while it
/// terminates does not lose it either.
fn carried_failure(machine: &Machine, next: MachineStatus) -> Option<String> {
    let ending = matches!(
        next,
        MachineStatus::ShuttingDown | MachineStatus::Terminated
    );
    if !ending {
        return None;
    }
    let reason = machine.status_reason.as_deref()?;
    match machine.status {
        MachineStatus::Failed => Some(reason.to_string()),
        MachineStatus::ShuttingDown | MachineStatus::Terminated => reason
            .split_once(THEN)
            .map(|(failure, _)| failure.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use orb_core::ProviderApi;
    use orb_core::request::RequestType;
    use orb_core::test_support;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    /// `stored` after `observation` was folded into it at `now`.
    fn folded(stored: &Machine, observation: &MachineObservation, now: Timestamp) -> Machine {
        let mut machine = stored.clone();
        observe_into(&mut machine, observation, now);
        machine
    }

    fn request() -> Request {
        test_support::request(RequestType::Acquire)
            .created(t(0))
            .kind(ProviderApi::Pod)
            .build()
    }

    #[test]
    fn a_new_observation_becomes_a_machine_of_the_request() {
        let r = request();
        let mut obs = MachineObservation::new("orb-x-0000", MachineStatus::Pending);
        obs.private_ip = Some("10.0.0.1".into());
        let m = new_machine(&obs, &r, t(5));
        assert_eq!(m.request_id, r.request_id);
        assert_eq!(m.template_id, "worker");
        assert_eq!(m.provider_api, Some(ProviderApi::Pod));
        assert_eq!(m.version, 0);
        assert_eq!(m.private_ip.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn an_observation_with_nothing_new_copies_nothing() {
        let r = request();
        let mut seen = MachineObservation::new("orb-x-0000", MachineStatus::Running);
        seen.private_ip = Some("10.0.0.1".into());
        seen.tags = BTreeMap::from([("team".to_string(), "grid".to_string())]).into();
        seen.provider_data = serde_json::json!({"cloud_host_id": "kwok-node-0"}).into();
        let stored = new_machine(&seen, &r, t(5));

        let same = fold_observation(&stored, &seen, t(9));
        assert!(!same.changed);
        assert!(same.machine.is_none(), "the same allocations: no copy");

        // Equal values in fresh allocations (a row read back from the database): no change
        // to write, but a copy that shares the observation's allocations.
        let mut read_back = stored.clone();
        read_back.tags = (*stored.tags).clone().into();
        read_back.provider_data = (*stored.provider_data).clone().into();
        let shared = fold_observation(&read_back, &seen, t(9));
        assert!(!shared.changed);
        let copy = shared
            .machine
            .expect("a copy sharing the observation's values");
        assert_eq!(copy, read_back);
        assert!(Shared::ptr_eq(&copy.tags, &seen.tags));
        assert!(Shared::ptr_eq(&copy.provider_data, &seen.provider_data));
        assert_eq!(copy.updated_at, t(5), "nothing changed, so not stamped");

        let mut later = seen.clone();
        later.status = MachineStatus::Failed;
        let failed = fold_observation(&stored, &later, t(9));
        assert!(failed.changed);
        let updated = failed.machine.expect("the changed machine");
        assert_eq!(updated.status, MachineStatus::Failed);
        assert_eq!(updated.updated_at, t(9));
        assert_eq!(
            stored.status,
            MachineStatus::Running,
            "the stored one is untouched"
        );
    }

    #[test]
    fn later_reads_update_status_but_keep_known_facts() {
        let r = request();
        let mut first = MachineObservation::new("orb-x-0000", MachineStatus::Running);
        first.private_ip = Some("10.0.0.1".into());
        let mut stored = new_machine(&first, &r, t(5));
        stored.version = 3;
        let gone = MachineObservation::new("orb-x-0000", MachineStatus::Terminated);
        let m = folded(&stored, &gone, t(9));
        assert_eq!(m.status, MachineStatus::Terminated);
        assert_eq!(m.private_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            m.version, 3,
            "the version read is kept for the conditional write"
        );
        assert_eq!(m.created_at, t(5));
        assert_eq!(m.updated_at, t(9));
    }

    #[test]
    fn a_failed_machine_that_goes_keeps_why_it_failed() {
        let r = request();
        let mut failed = MachineObservation::new("orb-x-0000", MachineStatus::Failed);
        failed.status_reason = Some("timed out: pending for more than 300s".into());
        let stored = new_machine(&failed, &r, t(5));
        let mut gone = MachineObservation::new("orb-x-0000", MachineStatus::Terminated);
        gone.status_reason = Some("the pod no longer exists".into());
        let m = folded(&stored, &gone, t(9));
        assert_eq!(m.status, MachineStatus::Terminated);
        assert_eq!(
            m.status_reason.as_deref(),
            Some("timed out: pending for more than 300s; then the pod no longer exists")
        );
    }

    #[test]
    fn a_failed_machine_read_while_its_pod_terminates_still_says_why_it_failed_once_gone() {
        let r = request();
        let mut failed = MachineObservation::new("orb-x-1", MachineStatus::Failed);
        failed.status_reason = Some("timed out: pending for more than 300s".into());
        let mut m = new_machine(&failed, &r, t(5));
        let mut deleting = MachineObservation::new("orb-x-1", MachineStatus::ShuttingDown);
        deleting.status_reason = Some("pod is being deleted".into());
        // Two reads catch the pod terminating, then one finds it gone.
        for at in [7, 8] {
            m = folded(&m, &deleting, t(at));
            assert_eq!(m.status, MachineStatus::ShuttingDown);
            assert_eq!(
                m.status_reason.as_deref(),
                Some("timed out: pending for more than 300s; then pod is being deleted")
            );
        }
        let mut gone = MachineObservation::new("orb-x-1", MachineStatus::Terminated);
        gone.status_reason = Some("the pod no longer exists".into());
        m = folded(&m, &gone, t(9));
        let m = folded(&m, &gone, t(10));
        assert_eq!(m.status, MachineStatus::Terminated);
        assert_eq!(
            m.status_reason.as_deref(),
            Some("timed out: pending for more than 300s; then the pod no longer exists")
        );
    }

    #[test]
    fn a_machine_returned_without_failing_reads_only_what_is_seen_now() {
        let r = request();
        let mut deleting = MachineObservation::new("orb-x-2", MachineStatus::ShuttingDown);
        deleting.status_reason = Some("pod is being deleted".into());
        let m = new_machine(&deleting, &r, t(5));
        let mut gone = MachineObservation::new("orb-x-2", MachineStatus::Terminated);
        gone.status_reason = Some("the pod no longer exists".into());
        let m = folded(&m, &gone, t(9));
        assert_eq!(m.status_reason.as_deref(), Some("the pod no longer exists"));
    }

    #[test]
    fn a_new_pod_uid_is_a_new_incarnation() {
        let r = request();
        let mut first = MachineObservation::new("sts-0", MachineStatus::Running);
        first.uid = Some("uid-1".into());
        first.private_ip = Some("10.0.0.1".into());
        first.launch_time = Some(t(5));
        let stored = new_machine(&first, &r, t(5));
        let mut again = MachineObservation::new("sts-0", MachineStatus::Pending);
        again.uid = Some("uid-2".into());
        let m = folded(&stored, &again, t(9));
        assert_eq!(m.uid.as_deref(), Some("uid-2"));
        assert_eq!(
            m.private_ip, None,
            "the old pod's address is not the new pod's"
        );
        assert_eq!(m.launch_time, None);
    }

    #[test]
    fn an_equal_observation_changes_nothing_and_shares_its_values() {
        let mut seen = MachineObservation::new("p-0", MachineStatus::Running);
        seen.provider_data = serde_json::json!({"node_name": "kwok-0"}).into();
        seen.tags.insert("team".into(), "grid".into());
        let mut m = new_machine(&seen, &request(), t(1));
        observe_into(&mut m, &seen, t(2));
        // The same values in fresh allocations, as the next read brings them.
        let mut again = seen.clone();
        again.tags = (*seen.tags).clone().into();
        again.provider_data = (*seen.provider_data).clone().into();
        let before = m.clone();
        assert!(!observe_into(&mut m, &again, t(3)));
        assert_eq!(m, before);
        assert!(Shared::ptr_eq(&m.tags, &again.tags));
        assert!(Shared::ptr_eq(&m.provider_data, &again.provider_data));
    }

    #[test]
    fn an_observation_reports_a_change_exactly_when_the_machine_differs_afterwards() {
        let r = request();
        let mut seen = MachineObservation::new("sts-0", MachineStatus::Running);
        seen.uid = Some("uid-1".into());
        seen.private_ip = Some("10.0.0.1".into());
        seen.launch_time = Some(t(5));
        seen.provider_data = serde_json::json!({"node": {"name": "kwok-0"}}).into();
        seen.tags.insert("team".into(), "grid".into());
        let mut pending = seen.clone();
        pending.status = MachineStatus::Pending;
        let mut moved = seen.clone();
        moved.provider_data = serde_json::json!({"node": {"name": "kwok-1"}}).into();
        let mut reborn = seen.clone();
        reborn.uid = Some("uid-2".into());
        reborn.private_ip = None;
        reborn.launch_time = None;
        let mut failed = seen.clone();
        failed.status = MachineStatus::Failed;
        failed.status_reason = Some("timed out".into());
        let mut gone = MachineObservation::new("sts-0", MachineStatus::Terminated);
        gone.status_reason = Some("the pod no longer exists".into());
        // Each read is folded onto the machine the previous ones left; a read that only
        // repeats what is known (fewer facts included) changes nothing.
        let mut less = seen.clone();
        less.private_ip = None;
        less.tags.clear();
        less.provider_data = serde_json::Value::Null.into();
        let reads = [
            (&seen, true),
            (&seen, false),
            (&less, false),
            (&pending, true),
            (&seen, true),
            (&moved, true),
            (&moved, false),
            (&reborn, true),
            (&reborn, false),
            (&failed, true),
            (&failed, false),
            (&gone, true),
            (&gone, false),
        ];
        let mut m = new_machine(
            &MachineObservation::new("sts-0", MachineStatus::Pending),
            &r,
            t(1),
        );
        for (at, (read, expect)) in reads.into_iter().enumerate() {
            let before = m.clone();
            let now = t(10 + at as i64);
            let changed = observe_into(&mut m, read, now);
            let differs = Machine {
                updated_at: before.updated_at,
                ..m.clone()
            } != before;
            assert_eq!(changed, differs, "read {at}: the flag must match the fold");
            assert_eq!(changed, expect, "read {at}");
            assert_eq!(m.updated_at, if changed { now } else { before.updated_at });
        }
    }
}
