//! Reclaims (HostFactory getReturnRequests): hosts the cluster took or is taking away on its
//! own. The acquires of the candidate machines are refreshed first (so what is stored is the
//! truth now, also for requests that finished long ago); then two sources: machines that are
//! gone outside any orb return or failed (from the store), and live machines the provider
//! reports as evicted, preempted or draining. Never reported: what orb removed itself (a pod
//! timeout), and a Job's hosts still there while one of its pods works, because giving one
//! host of a Job back deletes the whole Job.

use std::collections::{BTreeMap, BTreeSet};

use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::provider::{ReclaimQuery, removed_by_orb};
use orb_store::MachineFilter;

use super::status::may_come_back;
use super::{Broker, BrokerError, MachineKey};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reclaim {
    pub machine_id: String,
    pub name: String,
    pub grace_period_secs: u64,
    pub reason: String,
}

impl Broker {
    /// Reclaimed hosts among `keys` (every managed host when empty), plus a note when the
    /// provider could not be asked about live ones.
    pub async fn reclaims(
        &self,
        keys: &[MachineKey],
    ) -> Result<(Vec<Reclaim>, Option<String>), BrokerError> {
        let mut candidates = self.reclaim_candidates(keys).await?;
        // Refresh the acquires that still have live candidates, or gone ones their controller
        // may have brought back: a pod that failed or vanished since anyone last looked is
        // recorded (and so reported) now, and a StatefulSet's host that is back is not
        // reported gone. Acquires the provider cannot be asked about keep their stored
        // state; the note says so below.
        let acquires: std::collections::BTreeSet<_> = candidates
            .iter()
            .filter(|m| m.status.is_live() || may_come_back(m))
            .map(|m| m.request_id.clone())
            .collect();
        let mut refreshed_any = false;
        for acquire in &acquires {
            if let Ok(Some(_)) = self.refresh(acquire).await {
                refreshed_any = true;
            }
        }
        if refreshed_any {
            candidates = self.reclaim_candidates(keys).await?;
        }
        let busy_jobs = self.jobs_at_work(&candidates).await?;
        // A Job host that is gone stays reported: losing a pod fails the Job (backoffLimit 0).
        candidates.retain(|m| {
            let orbs_own = removed_by_orb(&m.provider_data);
            let job_at_work = m.status.is_live() && busy_jobs.contains(&m.request_id);
            !(orbs_own || job_at_work)
        });
        let mut found: BTreeMap<String, Reclaim> = BTreeMap::new();
        // Without names, only hosts that ever started are reported: a pod that failed before
        // it ran was never a host HostFactory knew.
        let named = !keys.is_empty();
        for m in candidates.iter().filter(|m| {
            (!m.status.is_live() && (named || m.launch_time.is_some()))
                || matches!(m.status, MachineStatus::Failed | MachineStatus::Stopped)
        }) {
            found.insert(
                m.machine_id.clone(),
                Reclaim {
                    machine_id: m.machine_id.clone(),
                    name: m.name.clone(),
                    grace_period_secs: 0,
                    reason: m.status_reason.clone().unwrap_or_else(|| {
                        format!("machine is {} outside any orb return", m.status)
                    }),
                },
            );
        }
        let live: Vec<Machine> = candidates
            .into_iter()
            .filter(|m| {
                m.status.is_live()
                    && !matches!(m.status, MachineStatus::Failed | MachineStatus::Stopped)
            })
            .collect();
        let mut note = None;
        if !live.is_empty() {
            match self.provider.get() {
                Err(err) => note = Some(format!("live machines were not checked: {err}")),
                Ok(provider) => {
                    let query = ReclaimQuery {
                        machines: self.machine_refs(&live).await?,
                    };
                    match provider.reclaims(query).await {
                        Ok(notices) => {
                            for n in notices {
                                found.insert(
                                    n.machine_id.clone(),
                                    Reclaim {
                                        machine_id: n.machine_id,
                                        name: n.name,
                                        grace_period_secs: n.grace_period_secs,
                                        reason: n.reason,
                                    },
                                );
                            }
                        }
                        Err(err) => note = Some(format!("live machines were not checked: {err}")),
                    }
                }
            }
        }
        Ok((found.into_values().collect(), note))
    }

    /// The Job acquires among `candidates` with a pod still at work (running or waiting to
    /// start): none of their hosts still there may be offered back while it works.
    async fn jobs_at_work(
        &self,
        candidates: &[Machine],
    ) -> Result<BTreeSet<RequestId>, BrokerError> {
        let jobs: BTreeSet<&RequestId> = candidates
            .iter()
            .filter(|m| m.provider_api == Some(ProviderApi::Job))
            .map(|m| &m.request_id)
            .collect();
        let mut busy = BTreeSet::new();
        for job in jobs {
            let units = self
                .store
                .list_machines(&MachineFilter {
                    request_id: Some(job.clone()),
                    live_only: true,
                    ..Default::default()
                })
                .await?;
            if units.iter().any(at_work) {
                busy.insert(job.clone());
            }
        }
        Ok(busy)
    }

    /// The machines a reclaim query covers: those named (every managed one when none is),
    /// not already in an orb return.
    async fn reclaim_candidates(&self, keys: &[MachineKey]) -> Result<Vec<Machine>, BrokerError> {
        Ok(if keys.is_empty() {
            self.store
                .list_machines(&MachineFilter {
                    not_returning: true,
                    ..Default::default()
                })
                .await?
        } else {
            let lookups: Vec<String> = keys.iter().flat_map(|k| k.lookups().cloned()).collect();
            self.store
                .find_machines(&lookups)
                .await?
                .into_iter()
                .filter(|m| m.return_request_id.is_none())
                .collect()
        })
    }
}

/// A unit still at work: its pod runs or waits to start (a pod being deleted is not).
fn at_work(m: &Machine) -> bool {
    matches!(
        m.status,
        MachineStatus::Running
            | MachineStatus::Pending
            | MachineStatus::Launching
            | MachineStatus::Unknown
    )
}
