//! Pure decisions of a status read: the pod timeout, a controller's state in brief, and the
//! verdict of an acquire or a return from what was observed.
//!
//! Capacity means live hosts: only `running` machines count as delivered. Exited pods are
//! `stopped`, pods that timed out are `failed`, vanished ones `terminated`; none of them makes
//! a request complete. A Job
//! is the exception: its request is complete when the Job is (every unit exited 0), and while
//! every unit runs it is [`Verdict::Underway`], which no deadline cuts short.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use orb_core::ProviderApi;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{MachineObservation, StatusMachines};
use orb_core::shared::Shared;

use crate::machine_state::{pending_reason, pod_age};
use crate::pod_read::PodRead;

/// What a status read settles of each pod with what the last read stored (the broker's
/// machines): a machine that ran never goes back to `pending`, and `pod_timeout_seconds`,
/// measured from the pod's creation, fails only units that never started.
#[derive(Debug)]
pub struct PodTimeoutPolicy<'a> {
    pub timeout: Duration,
    stored: &'a StatusMachines,
    /// The stored machines that were running, by name, with their pod's UID when known:
    /// made only when a pod lost its readiness (most reads have none).
    ran: OnceCell<HashMap<&'a str, Option<&'a str>>>,
}

impl<'a> PodTimeoutPolicy<'a> {
    pub fn new(timeout: Duration, stored: &'a StatusMachines) -> Self {
        Self {
            timeout,
            stored,
            ran: OnceCell::new(),
        }
    }

    /// Whether the stored machine of this very pod (not of an earlier incarnation of its
    /// name) was running.
    fn ran(&self, pod: &impl PodRead) -> bool {
        let ran = self.ran.get_or_init(|| {
            self.stored
                .iter()
                .filter(|m| m.status == MachineStatus::Running)
                .map(|m| (m.machine().machine_id.as_str(), m.machine().uid.as_deref()))
                .collect()
        });
        ran.get(pod.name())
            .is_some_and(|uid| uid.is_none() || *uid == pod.uid())
    }

    /// A pod in phase Running has started, so it is never timed out: a machine that was
    /// running and lost its readiness reads `running` with the not-ready reason, one that
    /// never was stays `pending` (its acquire completes when it is Ready). A still-pending
    /// pod that never started and is older than the timeout becomes `failed` with the reason
    /// it never ran (its pod is still there until someone removes it; once it is gone the
    /// machine reads `terminated`). Returns whether it timed out. A machine left as it is
    /// stays shared.
    pub fn apply(
        &self,
        pod: &impl PodRead,
        observation: &mut Shared<MachineObservation>,
        now: Timestamp,
    ) -> bool {
        if observation.status != MachineStatus::Pending {
            return false;
        }
        match pod.phase().unwrap_or("Pending") {
            "Pending" => {}
            "Running" => {
                if self.ran(pod) {
                    let observation: &mut MachineObservation = observation;
                    observation.status = MachineStatus::Running;
                }
                return false;
            }
            _ => return false,
        }
        let Some(age) = pod_age(pod, now) else {
            return false;
        };
        if age <= self.timeout {
            return false;
        }
        let why = pending_reason(pod).unwrap_or_else(|| "still pending".into());
        let observation: &mut MachineObservation = observation;
        observation.status = MachineStatus::Failed;
        observation.status_reason = Some(format!(
            "timed out: pending for more than {}s (pod_timeout_seconds): {why}",
            self.timeout.as_secs()
        ));
        if let Some(data) = observation.provider_data.as_object_mut() {
            data.insert("timed_out".into(), true.into());
        }
        true
    }
}

/// What the controller itself says, reduced to what the verdict needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerState {
    /// `spec.replicas` (Deployment/StatefulSet) or `spec.completions` (Job).
    pub desired: u32,
    pub ready: u32,
    /// Job only: pods that exited 0 (`status.succeeded`).
    pub succeeded: u32,
    /// Job only: condition `Complete=True`.
    pub complete: bool,
    /// A Job: all its pods ready is a step on the way, not the end; only `Complete` or a
    /// failure settles it.
    pub runs_to_completion: bool,
    /// A condition that says the controller gave up (Job `Failed`, Deployment
    /// `ProgressDeadlineExceeded`, `ReplicaFailure`), with its reason and message.
    pub failure: Option<String>,
}

impl ControllerState {
    /// A state that will not change without someone acting (safe to serve from a cache).
    pub fn is_settled(&self, requested: u32) -> bool {
        self.complete
            || self.failure.is_some()
            || (!self.runs_to_completion && self.desired == requested && self.ready >= requested)
    }
}

fn count(value: Option<i32>) -> u32 {
    value.unwrap_or(0).max(0) as u32
}

fn failing_condition<'a>(
    conditions: impl Iterator<Item = (&'a str, &'a str, Option<&'a str>, Option<&'a str>)>,
    failing: &[(&str, &str)],
) -> Option<String> {
    for (type_, status, reason, message) in conditions {
        if failing.iter().any(|(t, s)| *t == type_ && *s == status) {
            let reason = reason.unwrap_or(type_);
            return Some(match message {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_string(),
            });
        }
    }
    None
}

pub fn deployment_state(d: &Deployment) -> ControllerState {
    let status = d.status.clone().unwrap_or_default();
    let conditions = status.conditions.as_deref().unwrap_or_default();
    ControllerState {
        desired: count(d.spec.replicas),
        ready: count(status.ready_replicas),
        succeeded: 0,
        complete: false,
        runs_to_completion: false,
        failure: failing_condition(
            conditions.iter().map(|c| {
                (
                    c.type_.as_deref().unwrap_or(""),
                    c.status.as_deref().unwrap_or(""),
                    c.reason.as_deref(),
                    c.message.as_deref(),
                )
            }),
            &[("Progressing", "False"), ("ReplicaFailure", "True")],
        ),
    }
}

pub fn statefulset_state(s: &StatefulSet) -> ControllerState {
    let status = s.status.clone().unwrap_or_default();
    ControllerState {
        desired: count(s.spec.replicas),
        ready: count(status.ready_replicas),
        succeeded: 0,
        complete: false,
        runs_to_completion: false,
        failure: None,
    }
}

pub fn job_state(j: &Job) -> ControllerState {
    let status = j.status.clone().unwrap_or_default();
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let complete = conditions
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    ControllerState {
        desired: count(j.spec.as_ref().and_then(|s| s.completions)),
        ready: count(status.ready),
        succeeded: count(status.succeeded),
        complete,
        runs_to_completion: true,
        failure: failing_condition(
            conditions.iter().map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.as_deref(),
                    c.message.as_deref(),
                )
            }),
            &[("Failed", "True")],
        ),
    }
}

/// The state of a Job that no longer exists, from what orb saw of its pods: `seen_exited` of
/// `requested` units were seen exit 0 (a pod Succeeded now, or a machine stored `stopped`
/// whose pod is gone). A Job removed once it finished (`ttlSecondsAfterFinished`) leaves no
/// conditions to read and its pods go with it, so every unit seen exit 0 stands for its
/// `Complete`; anything less cannot be told from a Job deleted outside orb, and fails saying so.
pub fn removed_job_state(requested: u32, seen_exited: u32) -> ControllerState {
    let complete = seen_exited >= requested;
    ControllerState {
        desired: requested,
        ready: 0,
        succeeded: seen_exited,
        complete,
        runs_to_completion: true,
        failure: (!complete).then(|| {
            format!(
                "the Job no longer exists, and {seen_exited} of {requested} pods were seen exit 0 \
                 before it went; if ttlSecondsAfterFinished removed it before a status read saw \
                 it finish, set ttlSecondsAfterFinished above the polling interval (orb serve \
                 reads a Job's pods as they change)"
            )
        }),
    }
}

/// A verdict with the counts and message the broker stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusDecision {
    pub verdict: Verdict,
    pub fulfilled: u32,
    pub failed: u32,
    pub message: Option<String>,
}

#[derive(Debug, Default)]
struct Tally {
    running: u32,
    pending: u32,
    /// Failed machines, timed-out ones included.
    failed: u32,
    first_failure: Option<String>,
    /// Machines that failed for another reason than `pod_timeout_seconds`.
    first_hard_failure: Option<String>,
    timed_out: u32,
    first_timeout: Option<String>,
    /// Why the first exited or timed-out machine stopped (explains a request with none left).
    first_ended: Option<String>,
}

/// Whether [`PodTimeoutPolicy`] timed this machine out.
pub fn is_timed_out(m: &MachineObservation) -> bool {
    m.provider_data.get("timed_out") == Some(&serde_json::Value::Bool(true))
}

fn tally(machines: &[Shared<MachineObservation>]) -> Tally {
    let mut t = Tally::default();
    for m in machines {
        match m.status {
            MachineStatus::Running => t.running += 1,
            MachineStatus::Pending | MachineStatus::Launching | MachineStatus::Unknown => {
                t.pending += 1
            }
            MachineStatus::Failed => {
                t.failed += 1;
                let line = format!(
                    "{}: {}",
                    m.machine_id,
                    m.status_reason.as_deref().unwrap_or("failed")
                );
                if is_timed_out(m) {
                    t.timed_out += 1;
                    t.first_timeout.get_or_insert_with(|| line.clone());
                } else {
                    t.first_hard_failure.get_or_insert_with(|| line.clone());
                }
                t.first_failure.get_or_insert(line);
            }
            MachineStatus::Terminated | MachineStatus::Stopped if t.first_ended.is_none() => {
                t.first_ended = Some(format!(
                    "{}: {}",
                    m.machine_id,
                    m.status_reason.as_deref().unwrap_or("terminated")
                ));
            }
            _ => {}
        }
    }
    t
}

/// Everything the acquire verdict depends on.
#[derive(Debug, Clone, Copy)]
pub struct AcquireFacts<'a> {
    pub kind: ProviderApi,
    pub requested: u32,
    pub machines: &'a [Shared<MachineObservation>],
    /// `None` for bare pods, or when the controller no longer exists.
    pub controller: Option<&'a ControllerState>,
    /// Pods whose create call failed (bare pods only), with the first reason.
    pub create_failures: u32,
    pub create_failure_reason: Option<&'a str>,
}

/// The verdict of an acquire's status read.
pub fn decide_acquire(facts: &AcquireFacts<'_>) -> StatusDecision {
    let t = tally(facts.machines);
    let failed = t.failed + facts.create_failures;
    let first_failure = t.first_failure.clone().or_else(|| {
        facts
            .create_failure_reason
            .map(|r| format!("create failed: {r}"))
    });
    let progress = format!(
        "{} of {} running, {} pending, {} failed",
        t.running, facts.requested, t.pending, failed
    );
    let decision = |verdict, message: String| StatusDecision {
        verdict,
        fulfilled: t.running,
        failed,
        message: Some(message),
    };
    let failed_verdict = |reason: String| Verdict::Failed { reason };
    match facts.kind {
        ProviderApi::Job => {
            if let Some(state) = facts.controller {
                if state.complete {
                    return StatusDecision {
                        verdict: Verdict::Fulfilled,
                        fulfilled: facts.requested,
                        failed: 0,
                        message: Some(format!(
                            "Job complete: {} of {} pods exited 0",
                            state.desired, facts.requested
                        )),
                    };
                }
                if let Some(failure) = &state.failure {
                    let reason = format!("Job failed: {failure}");
                    return decision(failed_verdict(reason.clone()), reason);
                }
            }
            // Only the Job fails a Job request (above), or its deadline: a pod waiting in
            // ErrImagePull is retried while the Job goes on, and a pod that failed fails the
            // Job (backoffLimit 0), which then says so. Such pods are shown, not judged. A unit
            // that waited past pod_timeout_seconds does not fail the Job either (its pod may
            // still start; deleting it would fail the Job and kill the running ones).
            let not_running = t.failed - t.timed_out;
            let shown = match &t.first_hard_failure {
                Some(first) if not_running > 0 => {
                    format!(", {not_running} not running (first: {first})")
                }
                _ => String::new(),
            };
            if let Some(first) = facts
                .create_failure_reason
                .map(|r| format!("create failed: {r}"))
                .or_else(|| {
                    facts
                        .controller
                        .is_none()
                        .then(|| "the Job of this request no longer exists".into())
                })
            {
                let reason = format!("Job failed: {first}");
                return decision(failed_verdict(reason.clone()), reason);
            }
            // A unit has started once its pod runs or has exited 0. Started units count as
            // fulfilled for the deadline (units that never started time out, the request is
            // then partial), but only the Job's `Complete` condition completes the request.
            let done = facts.controller.map_or(0, |s| s.succeeded);
            let started = (t.running + done).min(facts.requested);
            let decision = |verdict, message: String| StatusDecision {
                verdict,
                fulfilled: started,
                failed,
                message: Some(message),
            };
            if let Some(timeout) = &t.first_timeout {
                if started == 0 {
                    let reason = format!("Job failed: no pod started; {timeout}");
                    return decision(failed_verdict(reason.clone()), reason);
                }
                return decision(
                    Verdict::Partial { is_final: true },
                    format!(
                        "{started} of {} Job pods started, {} timed out (first: {timeout}); the \
                         Job keeps running the started pods: return the request to remove it",
                        facts.requested, t.timed_out
                    ),
                );
            }
            if started >= facts.requested && t.pending == 0 {
                return decision(
                    Verdict::Underway,
                    format!(
                        "Job running: {} of {} pods running, {done} exited 0; the request \
                         completes when every pod has exited 0",
                        t.running, facts.requested
                    ),
                );
            }
            decision(
                Verdict::InProgress,
                format!(
                    "{started} of {} Job pods started ({done} exited 0), {} pending{shown}",
                    facts.requested, t.pending
                ),
            )
        }
        ProviderApi::Pod => {
            if t.running >= facts.requested && failed == 0 {
                decision(Verdict::Fulfilled, progress)
            } else if t.pending > 0 {
                decision(Verdict::InProgress, progress)
            } else if t.running == 0 {
                let reason = first_failure
                    .or(t.first_ended.clone())
                    .unwrap_or_else(|| "no pod of the request is running any more".into());
                decision(failed_verdict(reason.clone()), reason)
            } else {
                // Bare pods are never replaced: waiting longer cannot add hosts.
                decision(Verdict::Partial { is_final: true }, progress)
            }
        }
        ProviderApi::Deployment | ProviderApi::StatefulSet => {
            let seen = t.running + t.pending + t.failed;
            let Some(state) = facts.controller else {
                let reason = format!("the {} of this request no longer exists", facts.kind);
                return decision(failed_verdict(reason.clone()), reason);
            };
            if t.running >= facts.requested && t.failed == 0 {
                decision(Verdict::Fulfilled, progress)
            } else if t.pending > 0 || (seen < state.desired && state.failure.is_none()) {
                // Replacement pods still coming: never fail a controller while it works.
                decision(Verdict::InProgress, progress)
            } else if t.running == 0 {
                let reason = state
                    .failure
                    .clone()
                    .or(first_failure)
                    .or(t.first_ended.clone())
                    .unwrap_or_else(|| format!("no pod of the {} is running", facts.kind));
                decision(failed_verdict(reason.clone()), reason)
            } else {
                decision(Verdict::Partial { is_final: false }, progress)
            }
        }
    }
}

/// The verdict of a return: complete once every machine is gone.
pub fn decide_return(machines: &[Shared<MachineObservation>]) -> StatusDecision {
    let released = machines
        .iter()
        .filter(|m| m.status == MachineStatus::Terminated)
        .count() as u32;
    let total = machines.len() as u32;
    let message = Some(format!("{released} of {total} machines released"));
    StatusDecision {
        verdict: if released == total {
            Verdict::Fulfilled
        } else {
            Verdict::InProgress
        },
        fulfilled: released,
        failed: 0,
        message,
    }
}

#[cfg(test)]
mod tests;
