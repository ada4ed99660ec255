//! The request lifecycle: the only code that changes a request's status.
//!
//! Callers feed events (start, a provider verdict, cancel, fail, a deadline sweep) and get
//! back the transition that happened, if any. Only the edges in [`can_transition`] exist;
//! terminal states are final. The deadline is `started_at + grace` and is evaluated lazily,
//! whenever an event is applied, so a request read after its deadline is settled at once.
//! The deadline is for machines that never start: once the provider says every unit is
//! [`Verdict::Underway`] (a Job whose pods all run), the request has no deadline any more
//! and ends when the work does.

use jiff::{SignedDuration, Timestamp};

use crate::request::{Request, RequestStatus, RequestType};

/// Defaults from the reference broker: `request.default_timeout` and
/// `request.default_grace_period`, both 300 seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
pub const DEFAULT_GRACE_SECS: u64 = 300;

/// What the provider concluded from the cluster on one status read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing conclusive yet; keep waiting.
    InProgress,
    /// Every unit started and now runs to its end (a Job): not delivered yet, but nothing is
    /// waiting for capacity either, so the deadline no longer applies.
    Underway,
    /// Every requested machine is delivered (acquire) or released (return).
    Fulfilled,
    /// Some but not all; `is_final` means waiting longer cannot help.
    Partial { is_final: bool },
    /// Nothing was or will be delivered.
    Failed { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleEvent {
    /// The request leaves `pending`; the deadline is fixed at `now + grace_secs`.
    Start {
        grace_secs: u64,
    },
    /// A provider status read, with the counts it saw.
    ProviderVerdict {
        verdict: Verdict,
        fulfilled: u32,
        failed: u32,
        message: Option<String>,
    },
    Cancel {
        reason: String,
    },
    Fail {
        reason: String,
    },
    /// Settle a request whose deadline has passed; a no-op otherwise.
    DeadlineSweep,
    /// An interrupted acquire creates again: its machines get a whole grace period from now
    /// (the deadline moves to `now + grace_secs` unless it is later already), so a read long
    /// after orb stopped judges the resume's result, not the time nobody was creating.
    Resume {
        grace_secs: u64,
    },
}

impl LifecycleEvent {
    fn name(&self) -> &'static str {
        match self {
            Self::Start { .. } => "start",
            Self::ProviderVerdict { .. } => "provider verdict",
            Self::Cancel { .. } => "cancel",
            Self::Fail { .. } => "fail",
            Self::DeadlineSweep => "deadline sweep",
            Self::Resume { .. } => "resume",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    #[error(
        "request {request_id} is already {status}; a {event} cannot change a finished request \
         (start a new request instead)"
    )]
    AlreadyTerminal {
        request_id: String,
        status: RequestStatus,
        event: &'static str,
    },
    #[error(
        "request {request_id} cannot go from {from} to {to}; this is a bug in the caller, \
         please report it with the request id"
    )]
    IllegalTransition {
        request_id: String,
        from: RequestStatus,
        to: RequestStatus,
    },
}

/// A status change that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub from: RequestStatus,
    pub to: RequestStatus,
}

/// The legal edges. Terminal states have none (the reference's `partial → complete`
/// back-compat edge is deliberately absent: a finished request stays finished).
pub fn can_transition(from: RequestStatus, to: RequestStatus) -> bool {
    use RequestStatus::*;
    match from {
        Pending => matches!(
            to,
            InProgress | Acquiring | Cancelled | Failed | Complete | Partial | PartialPending
        ),
        InProgress | Acquiring => matches!(
            to,
            Complete | Partial | PartialPending | Failed | Cancelled | Timeout | Acquiring
        ),
        PartialPending => matches!(to, Complete | Partial | Failed | Cancelled | Timeout),
        Complete | Partial | Failed | Cancelled | Timeout => false,
    }
}

/// Applies one event at time `now`. Returns the status change, or `None` when the status
/// stayed (counts and messages may still have been updated).
pub fn apply(
    request: &mut Request,
    event: LifecycleEvent,
    now: Timestamp,
) -> Result<Option<Transition>, LifecycleError> {
    let from = request.status;
    if from.is_terminal() {
        return match event {
            LifecycleEvent::DeadlineSweep => Ok(None),
            other => Err(LifecycleError::AlreadyTerminal {
                request_id: request.request_id.to_string(),
                status: from,
                event: other.name(),
            }),
        };
    }
    let (next, message) = match event {
        LifecycleEvent::Start { grace_secs } => {
            if from != RequestStatus::Pending {
                return Err(LifecycleError::IllegalTransition {
                    request_id: request.request_id.to_string(),
                    from,
                    to: RequestStatus::InProgress,
                });
            }
            request.started_at = Some(now);
            request.deadline_at = Some(now + SignedDuration::from_secs(grace_secs as i64));
            (RequestStatus::InProgress, None)
        }
        LifecycleEvent::ProviderVerdict {
            verdict,
            fulfilled,
            failed,
            message,
        } => {
            request.fulfilled_count = fulfilled;
            request.failed_count = failed;
            if verdict == Verdict::Underway {
                request.deadline_at = None;
            }
            let next = status_for_verdict(request, &verdict, now);
            let message = match verdict {
                Verdict::Failed { reason } => Some(message.unwrap_or(reason)),
                _ => message,
            };
            (next, message)
        }
        LifecycleEvent::Cancel { reason } => (RequestStatus::Cancelled, Some(reason)),
        LifecycleEvent::Fail { reason } => (RequestStatus::Failed, Some(reason)),
        LifecycleEvent::DeadlineSweep => (from, None),
        LifecycleEvent::Resume { grace_secs } => {
            let fresh = now + SignedDuration::from_secs(grace_secs as i64);
            request.deadline_at = Some(request.deadline_at.map_or(fresh, |d| d.max(fresh)));
            (from, None)
        }
    };
    if let Some(message) = message {
        request.status_message = Some(message);
    }
    let next = if next.is_terminal() {
        next
    } else {
        settle_if_past_deadline(request, next, now)
    };
    move_to(request, next, now)
}

fn status_for_verdict(request: &Request, verdict: &Verdict, now: Timestamp) -> RequestStatus {
    let current = request.status;
    match verdict {
        Verdict::Fulfilled => RequestStatus::Complete,
        Verdict::Failed { .. } => RequestStatus::Failed,
        Verdict::InProgress | Verdict::Underway => match current {
            RequestStatus::Pending => RequestStatus::InProgress,
            other => other,
        },
        Verdict::Partial { is_final } => {
            let past_deadline = request.deadline_at.is_some_and(|d| d <= now);
            if *is_final || past_deadline || request.request_type == RequestType::Return {
                RequestStatus::Partial
            } else {
                RequestStatus::PartialPending
            }
        }
    }
}

fn settle_if_past_deadline(
    request: &mut Request,
    candidate: RequestStatus,
    now: Timestamp,
) -> RequestStatus {
    let waiting = matches!(
        candidate,
        RequestStatus::InProgress | RequestStatus::Acquiring | RequestStatus::PartialPending
    );
    let expired = request.deadline_at.is_some_and(|deadline| deadline <= now);
    if !(waiting && expired) {
        return candidate;
    }
    let (done, wanted) = (request.fulfilled_count, request.requested_count);
    let settled = if done >= wanted {
        RequestStatus::Complete
    } else if done > 0 {
        RequestStatus::Partial
    } else {
        RequestStatus::Timeout
    };
    if settled != RequestStatus::Complete {
        request.status_message = Some(format!("Deadline exceeded: {done}/{wanted} fulfilled"));
    }
    settled
}

fn move_to(
    request: &mut Request,
    next: RequestStatus,
    now: Timestamp,
) -> Result<Option<Transition>, LifecycleError> {
    let from = request.status;
    if next == from {
        return Ok(None);
    }
    if !can_transition(from, next) {
        return Err(LifecycleError::IllegalTransition {
            request_id: request.request_id.to_string(),
            from,
            to: next,
        });
    }
    request.status = next;
    request.last_transition_at = now;
    if next.is_terminal() {
        request.completed_at = Some(now);
    }
    Ok(Some(Transition { from, to: next }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support;
    use RequestStatus::*;
    use rstest::rstest;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn request(kind: RequestType, status: RequestStatus, wanted: u32) -> Request {
        let mut r = test_support::request(kind)
            .template("tpl")
            .provider("k8s", "k8s")
            .count(wanted)
            .created(t(0))
            .status(status);
        if status != Pending {
            r = r.started(t(0)).deadline(t(300));
        }
        r.build()
    }

    fn verdict(v: Verdict, fulfilled: u32) -> LifecycleEvent {
        LifecycleEvent::ProviderVerdict {
            verdict: v,
            fulfilled,
            failed: 0,
            message: None,
        }
    }

    #[test]
    fn start_fixes_the_deadline_at_start_plus_grace() {
        let mut r = request(RequestType::Acquire, Pending, 2);
        let change = apply(&mut r, LifecycleEvent::Start { grace_secs: 300 }, t(10)).unwrap();
        assert_eq!(
            change,
            Some(Transition {
                from: Pending,
                to: InProgress
            })
        );
        assert_eq!(r.started_at, Some(t(10)));
        assert_eq!(r.deadline_at, Some(t(310)));
    }

    #[rstest]
    #[case::fulfilled(InProgress, Verdict::Fulfilled, 2, 100, Complete)]
    #[case::still_waiting(InProgress, Verdict::InProgress, 0, 100, InProgress)]
    #[case::pending_to_in_progress(Pending, Verdict::InProgress, 0, 100, InProgress)]
    #[case::acquiring_stays(Acquiring, Verdict::InProgress, 0, 100, Acquiring)]
    #[case::partial_inside_deadline(InProgress, Verdict::Partial { is_final: false }, 1, 100, PartialPending)]
    #[case::partial_final(InProgress, Verdict::Partial { is_final: true }, 1, 100, Partial)]
    #[case::partial_past_deadline(InProgress, Verdict::Partial { is_final: false }, 1, 400, Partial)]
    #[case::partial_pending_waits_on(PartialPending, Verdict::InProgress, 1, 100, PartialPending)]
    #[case::partial_pending_completes(PartialPending, Verdict::Fulfilled, 2, 100, Complete)]
    #[case::failed(InProgress, Verdict::Failed { reason: "image pull".into() }, 0, 100, Failed)]
    #[case::deadline_none_delivered(InProgress, Verdict::InProgress, 0, 301, Timeout)]
    #[case::deadline_some_delivered(PartialPending, Verdict::InProgress, 1, 301, Partial)]
    #[case::deadline_all_delivered(InProgress, Verdict::InProgress, 2, 301, Complete)]
    #[case::exactly_at_deadline(InProgress, Verdict::InProgress, 0, 300, Timeout)]
    fn acquire_verdicts(
        #[case] from: RequestStatus,
        #[case] v: Verdict,
        #[case] fulfilled: u32,
        #[case] at: i64,
        #[case] expected: RequestStatus,
    ) {
        let mut r = request(RequestType::Acquire, from, 2);
        apply(&mut r, verdict(v, fulfilled), t(at)).unwrap();
        assert_eq!(r.status, expected);
        assert_eq!(r.fulfilled_count, fulfilled);
        assert_eq!(r.completed_at.is_some(), expected.is_terminal());
    }

    #[test]
    fn an_underway_request_has_no_deadline_and_never_times_out() {
        let mut r = request(RequestType::Acquire, InProgress, 3);
        apply(&mut r, verdict(Verdict::Underway, 3), t(20)).unwrap();
        assert_eq!(r.status, InProgress);
        assert_eq!(
            r.deadline_at, None,
            "every unit started: no deadline any more"
        );
        apply(&mut r, LifecycleEvent::DeadlineSweep, t(10_000)).unwrap();
        assert_eq!(
            r.status, InProgress,
            "a sweep long after the old deadline changes nothing"
        );
        apply(&mut r, verdict(Verdict::InProgress, 3), t(10_001)).unwrap();
        assert_eq!(r.status, InProgress);
        apply(&mut r, verdict(Verdict::Fulfilled, 3), t(10_002)).unwrap();
        assert_eq!(r.status, Complete);
    }

    #[test]
    fn underway_past_the_deadline_is_not_settled_by_it() {
        let mut r = request(RequestType::Acquire, InProgress, 3);
        apply(&mut r, verdict(Verdict::Underway, 3), t(400)).unwrap();
        assert_eq!(
            r.status, InProgress,
            "a Job running past its deadline keeps running"
        );
    }

    #[test]
    fn a_partial_return_is_partial_at_once() {
        let mut r = request(RequestType::Return, InProgress, 3);
        apply(
            &mut r,
            verdict(Verdict::Partial { is_final: false }, 1),
            t(5),
        )
        .unwrap();
        assert_eq!(r.status, Partial);
    }

    #[rstest]
    #[case::none(InProgress, 0, Timeout, "Deadline exceeded: 0/4 fulfilled")]
    #[case::some(PartialPending, 3, Partial, "Deadline exceeded: 3/4 fulfilled")]
    fn deadline_sweep_settles_with_a_message(
        #[case] from: RequestStatus,
        #[case] fulfilled: u32,
        #[case] expected: RequestStatus,
        #[case] message: &str,
    ) {
        let mut r = request(RequestType::Acquire, from, 4);
        r.fulfilled_count = fulfilled;
        apply(&mut r, LifecycleEvent::DeadlineSweep, t(299)).unwrap();
        assert_eq!(r.status, from, "nothing happens before the deadline");
        apply(&mut r, LifecycleEvent::DeadlineSweep, t(301)).unwrap();
        assert_eq!(r.status, expected);
        assert_eq!(r.status_message.as_deref(), Some(message));
    }

    #[test]
    fn a_resume_gives_the_acquire_a_whole_grace_period_from_now() {
        let mut r = request(RequestType::Acquire, InProgress, 2);
        apply(&mut r, LifecycleEvent::Resume { grace_secs: 300 }, t(400)).unwrap();
        assert_eq!(r.status, InProgress, "not judged by the deadline it missed");
        assert_eq!(r.deadline_at, Some(t(700)));
        apply(&mut r, LifecycleEvent::Resume { grace_secs: 300 }, t(10)).unwrap();
        assert_eq!(r.deadline_at, Some(t(700)), "a later deadline stays");
        apply(&mut r, verdict(Verdict::InProgress, 1), t(701)).unwrap();
        assert_eq!(r.status, Partial, "a whole grace period later it is judged");
    }

    #[rstest]
    #[case::cancel_pending(Pending, LifecycleEvent::Cancel { reason: "by user".into() }, Cancelled)]
    #[case::cancel_running(InProgress, LifecycleEvent::Cancel { reason: "by user".into() }, Cancelled)]
    #[case::cancel_past_deadline(PartialPending, LifecycleEvent::Cancel { reason: "by user".into() }, Cancelled)]
    #[case::fail_pending(Pending, LifecycleEvent::Fail { reason: "no cluster".into() }, Failed)]
    #[case::fail_past_deadline(InProgress, LifecycleEvent::Fail { reason: "no cluster".into() }, Failed)]
    fn cancel_and_fail_override_an_expired_deadline(
        #[case] from: RequestStatus,
        #[case] event: LifecycleEvent,
        #[case] expected: RequestStatus,
    ) {
        let mut r = request(RequestType::Acquire, from, 2);
        apply(&mut r, event, t(10_000)).unwrap();
        assert_eq!(r.status, expected);
    }

    #[rstest]
    #[case(Complete)]
    #[case(Partial)]
    #[case(Failed)]
    #[case(Cancelled)]
    #[case(Timeout)]
    fn finished_requests_refuse_changes_but_tolerate_sweeps(#[case] status: RequestStatus) {
        let mut r = request(RequestType::Acquire, status, 1);
        let err = apply(&mut r, LifecycleEvent::Cancel { reason: "x".into() }, t(1)).unwrap_err();
        assert!(matches!(err, LifecycleError::AlreadyTerminal { .. }));
        assert!(err.to_string().contains(status.as_str()));
        assert_eq!(apply(&mut r, LifecycleEvent::DeadlineSweep, t(1)), Ok(None));
        assert_eq!(r.status, status);
    }

    #[test]
    fn start_twice_is_illegal() {
        let mut r = request(RequestType::Acquire, InProgress, 1);
        let err = apply(&mut r, LifecycleEvent::Start { grace_secs: 1 }, t(1)).unwrap_err();
        assert!(matches!(err, LifecycleError::IllegalTransition { .. }));
    }

    #[rstest]
    #[case(Pending, InProgress, true)]
    #[case(Pending, Timeout, false)]
    #[case(InProgress, Pending, false)]
    #[case(InProgress, Acquiring, true)]
    #[case(Acquiring, InProgress, false)]
    #[case(PartialPending, InProgress, false)]
    #[case(PartialPending, Timeout, true)]
    #[case(Partial, Complete, false)]
    #[case(Complete, Failed, false)]
    fn edge_table(#[case] from: RequestStatus, #[case] to: RequestStatus, #[case] legal: bool) {
        assert_eq!(can_transition(from, to), legal);
    }

    /// Whatever event arrives, every status change `apply` makes is a legal edge.
    #[test]
    fn apply_only_ever_takes_legal_edges() {
        let events = || {
            vec![
                LifecycleEvent::Start { grace_secs: 300 },
                verdict(Verdict::Fulfilled, 2),
                verdict(Verdict::InProgress, 0),
                verdict(Verdict::Underway, 2),
                verdict(Verdict::Partial { is_final: false }, 1),
                verdict(Verdict::Partial { is_final: true }, 1),
                verdict(Verdict::Failed { reason: "x".into() }, 0),
                LifecycleEvent::Cancel { reason: "x".into() },
                LifecycleEvent::Fail { reason: "x".into() },
                LifecycleEvent::DeadlineSweep,
                LifecycleEvent::Resume { grace_secs: 300 },
            ]
        };
        for kind in [RequestType::Acquire, RequestType::Return] {
            for from in RequestStatus::ALL {
                for at in [10, 1_000] {
                    for event in events() {
                        let mut r = request(kind, from, 2);
                        if let Ok(Some(change)) = apply(&mut r, event.clone(), t(at)) {
                            assert!(
                                can_transition(change.from, change.to),
                                "{event:?} took {from} -> {}",
                                change.to
                            );
                        }
                    }
                }
            }
        }
    }
}
