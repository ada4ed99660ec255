//! Status: read a request, ask the provider how its machines are doing, let the lifecycle
//! decide, and store the result if anything changed.

use std::future::Future;
use std::task::Poll;

use foldhash::{HashSet, HashSetExt};
use orb_core::sorted::SortedMap;

use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::machine::{Machine, MachineList, MachineStatus};
use orb_core::provider::{
    AbandonInput, MachineObservation, Provider, ReadAhead, ReadAheadFuture, StatusInput,
    StatusMachines, StatusReport,
};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_store::{MachineFilter, StoreError};

use super::observe::{fold_observation, new_machine};
use super::resume::is_unrecorded_acquire;
use super::resume_return::is_unrecorded_return;
use super::{Broker, BrokerError, RequestView};

/// Concurrent pollers may race; a conflicting write is retried on fresh data this many times.
pub(crate) const CONFLICT_RETRIES: usize = 3;

/// A provider read started before the request's machines were read
/// ([`Provider::read_ahead`](orb_core::provider::Provider::read_ahead)): it makes progress
/// while the broker awaits other work alongside it, and is dropped unfinished if the status
/// call it was for does not happen.
struct Ahead<'a> {
    running: Option<ReadAheadFuture<'a>>,
    read: Option<ReadAhead>,
}

impl<'a> Ahead<'a> {
    fn start(provider: Option<&'a dyn Provider>, request: &Request) -> Self {
        Self {
            running: provider.and_then(|p| {
                p.read_ahead(
                    &request.request_id,
                    request.request_type,
                    &request.provider_data,
                )
            }),
            read: None,
        }
    }

    /// Awaits `work`, the read ahead going on meanwhile.
    async fn alongside<T>(&mut self, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            if let Some(running) = self.running.as_mut()
                && let Poll::Ready(read) = running.as_mut().poll(cx)
            {
                self.read = Some(read);
                self.running = None;
            }
            work.as_mut().poll(cx)
        })
        .await
    }

    async fn finish(self) -> Option<ReadAhead> {
        match self.running {
            Some(running) => Some(running.await),
            None => self.read,
        }
    }
}

impl Broker {
    pub async fn machines_of(&self, request: &Request) -> Result<Vec<Machine>, BrokerError> {
        Ok(self
            .store
            .request_machines(&MachineFilter::of_request(request))
            .await?)
    }

    /// [`Broker::machines_of`], shared with the store's kept list (copied only when changed).
    async fn machine_list_of(&self, request: &Request) -> Result<MachineList, BrokerError> {
        Ok(self
            .store
            .request_machine_list(&MachineFilter::of_request(request))
            .await?)
    }

    /// The current state of a request; `None` if orb has no such request. Finished requests
    /// are answered from storage without asking the provider.
    pub async fn refresh(
        &self,
        request_id: &RequestId,
    ) -> Result<Option<RequestView>, BrokerError> {
        let mut attempt = 0;
        // What the provider answered to an attempt whose write lost a race: the retry folds
        // it onto the fresh row instead of asking again, because asking may have acted (a
        // status read releases timed-out pods, and a second read would only see them gone).
        let mut seen = None;
        loop {
            attempt += 1;
            match self.refresh_once(request_id, &mut seen).await {
                Err(BrokerError::Store(StoreError::Conflict { .. }))
                    if attempt < CONFLICT_RETRIES =>
                {
                    continue;
                }
                other => {
                    if let Ok(Some(view)) = &other {
                        self.note_refreshed(view);
                    }
                    return other;
                }
            }
        }
    }

    /// Records when an unfinished request was last asked about (the provider answered), and
    /// forgets finished ones.
    fn note_refreshed(&self, view: &RequestView) {
        let mut log = self.refreshed.times();
        let id = &view.request.request_id;
        if view.request.status.is_terminal() || view.note.is_some() {
            log.remove(id);
        } else {
            log.insert(id.clone(), std::time::Instant::now());
        }
    }

    /// Whether `request_id` was refreshed from the provider less than `within` ago.
    pub fn refreshed_within(&self, request_id: &RequestId, within: std::time::Duration) -> bool {
        let log = self.refreshed.times();
        log.get(request_id).is_some_and(|at| at.elapsed() < within)
    }

    /// Forgets the refresh times of requests not in `unfinished`.
    pub fn retain_refreshed(&self, unfinished: &std::collections::HashSet<&RequestId>) {
        let mut log = self.refreshed.times();
        log.retain(|id, _| unfinished.contains(id));
    }

    async fn refresh_once(
        &self,
        request_id: &RequestId,
        seen: &mut Option<StatusReport>,
    ) -> Result<Option<RequestView>, BrokerError> {
        let Some(mut stored) = self.store.get_request(request_id).await? else {
            return Ok(None);
        };
        // The provider's own reads (a LIST of the request's pods) run while the machines are
        // read from storage; a retry folds the report it already has, so it reads nothing.
        let provider = self.provider.get().ok().filter(|_| seen.is_none());
        let mut ahead = Ahead::start(provider.as_deref(), &stored);
        let mut stored_machines = ahead.alongside(self.machine_list_of(&stored)).await?;
        if self.refreshed.is_cancelling(request_id) {
            // The cancel records what it deleted; asking the provider now would only see its
            // deletions under way.
            return Ok(Some(RequestView {
                request: stored,
                machines: stored_machines,
                note: None,
            }));
        }
        if is_unrecorded(&stored, stored_machines.len()) {
            // Nothing recorded yet: resume it now if nobody is creating or releasing it, else
            // wait for the process that is. Either way the deadline does not judge an acquire
            // that has not recorded what it created.
            match self.resume_unrecorded(&stored).await? {
                Some(resumed) if !is_unrecorded(&resumed.request, resumed.machines.len()) => {
                    stored = resumed.request;
                    stored_machines = resumed.machines;
                }
                Some(resumed) => {
                    return Ok(Some(RequestView {
                        note: resumed.request.status_message.clone(),
                        ..resumed
                    }));
                }
                None => {
                    let Some(now) = self.store.get_request(request_id).await? else {
                        return Ok(None);
                    };
                    let machines = self.machine_list_of(&now).await?;
                    if is_unrecorded(&now, machines.len()) {
                        let note = match now.request_type {
                            RequestType::Acquire => {
                                "the acquire is still creating its objects in another orb \
                                 process; its machines appear once it has recorded them"
                            }
                            RequestType::Return => {
                                "the return is still releasing its machines in another orb \
                                 process"
                            }
                        };
                        return Ok(Some(RequestView {
                            request: now,
                            machines,
                            note: Some(note.into()),
                        }));
                    }
                    stored = now;
                    stored_machines = machines;
                }
            }
        }
        // A finished request is answered from storage once nothing it holds can change any
        // more ([`still_followed`]); it is recorded by now.
        let follow_up = stored.status.is_terminal();
        if answered_from_storage(&stored, &stored_machines) {
            return Ok(Some(RequestView {
                request: stored,
                machines: stored_machines,
                note: None,
            }));
        }
        let mut request = stored.clone();
        let mut machines = stored_machines;
        // Per machine, whether it differs from the stored row (all false until a report
        // is folded in).
        let mut changed_flags = vec![false; machines.len()];
        let mut note = None;
        // A fresh report from a view the provider says may be out of date.
        let mut stale = None;
        // The report this attempt used, kept for a retry should the write conflict.
        let mut answered = None;
        match self.provider.get() {
            Err(err) => note = Some(format!("status not refreshed from the provider: {err}")),
            Ok(provider) => {
                let answer = match seen.take() {
                    Some(report) => Ok(report),
                    None => {
                        let template = request
                            .template_id
                            .as_deref()
                            .and_then(|id| self.catalog.current().get(id).cloned());
                        // The bookkeeping (5,000 pod names in a 5,000-machine acquire) is
                        // shared by the request, the input and every machine of the acquire.
                        let provider_data = request.provider_data.to_arc();
                        let known = (request.request_type == RequestType::Acquire)
                            .then(|| (&request.request_id, provider_data.clone()));
                        let input = StatusInput {
                            request_id: request.request_id.clone(),
                            request_type: request.request_type,
                            requested_count: request.requested_count,
                            provider_api: request.provider_api,
                            provider_data,
                            template,
                            machines: StatusMachines::from_runs(
                                machines.clone(),
                                self.acquire_records(&machines, known).await?,
                            ),
                        };
                        let ahead = ahead.finish().await;
                        provider.status_after(input, ahead).await
                    }
                };
                match answer {
                    Err(err) => {
                        note = Some(format!("status not refreshed from the provider: {err}"))
                    }
                    Ok(report) => {
                        let now = self.now();
                        changed_flags = fold_report(&request, &mut machines, &report, now);
                        stale = report.note.clone();
                        if !follow_up {
                            let (verdict, message) = match request.request_type {
                                RequestType::Return => crate::release::judge_return(
                                    &request,
                                    report.verdict.clone(),
                                    report.message.clone(),
                                ),
                                RequestType::Acquire => {
                                    (report.verdict.clone(), report.message.clone())
                                }
                            };
                            lifecycle::apply(
                                &mut request,
                                LifecycleEvent::ProviderVerdict {
                                    verdict,
                                    fulfilled: report.fulfilled,
                                    failed: report.failed,
                                    message,
                                },
                                now,
                            )?;
                        }
                        answered = Some(report);
                    }
                }
            }
        }
        if note.is_some() && !follow_up {
            lifecycle::apply(&mut request, LifecycleEvent::DeadlineSweep, self.now())?;
        }
        if request.request_type == RequestType::Return
            && request.status.is_terminal()
            && request.status != RequestStatus::Complete
        {
            for i in self.give_up_return(&request, &mut machines).await {
                changed_flags[i] = true;
            }
        }
        let changed_at: Vec<usize> = (0..machines.len()).filter(|&i| changed_flags[i]).collect();
        let mut changed: Vec<Machine> = changed_at.iter().map(|&i| machines[i].clone()).collect();
        if request != stored || !changed.is_empty() {
            if let Err(e) = self.store.update_request(&mut request, &mut changed).await {
                if matches!(e, StoreError::Conflict { .. }) {
                    *seen = answered;
                }
                return Err(e.into());
            }
            // The store bumped their versions in place; put them back where they came from.
            for (i, updated) in changed_at.into_iter().zip(changed) {
                machines[i] = updated;
            }
        } else if answered.is_some() {
            // Unchanged, the machines now share their tags and provider data with the
            // observation; so does the store's kept list from here on.
            self.store
                .share_request_machines(&MachineFilter::of_request(&request), &machines);
        }
        Ok(Some(RequestView {
            request,
            machines,
            note: note.or(stale),
        }))
    }

    /// Resumes an acquire or a return with nothing recorded; `None` when another process
    /// works on it (or it got recorded meanwhile).
    async fn resume_unrecorded(
        &self,
        request: &Request,
    ) -> Result<Option<RequestView>, BrokerError> {
        match request.request_type {
            RequestType::Acquire => self.resume_interrupted_acquire(&request.request_id).await,
            RequestType::Return => self.resume_interrupted_return(&request.request_id).await,
        }
    }

    /// A return that ended without releasing everything (its deadline passed, or it failed):
    /// the machines still there are freed, so a later return can try again, and whatever the
    /// provider left on them (a Deployment's victim mark) is cleared.
    /// Returns the positions of the machines it freed.
    pub(super) async fn give_up_return(
        &self,
        request: &Request,
        machines: &mut [Machine],
    ) -> Vec<usize> {
        let now = self.now();
        let stuck: Vec<Machine> = machines
            .iter()
            .filter(|m| {
                m.status.is_live() && m.return_request_id.as_ref() == Some(&request.request_id)
            })
            .cloned()
            .collect();
        if stuck.is_empty() {
            return Vec::new();
        }
        let cleared = match (self.provider.get(), self.machine_refs(&stuck).await) {
            (Ok(provider), Ok(refs)) => provider
                .abandon_release(AbandonInput { machines: refs })
                .await
                .map_err(|e| e.to_string()),
            (Err(e), _) => Err(e.to_string()),
            (_, Err(e)) => Err(e.to_string()),
        };
        let why = request
            .status_message
            .clone()
            .unwrap_or_else(|| request.status.to_string());
        let mut freed = Vec::new();
        for (i, m) in machines.iter_mut().enumerate().filter(|(_, m)| {
            m.status.is_live() && m.return_request_id.as_ref() == Some(&request.request_id)
        }) {
            freed.push(i);
            m.return_request_id = None;
            m.status_reason = Some(match &cleared {
                Ok(()) => format!(
                    "return {} ended {} ({why}); the machine is free to be returned again",
                    request.request_id, request.status
                ),
                Err(e) => format!(
                    "return {} ended {} ({why}); the machine is free to be returned again, but \
                     cleaning up after the return failed: {e}",
                    request.request_id, request.status
                ),
            });
            m.updated_at = now;
        }
        freed
    }
}

/// Whether a status read of `request` (with its stored `machines`) is answered from storage
/// without asking the provider: it is finished, has recorded what it created or released, and
/// nothing it holds can change any more ([`still_followed`]). A one-call process that finds
/// this of every request it is asked about needs no broker ([`crate::settled_statuses`]).
pub(crate) fn answered_from_storage(request: &Request, machines: &[Machine]) -> bool {
    request.status.is_terminal()
        && !is_unrecorded(request, machines.len())
        && !still_followed(request, machines)
}

/// An acquire that has not recorded what it created, or a return that has not recorded its
/// release: someone is still at it, or it was interrupted.
fn is_unrecorded(request: &Request, machines: usize) -> bool {
    is_unrecorded_acquire(request, machines) || is_unrecorded_return(request)
}

/// Whether a finished request must still ask the provider. A return is settled for good.
/// A finished acquire is followed while one of its machines may still exist, because a pod
/// that fails, is evicted or deleted after the request completed must not read `running`,
/// and, unless it was cancelled (its objects deleted), while one may be brought back
/// ([`may_come_back`]): a read that falls between the deletion of every pod and their
/// recreation must not be the last one. A cancel after the request finished keeps its
/// status, so such a request is still asked about; the reads find nothing and change nothing.
fn still_followed(request: &Request, machines: &[Machine]) -> bool {
    if request.request_type == RequestType::Return {
        return false;
    }
    let cancelled = request.status == RequestStatus::Cancelled;
    machines
        .iter()
        .any(|m| m.status.is_live() || (!cancelled && may_come_back(m)))
}

/// Whether a gone machine's controller may bring it back on its own: it went without an orb
/// return, and a StatefulSet (which recreates a lost pod under the same name) or a Deployment
/// (which starts a new pod for it) runs it.
pub(crate) fn may_come_back(m: &Machine) -> bool {
    m.status == MachineStatus::Terminated
        && m.return_request_id.is_none()
        && matches!(
            m.provider_api,
            Some(ProviderApi::Deployment | ProviderApi::StatefulSet)
        )
}

/// Folds a provider report into the stored machines of `request` in place: observed ones
/// take what was seen, and new observations of an acquire become machines of it
/// (replacement pods a controller made). Machines another return is taking back are left to
/// that return. Returns, per machine, whether it differs from what was stored.
///
/// `machines` is shared with the store's kept list; it is copied (once) only when a machine
/// is to be written into, so a read that sees nothing new copies nothing.
fn fold_report(
    request: &Request,
    machines: &mut MachineList,
    report: &StatusReport,
    now: jiff::Timestamp,
) -> Vec<bool> {
    // Sorted by id: the stored machines are asked in their order, which is the report's
    // (both by id) for an acquire's own pods, so most are found with one comparison.
    let observed: SortedMap<'_, &MachineObservation> = SortedMap::new(
        report
            .machines
            .iter()
            .map(|o| (o.machine_id.as_str(), &**o)),
    );
    let mut cursor = 0;
    let is_acquire = request.request_type == RequestType::Acquire;
    let mut updates = Vec::new();
    // Stored machines whose id the report names (ids are unique: the table's key).
    let mut matched = 0;
    let mut changed: Vec<bool> = machines
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let seen = observed.get_from(&mut cursor, m.machine_id.as_str());
            matched += usize::from(seen.is_some());
            match seen {
                Some(_) if is_acquire && m.return_request_id.is_some() => false,
                Some(o) => {
                    let folded = fold_observation(m, o, now);
                    if let Some(updated) = folded.machine {
                        updates.push((i, updated));
                    }
                    folded.changed
                }
                None => false,
            }
        })
        .collect();
    // A return only tracks the machines it was given; a report naming no machine beyond the
    // stored ones has none to add.
    let new: Vec<&MachineObservation> = if is_acquire && matched < observed.len() {
        let known: HashSet<&str> = machines.iter().map(|m| m.machine_id.as_str()).collect();
        let mut added = HashSet::new();
        report
            .machines
            .iter()
            .filter(|o| !known.contains(o.machine_id.as_str()) && added.insert(&o.machine_id))
            .map(|o| &**o)
            .collect()
    } else {
        Vec::new()
    };
    if updates.is_empty() && new.is_empty() {
        return changed;
    }
    let list: &mut Vec<Machine> = machines;
    for (i, updated) in updates {
        list[i] = updated;
    }
    for o in new {
        list.push(new_machine(o, request, now));
        changed.push(true);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::ProviderApi;
    use orb_core::lifecycle::Verdict;
    use orb_core::test_support;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn report_of(ids: &[&str]) -> StatusReport {
        StatusReport {
            verdict: Verdict::InProgress,
            fulfilled: 0,
            failed: 0,
            machines: ids
                .iter()
                .map(|id| MachineObservation::new(id, MachineStatus::Running).into())
                .collect(),
            message: None,
            note: None,
        }
    }

    /// An acquire's report may name pods orb has not stored yet (a controller's replacement,
    /// a bare pod recorded late): they become machines, whether the report also names every
    /// stored machine or leaves one out; a report naming only stored machines adds none.
    #[test]
    fn a_report_adds_the_machines_it_names_beyond_the_stored_ones() {
        let request = test_support::request(RequestType::Acquire)
            .created(t(0))
            .kind(ProviderApi::Pod)
            .build();
        let stored: MachineList = ["a", "b"]
            .map(|id| {
                test_support::machine(id)
                    .of(&request)
                    .status(MachineStatus::Running)
                    .build()
            })
            .to_vec()
            .into();
        let ids = |list: &MachineList| -> Vec<String> {
            list.iter().map(|m| m.machine_id.clone()).collect()
        };
        for (named, want) in [
            (&["a", "b", "c"][..], &["a", "b", "c"][..]),
            (&["a", "c"][..], &["a", "b", "c"][..]),
            (&["c", "d"][..], &["a", "b", "c", "d"][..]),
            (&["b", "a"][..], &["a", "b"][..]),
            (&["a", "a"][..], &["a", "b"][..]),
        ] {
            let mut machines = stored.clone();
            let changed = fold_report(&request, &mut machines, &report_of(named), t(5));
            assert_eq!(ids(&machines), want, "report of {named:?}");
            assert_eq!(changed.len(), want.len(), "report of {named:?}");
            assert!(
                changed[stored.len()..].iter().all(|c| *c),
                "added machines are changes: {named:?}"
            );
        }
    }
}
