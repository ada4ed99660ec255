//! Status reads: list the request's pods, translate each with the one translator, apply the
//! pod timeout (releasing timed-out pods through the handler's own release path so a
//! controller does not recreate them), and let the pure verdict decide.

use std::collections::BTreeMap;

use jiff::Timestamp;
use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{
    MachineObservation, REMOVED_BY_ORB, ReadAhead, ReadAheadFuture, StatusInput, StatusMachine,
    StatusReport, removed_by_orb,
};
use orb_core::request::RequestType;
use orb_core::shared::Shared;
use orb_core::sorted::SortedNames;

use crate::error::K8sError;
use crate::fulfilment::{
    AcquireFacts, PodTimeoutPolicy, StatusDecision, decide_acquire, decide_return,
    removed_job_state,
};
use crate::handlers::{Victims, handler_for};
use crate::kept::Kept;
use crate::pod_read::PodRead;
use crate::provider::K8sProvider;
use crate::provider_data::RequestRecord;
use crate::release_plan::{POD_DELETION_COST, VICTIM_DELETION_COST};

fn report(decision: StatusDecision, machines: Vec<Shared<MachineObservation>>) -> StatusReport {
    StatusReport {
        verdict: decision.verdict,
        fulfilled: decision.fulfilled,
        failed: decision.failed,
        machines,
        message: decision.message,
        note: None,
    }
}

/// `notes` (what this read did beside reading) appended to the decision's message.
fn with_notes(decision: &mut StatusDecision, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    let joined = notes.join("; ");
    decision.message = Some(match decision.message.take() {
        Some(m) => format!("{m}; {joined}"),
        None => joined,
    });
}

/// A status read the cluster kept from finishing: the request stays where it is and the next
/// read asks again. A cluster that did not answer is said so in those words, whatever the
/// transport error, so a poller sees the same message for every outage.
fn unread(error: &K8sError) -> StatusReport {
    keep_polling(if error.is_transient() {
        format!(
            "the cluster did not answer while reading the machines' state ({error}); the next \
             status read asks again"
        )
    } else {
        format!("{error}; the next status read tries again")
    })
}

fn keep_polling(message: String) -> StatusReport {
    StatusReport {
        verdict: Verdict::InProgress,
        fulfilled: 0,
        failed: 0,
        machines: Vec::new(),
        message: Some(message),
        note: None,
    }
}

/// Timed-out pods the release path should still act on: not already marked for deletion by
/// an earlier read (a Deployment must not be scaled down twice for the same pod).
fn still_to_release(kind: ProviderApi, pods: &[&Kept]) -> Victims {
    let mut victims = Victims::default();
    for pod in pods
        .iter()
        .filter(|p| kind != ProviderApi::Deployment || !carries_victim_mark(p))
    {
        let name = pod.name().to_string();
        if let Some(uid) = pod.uid() {
            victims.uids.insert(name.clone(), uid.to_string());
        }
        victims.names.push(name);
    }
    victims
}

/// Says on each timed-out machine that orb removed its pod itself ([`REMOVED_BY_ORB`]), so no
/// later read reports it deleted outside orb, nor getReturnRequests as the cluster's doing.
fn mark_removed(machines: &mut [Shared<MachineObservation>], timed_out: &[&Kept]) {
    let names = SortedNames::new(timed_out.iter().map(|p| p.name()));
    for m in machines
        .iter_mut()
        .filter(|m| names.contains(&m.machine_id))
    {
        let m: &mut MachineObservation = m;
        if let Some(reason) = &mut m.status_reason {
            reason.push_str("; deleted by orb (delete_timed_out_pods)");
        }
        if let Some(data) = m.provider_data.as_object_mut() {
            data.insert(REMOVED_BY_ORB.into(), true.into());
        }
    }
}

/// Units of a Job seen exit 0: a pod Succeeded now, or a machine stored `stopped` whose pod
/// is gone now.
fn seen_exited(input: &StatusInput, machines: &[Shared<MachineObservation>]) -> u32 {
    let stopped = SortedNames::new(
        input
            .machines
            .iter()
            .filter(|m| m.status == MachineStatus::Stopped)
            .map(|m| m.machine().machine_id.as_str()),
    );
    machines
        .iter()
        .filter(|m| {
            m.status == MachineStatus::Stopped
                || (m.status == MachineStatus::Terminated && stopped.contains(&m.machine_id))
        })
        .count() as u32
}

/// Whether a Deployment release marked the pod to go first.
fn carries_victim_mark(pod: &Kept) -> bool {
    pod.annotation(POD_DELETION_COST) == Some(VICTIM_DELETION_COST)
}

/// A pod of a Deployment return that carries the victim mark and is not being removed: if
/// the ReplicaSet has settled, it passed this pod over.
fn marked_and_standing(pod: &Kept) -> bool {
    pod.meta().deletion_timestamp.is_none() && carries_victim_mark(pod)
}

/// Why a stored machine whose pod is no longer listed reads `terminated`.
pub const GONE_REASON: &str =
    "the pod no longer exists (deleted outside orb, evicted, or removed by its controller)";

/// The pods a status read expects to find: stored machines not known gone, and any pod the
/// acquire created that orb has not stored as a machine yet (bare pods).
pub(crate) fn expected_pods<'a>(
    input: &'a StatusInput,
    record: &'a RequestRecord,
) -> SortedNames<'a> {
    let stored = SortedNames::new(
        input
            .machines
            .iter()
            .map(|m| m.machine().machine_id.as_str()),
    );
    let live = SortedNames::new(
        input
            .machines
            .iter()
            .filter(|m| m.status.is_live())
            .map(|m| m.machine().machine_id.as_str()),
    );
    let recorded = SortedNames::new(record.pod_names.iter().map(String::as_str));
    live.union(recorded.minus(&stored))
}

/// Whether `names` (the pods a view holds) include every pod in `expected`. A view that lacks
/// one (a watch cache not yet told of it, a LIST taken before its machine was recorded) is not
/// trusted to call that machine gone.
pub(crate) fn holds_every<'a>(
    names: impl IntoIterator<Item = &'a str>,
    expected: &SortedNames<'_>,
) -> bool {
    SortedNames::new(names).contains_all(expected)
}

/// An acquire's pods LISTed before the broker read its machines
/// ([`Provider::read_ahead`](orb_core::provider::Provider::read_ahead)): a direct status read
/// of 5,000 pods spends as long reading the machine rows as waiting for the apiserver, and
/// this way does both at once.
pub(crate) struct PodsAhead {
    namespace: String,
    request_id: String,
    label_prefix: String,
    pods: Result<Vec<Kept>, K8sError>,
}

impl PodsAhead {
    /// Whether this read was of `record`'s pods.
    fn covers(&self, record: &RequestRecord) -> bool {
        self.namespace == record.namespace
            && self.request_id == record.request_id
            && self.label_prefix == record.label_prefix
    }

    /// The pods, if the read holds every pod the status read expects. A machine recorded
    /// after the LIST was taken (by an acquire in another process) is missing from it
    /// without being gone, so then the pods are LISTed again (`None`); a failed read is
    /// the read's answer.
    pub(crate) fn answer(
        self,
        record: &RequestRecord,
        expected: &SortedNames<'_>,
    ) -> Option<Result<Vec<Kept>, K8sError>> {
        if !self.covers(record) {
            return None;
        }
        let pods = match self.pods {
            Ok(pods) => pods,
            Err(e) => return Some(Err(e)),
        };
        if !holds_every(pods.iter().map(|p| p.name()), expected) {
            tracing::debug!(
                request_id = record.request_id,
                "a pod recorded after the read-ahead LIST is missing from it: listing again"
            );
            return None;
        }
        Some(Ok(pods))
    }
}

impl K8sProvider {
    /// Starts the LIST of an acquire's pods that its status read will need, unless the
    /// watch cache answers those reads.
    pub(crate) fn read_pods_ahead(
        &self,
        request_id: &RequestId,
        request_type: RequestType,
        provider_data: &serde_json::Value,
    ) -> Option<ReadAheadFuture<'_>> {
        if request_type != RequestType::Acquire || self.pod_cache().is_some() {
            return None;
        }
        // Data that is not a record is reported by the status read itself.
        let record = RequestRecord::from_stored(request_id.as_str(), provider_data)
            .ok()
            .flatten()?;
        Some(Box::pin(async move {
            let pods = match self.client().await {
                Ok(client) => {
                    self.guarded(
                        record.kind,
                        crate::handlers::request_kept_pods(client, &record),
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            ReadAhead::new(PodsAhead {
                namespace: record.namespace,
                request_id: record.request_id,
                label_prefix: record.label_prefix,
                pods,
            })
        }))
    }

    pub(crate) async fn status_inner(
        &self,
        input: StatusInput,
        ahead: Option<PodsAhead>,
    ) -> Result<StatusReport, K8sError> {
        let note = self.stale_view_note(&input);
        let mut report = match input.request_type {
            RequestType::Acquire => self.acquire_status(input, ahead).await,
            RequestType::Return => self.return_status(input).await,
        }?;
        report.note = note;
        Ok(report)
    }

    /// When the pod watch covering the request's namespace is failing but its last view
    /// still answers reads (up to `stale_cache_timeout_seconds`), the report may be that much
    /// out of date: the reader is told so. Nothing is decoded while every watch is healthy.
    fn stale_view_note(&self, input: &StatusInput) -> Option<String> {
        let cache = self.pod_cache()?;
        if !cache.any_failing() {
            return None;
        }
        let mut records: Vec<&serde_json::Value> = vec![&input.provider_data];
        let mut seen = std::collections::HashSet::new();
        for m in &input.machines {
            if seen.insert(m.request_id.to_string()) {
                records.push(m.request_provider_data);
            }
        }
        let (failing_for, namespace) = records
            .into_iter()
            // Only a note: a record that cannot be read is reported by the read itself.
            .filter_map(|data| {
                RequestRecord::from_stored(input.request_id.as_str(), data)
                    .ok()
                    .flatten()
            })
            .filter_map(|r| cache.failing_for(&r.namespace).map(|d| (d, r.namespace)))
            .max()?;
        Some(format!(
            "served from orb serve's watch cache, whose pod watch in namespace {namespace} has \
             been failing for {} s: this may be out of date until the apiserver answers again",
            failing_for.as_secs()
        ))
    }

    async fn acquire_status(
        &self,
        input: StatusInput,
        ahead: Option<PodsAhead>,
    ) -> Result<StatusReport, K8sError> {
        let Some(record) =
            RequestRecord::from_stored(input.request_id.as_str(), &input.provider_data)?
        else {
            // A failed acquire is failed by the broker at once, so no bookkeeping means the
            // acquire is still creating (maybe in another process) or was interrupted; `orb
            // serve` resumes interrupted acquires, and the deadline settles the rest.
            return Ok(keep_polling(format!(
                "request {} has no Kubernetes objects recorded yet: its acquire is still \
                 running, or was interrupted and waits for orb serve to resume it",
                input.request_id
            )));
        };
        let kind = record.kind;
        let config = self.effective_config(input.template.as_ref())?;
        let client = self.client().await?;
        let cx = self.cx(client);
        let expected = expected_pods(&input, &record);
        let pods = match self.live_pods(client, &record, &expected, ahead).await {
            Ok(pods) => pods,
            Err(e) => return Ok(unread(&e)),
        };
        let controller = match self
            .guarded(
                kind,
                handler_for(kind).controller_state(&cx, &record, input.requested_count),
            )
            .await
        {
            Ok(state) => state,
            Err(e) => return Ok(unread(&e)),
        };
        let resource_id = record.controller_name().map(str::to_string);
        let policy = PodTimeoutPolicy::new(config.pod_timeout(), &input.machines);
        let now = Timestamp::now();
        let mut machines = Vec::with_capacity(pods.len());
        let mut timed_out = Vec::new();
        for pod in pods.iter().map(AsRef::as_ref) {
            let mut observation =
                pod.observation(kind, resource_id.as_deref().unwrap_or(pod.name()));
            self.annotate_with_node(&mut observation, pod);
            if policy.apply(pod, &mut observation, now) {
                timed_out.push(pod);
            }
            machines.push(observation);
        }
        let mut notes = Vec::new();
        if config.delete_timed_out_pods && !timed_out.is_empty() {
            let started = machines.iter().any(|m| m.status == MachineStatus::Running)
                || controller.as_ref().is_some_and(|c| c.succeeded > 0);
            if kind == ProviderApi::Job && started {
                // Deleting a Job pod fails the Job (backoffLimit 0), and the Job controller then
                // stops every running pod: a pod that waited must not take them down.
                notes.push(format!(
                    "timed-out Job pods left in place ({}): removing them would fail the Job and \
                     stop its running pods; return the request to remove the Job",
                    timed_out
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            } else {
                let mut victims = still_to_release(kind, &timed_out);
                // Pods left out were released by an earlier read (a Deployment's marked pods).
                let mut removed = victims.names.is_empty();
                if !victims.names.is_empty() {
                    let releasing: std::collections::HashSet<&str> =
                        victims.names.iter().map(String::as_str).collect();
                    victims.kept = Some(
                        machines
                            .iter()
                            .map(|m| m.machine_id.clone())
                            .filter(|id| !releasing.contains(id.as_str()))
                            .collect(),
                    );
                    match self
                        .guarded(
                            kind,
                            handler_for(kind).release(&cx, &record, victims.clone()),
                        )
                        .await
                    {
                        Ok(_) => {
                            self.metrics()
                                .timed_out
                                .get_or_create(&crate::metrics::KindLabels {
                                    kind: crate::daemon::reconcile::kind_label(kind),
                                })
                                .inc_by(victims.names.len() as u64);
                            tracing::info!(
                                request_id = %record.request_id,
                                pods = ?victims.names,
                                "deleted pods pending past pod_timeout_seconds (delete_timed_out_pods)"
                            );
                            removed = true;
                            notes.push(format!(
                                "released timed-out pods: {}",
                                victims.names.join(", ")
                            ))
                        }
                        Err(e) => notes.push(format!("timed-out pods not released: {e}")),
                    }
                }
                if removed {
                    mark_removed(&mut machines, &timed_out);
                }
            }
        }
        // A failed Job runs nothing any more (its controller stopped its pods), and HostFactory,
        // told the request failed, returns none of it: orb deletes it, as it deletes the pods
        // it timed out, so nothing with orb's labels is left behind.
        if kind == ProviderApi::Job
            && let (Some(job), Some(failure)) = (
                resource_id.as_deref(),
                controller.as_ref().and_then(|c| c.failure.as_deref()),
            )
        {
            match crate::handlers::delete_job(&cx, &record.namespace, job).await {
                Ok(()) => {
                    tracing::info!(request_id = %record.request_id, job, "deleted the failed Job ({failure})");
                    notes.push(format!("orb deleted the failed Job {job}"));
                }
                Err(e) => notes.push(format!("the failed Job {job} was not deleted: {e}")),
            }
        }
        let missing = expected.minus(&SortedNames::new(
            machines.iter().map(|m| m.machine_id.as_str()),
        ));
        // Built only when a pod is missing: most reads of a large request miss none.
        let removed_earlier = if missing.is_empty() {
            SortedNames::new(std::iter::empty())
        } else {
            SortedNames::new(
                input
                    .machines
                    .iter()
                    .filter(|m| removed_by_orb(&m.provider_data))
                    .map(|m| m.machine().machine_id.as_str()),
            )
        };
        for name in missing.iter() {
            let mut gone = MachineObservation::new(name, MachineStatus::Terminated);
            gone.status_reason = Some(if removed_earlier.contains(name) {
                "the pod no longer exists".into()
            } else {
                GONE_REASON.into()
            });
            gone.resource_id = Some(resource_id.clone().unwrap_or_else(|| name.to_string()));
            machines.push(gone.into());
        }
        machines.sort_by(|a, b| a.machine_id.cmp(&b.machine_id));
        // A Job gone (removed once it finished, or deleted) leaves what orb saw of its pods.
        let controller = match controller {
            None if kind == ProviderApi::Job => Some(removed_job_state(
                input.requested_count,
                seen_exited(&input, &machines),
            )),
            state => state,
        };
        let mut decision = decide_acquire(&AcquireFacts {
            kind,
            requested: input.requested_count,
            machines: &machines,
            controller: controller.as_ref(),
            create_failures: record.failed_pod_names.len() as u32,
            create_failure_reason: record.create_failures.values().next().map(String::as_str),
        });
        with_notes(&mut decision, &notes);
        Ok(report(decision, machines))
    }

    async fn return_status(&self, input: StatusInput) -> Result<StatusReport, K8sError> {
        let client = self.client().await?;
        let mut by_request: BTreeMap<String, Vec<StatusMachine<'_>>> = BTreeMap::new();
        for m in &input.machines {
            by_request
                .entry(m.request_id.to_string())
                .or_default()
                .push(m);
        }
        let mut machines = Vec::new();
        let mut notes = Vec::new();
        for (request_id, refs) in &by_request {
            let Some(record) =
                RequestRecord::from_stored(request_id, refs[0].request_provider_data)?
            else {
                for m in refs {
                    let mut gone =
                        MachineObservation::new(&m.machine_id, MachineStatus::Terminated);
                    gone.status_reason = Some("no Kubernetes objects are recorded for it".into());
                    machines.push(gone.into());
                }
                continue;
            };
            let kind = record.kind;
            let expected = SortedNames::new(
                refs.iter()
                    .filter(|m| m.status.is_live())
                    .map(|m| m.machine_id.as_str()),
            );
            let pods = match self.live_pods(client, &record, &expected, None).await {
                Ok(pods) => pods,
                Err(e) => return Ok(unread(&e)),
            };
            let by_name: std::collections::HashMap<&str, &Kept> =
                pods.iter().map(|p| (p.name(), p.as_ref())).collect();
            let mut passed_over = Vec::new();
            for m in refs {
                let current = by_name
                    .get(m.machine_id.as_str())
                    .copied()
                    .filter(|p| m.uid.is_none() || p.uid() == m.uid.as_deref());
                machines.push(match current {
                    Some(pod) => {
                        if kind == ProviderApi::Deployment && marked_and_standing(pod) {
                            passed_over.push(crate::handlers::SeenPod::of(pod));
                        }
                        let resource = record.controller_name().unwrap_or(&m.machine_id);
                        let mut observation = pod.observation(kind, resource);
                        self.annotate_with_node(&mut observation, pod);
                        observation
                    }
                    None => {
                        let mut gone =
                            MachineObservation::new(&m.machine_id, MachineStatus::Terminated);
                        gone.status_reason = Some("released: the pod is gone".into());
                        gone.into()
                    }
                });
            }
            if !passed_over.is_empty() {
                notes.push(
                    match crate::handlers::delete_passed_over(
                        client,
                        &record,
                        input.request_id.as_str(),
                        &passed_over,
                    )
                    .await
                    {
                        Ok(deleted) if deleted.is_empty() => continue,
                        Ok(deleted) => format!(
                            "the ReplicaSet scaled down other pods than the named ones (its view \
                             lagged orb's deletion marks), so orb deleted {}; the ReplicaSet \
                             replaces them",
                            deleted.join(", ")
                        ),
                        Err(e) => format!("{e}; the next status read tries again"),
                    },
                );
            }
        }
        let mut decision = decide_return(&machines);
        with_notes(&mut decision, &notes);
        Ok(report(decision, machines))
    }
}
