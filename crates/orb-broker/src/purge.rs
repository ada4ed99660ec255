//! Purge and cleanup: forgetting machines and requests that are over. The store decides and
//! deletes atomically (see `orb_store::purge`); this module finds what the caller named,
//! turns the store's reasons for keeping a record into sentences that say what to do, and
//! works out a cleanup's cutoff from the broker's clock.

use jiff::{SignedDuration, Timestamp};
use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_core::request::{RequestStatus, RequestType};
use orb_store::{CleanupFilter, PurgeBlocker, PurgeOutcome, Purged};

use crate::{Broker, BrokerError};

/// The longest age a cleanup takes (100 years): far past anything stored, and no overflow.
pub const MAX_CLEANUP_AGE: SignedDuration = SignedDuration::from_hours(24 * 36_525);

/// At most this many reasons are spelled out in one refusal.
const REASONS_SHOWN: usize = 5;

/// A cleanup as asked: finished requests older than `older_than`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupAsk {
    pub older_than: SignedDuration,
    /// Only these statuses (each must be a finished one); empty: every finished status.
    pub statuses: Vec<RequestStatus>,
    pub dry_run: bool,
}

/// What a cleanup removed (or would remove, in a dry run) and what it had to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupDone {
    /// Requests that finished before this were considered.
    pub cutoff: Timestamp,
    pub dry_run: bool,
    pub removed: Purged,
    /// Old enough, but kept: each request with why, in words.
    pub kept: Vec<(RequestId, String)>,
}

/// One reason a record stays, and what to do about it.
pub fn explain(blocker: &PurgeBlocker) -> String {
    match blocker {
        PurgeBlocker::Unfinished { request_id, status } => {
            let fix = if request_id.kind() == Some(RequestType::Return) {
                "wait for it to finish".to_string()
            } else {
                format!(
                    "wait for it to finish, or cancel it (`orb requests cancel {request_id}`, \
                     DELETE /api/v1/requests/{request_id})"
                )
            };
            format!("request {request_id} is still {status}; {fix}")
        }
        PurgeBlocker::LiveMachine { machine_id, status } => format!(
            "machine {machine_id} is {status}, so its object may still exist in the cluster; \
             return it first (`orb machines return {machine_id}`, POST /api/v1/machines/return) \
             and purge it once it is gone"
        ),
        PurgeBlocker::HeldBy {
            machine_id,
            request_id,
            status,
        } => format!(
            "machine {machine_id} belongs to request {request_id}, which is still {status}; \
             wait for that request to finish"
        ),
        PurgeBlocker::Claimed { request_id } => format!(
            "another orb process is working on request {request_id} right now; retry in a moment"
        ),
    }
}

/// Every reason in one line (the first few, then how many more).
pub fn explain_all(blockers: &[PurgeBlocker]) -> String {
    let mut text: Vec<String> = blockers.iter().take(REASONS_SHOWN).map(explain).collect();
    if blockers.len() > REASONS_SHOWN {
        text.push(format!("and {} more", blockers.len() - REASONS_SHOWN));
    }
    text.join("; ")
}

fn refused(what: String, blockers: &[PurgeBlocker]) -> BrokerError {
    BrokerError::PurgeRefused(format!(
        "{what} cannot be purged: {}; nothing was removed",
        explain_all(blockers)
    ))
}

impl Broker {
    /// Forgets the machine `key` names (its machine id, or its host name as for every other
    /// machine lookup) and returns the record removed. Only a machine that can no longer
    /// exist, of requests that have finished, may go.
    pub async fn purge_machine(&self, key: &str) -> Result<Machine, BrokerError> {
        let Some(machine) = self
            .store
            .find_machines(&[key.to_string()])
            .await?
            .into_iter()
            .next()
        else {
            return Err(BrokerError::UnknownMachine(key.to_string()));
        };
        match self.store.purge_machine(&machine.machine_id).await? {
            Some(PurgeOutcome::Purged(_)) => Ok(machine),
            Some(PurgeOutcome::Refused(blockers)) => Err(refused(
                format!("machine {}", machine.machine_id),
                &blockers,
            )),
            // Purged by someone else between the lookup and the purge.
            None => Err(BrokerError::UnknownMachine(key.to_string())),
        }
    }

    /// Forgets a finished request and every machine record that names it (as its acquire,
    /// or as its return).
    pub async fn purge_request(&self, request_id: &RequestId) -> Result<Purged, BrokerError> {
        match self.store.purge_request(request_id).await? {
            Some(PurgeOutcome::Purged(purged)) => Ok(purged),
            Some(PurgeOutcome::Refused(blockers)) => {
                Err(refused(format!("request {request_id}"), &blockers))
            }
            None => Err(BrokerError::UnknownRequest(request_id.to_string())),
        }
    }

    /// Purges every finished request older than `ask.older_than` that may go, with its
    /// machines, in one transaction.
    pub async fn cleanup(&self, ask: &CleanupAsk) -> Result<CleanupDone, BrokerError> {
        if ask.older_than.is_negative() || ask.older_than > MAX_CLEANUP_AGE {
            return Err(BrokerError::InvalidCleanup(format!(
                "a cleanup age must be between 0 and 36525 days, not {} seconds",
                ask.older_than.as_secs()
            )));
        }
        let unfinished: Vec<&str> = ask
            .statuses
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        if !unfinished.is_empty() {
            return Err(BrokerError::InvalidCleanup(format!(
                "a cleanup only removes finished requests; {} {} not finished (use complete, \
                 partial, failed, cancelled or timeout, or none for all of them)",
                unfinished.join(", "),
                if unfinished.len() == 1 { "is" } else { "are" }
            )));
        }
        let cutoff = self.now() - ask.older_than;
        let report = self
            .store
            .cleanup(&CleanupFilter {
                finished_before: cutoff,
                statuses: ask.statuses.clone(),
                dry_run: ask.dry_run,
            })
            .await?;
        Ok(CleanupDone {
            cutoff,
            dry_run: ask.dry_run,
            removed: report.removed,
            kept: report
                .kept
                .into_iter()
                .map(|(id, blockers)| (id, explain_all(&blockers)))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::machine::MachineStatus;
    use orb_core::test_support::id;

    #[test]
    fn every_reason_says_what_to_do() {
        let acquire = id("req-11111111-1111-4111-8111-111111111111");
        let cases = [
            (
                PurgeBlocker::Unfinished {
                    request_id: acquire.clone(),
                    status: RequestStatus::InProgress,
                },
                "DELETE /api/v1/requests/req-",
            ),
            (
                PurgeBlocker::LiveMachine {
                    machine_id: "orb-1".into(),
                    status: MachineStatus::Running,
                },
                "return it first (`orb machines return orb-1`, POST /api/v1/machines/return)",
            ),
            (
                PurgeBlocker::HeldBy {
                    machine_id: "orb-1".into(),
                    request_id: acquire.clone(),
                    status: RequestStatus::Acquiring,
                },
                "wait for that request to finish",
            ),
            (
                PurgeBlocker::Claimed {
                    request_id: acquire,
                },
                "retry in a moment",
            ),
        ];
        for (blocker, fix) in cases {
            let text = explain(&blocker);
            assert!(text.contains(fix), "{text:?} should contain {fix:?}");
        }
    }

    #[test]
    fn long_lists_of_reasons_are_cut_short() {
        let many: Vec<PurgeBlocker> = (0..8)
            .map(|i| PurgeBlocker::LiveMachine {
                machine_id: format!("orb-{i}"),
                status: MachineStatus::Running,
            })
            .collect();
        let text = explain_all(&many);
        assert!(text.contains("orb-4") && !text.contains("orb-5"), "{text}");
        assert!(text.ends_with("and 3 more"), "{text}");
    }
}
