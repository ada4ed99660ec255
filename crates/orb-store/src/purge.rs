//! Removing the records of requests and machines that are over: a purge of one machine or one
//! request (with its history), and a cleanup of every finished request older than a cutoff. A record goes only
//! when nothing can need it again: the machine's object cannot exist any more (see
//! `MachineStatus::is_live`), every request naming it has finished, and no process holds the
//! claim of one of those requests.
//!
//! Each call is one write transaction that first locks what it reads (SQLite: `BEGIN
//! IMMEDIATE`, the database's write lock; PostgreSQL: `SELECT … FOR UPDATE` on the rows), then
//! decides with [`request_blockers`] / [`machine_blockers`], then deletes by version. A writer
//! that changed a row before the lock is seen by the decision; one that comes after finds the
//! row gone and gets [`StoreError::Conflict`], so a live record is never lost and a refused or
//! failed purge deletes nothing.

use std::collections::BTreeMap;

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus};
use sqlx::any::Any;
use sqlx::{AssertSqlSafe, Transaction};

use crate::codec::micros;
use crate::machines::{self, MACHINE_COLUMNS};
use crate::requests::{self, REQUEST_COLUMNS};
use crate::{Backend, Result, Store, StoreError};

/// Why a stored record may not be removed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeBlocker {
    /// The request itself has not finished.
    Unfinished {
        request_id: RequestId,
        status: RequestStatus,
    },
    /// A machine whose object may still exist in the cluster.
    LiveMachine {
        machine_id: String,
        status: MachineStatus,
    },
    /// A machine that another request, not finished yet, still works on (its acquire, or a
    /// return in progress).
    HeldBy {
        machine_id: String,
        request_id: RequestId,
        status: RequestStatus,
    },
    /// A process holds the request's claim: it is working on the request right now.
    Claimed { request_id: RequestId },
}

/// What a purge or cleanup removed (or, in a dry run, would remove).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Purged {
    pub request_ids: Vec<RequestId>,
    pub machine_ids: Vec<String>,
}

impl Purged {
    fn absorb(&mut self, other: Purged) {
        self.request_ids.extend(other.request_ids);
        self.machine_ids.extend(other.machine_ids);
    }
}

/// The answer of a purge of one record that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeOutcome {
    Purged(Purged),
    /// Nothing was removed, for these reasons (never empty).
    Refused(Vec<PurgeBlocker>),
}

/// Which finished requests a cleanup removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupFilter {
    /// Requests that finished (`completed_at`, else their last transition) before this.
    pub finished_before: Timestamp,
    /// Only requests in these statuses; empty: every finished status. Unfinished statuses
    /// match nothing.
    pub statuses: Vec<RequestStatus>,
    /// Decide everything, then roll back instead of committing.
    pub dry_run: bool,
}

/// What a cleanup did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupReport {
    pub removed: Purged,
    /// Requests old enough that had to stay, each with why.
    pub kept: Vec<(RequestId, Vec<PurgeBlocker>)>,
}

/// The statuses of the requests machines name, as stored; a request that is not stored is
/// absent (it holds nothing).
pub type RelatedStatuses = BTreeMap<RequestId, RequestStatus>;

/// What stops `machine` from being purged. `purging` is the request being purged with it,
/// whose own status is judged by [`request_blockers`].
pub fn machine_blockers(
    machine: &Machine,
    related: &RelatedStatuses,
    purging: Option<&RequestId>,
) -> Vec<PurgeBlocker> {
    let mut blockers = Vec::new();
    if machine.status.is_live() {
        blockers.push(PurgeBlocker::LiveMachine {
            machine_id: machine.machine_id.clone(),
            status: machine.status,
        });
    }
    for id in std::iter::once(&machine.request_id).chain(machine.return_request_id.as_ref()) {
        if Some(id) == purging {
            continue;
        }
        if let Some(status) = related.get(id).filter(|s| !s.is_terminal()) {
            blockers.push(PurgeBlocker::HeldBy {
                machine_id: machine.machine_id.clone(),
                request_id: id.clone(),
                status: *status,
            });
        }
    }
    blockers
}

/// What stops `request` from being purged together with `machines` (every machine that names
/// it, as its acquire or its return).
pub fn request_blockers(
    request: &Request,
    machines: &[Machine],
    related: &RelatedStatuses,
) -> Vec<PurgeBlocker> {
    let mut blockers = Vec::new();
    if !request.status.is_terminal() {
        blockers.push(PurgeBlocker::Unfinished {
            request_id: request.request_id.clone(),
            status: request.status,
        });
    }
    for m in machines {
        blockers.extend(machine_blockers(m, related, Some(&request.request_id)));
    }
    blockers
}

/// ` FOR UPDATE` where the database has row locks; SQLite's write lock covers everything.
fn row_lock(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE",
        Backend::Sqlite => "",
    }
}

impl Store {
    /// Removes the record of machine `machine_id` if nothing can need it again; `None` when
    /// no machine has that id.
    pub async fn purge_machine(&self, machine_id: &str) -> Result<Option<PurgeOutcome>> {
        let mut tx = self.begin_purge().await?;
        let Some(machine) = self
            .lock_machines(&mut tx, "machine_id = $1", machine_id)
            .await?
            .pop()
        else {
            return Ok(None);
        };
        let related = self
            .related_statuses(&mut tx, std::slice::from_ref(&machine))
            .await?;
        let mut blockers = machine_blockers(&machine, &related, None);
        if blockers.is_empty() {
            let named: Vec<RequestId> = std::iter::once(machine.request_id.clone())
                .chain(machine.return_request_id.clone())
                .collect();
            blockers = self.claimed(named).await?;
        }
        if !blockers.is_empty() {
            return Ok(Some(PurgeOutcome::Refused(blockers)));
        }
        delete_machine(&mut tx, &machine).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("commit a machine purge"))?;
        Ok(Some(PurgeOutcome::Purged(Purged {
            request_ids: vec![],
            machine_ids: vec![machine.machine_id],
        })))
    }

    /// Removes the record of request `request_id` and of every machine that names it, if
    /// nothing can need them again; `None` when there is no such request.
    pub async fn purge_request(&self, request_id: &RequestId) -> Result<Option<PurgeOutcome>> {
        let mut tx = self.begin_purge().await?;
        let outcome = self.purge_request_in(&mut tx, request_id).await?;
        if matches!(outcome, Some(PurgeOutcome::Purged(_))) {
            tx.commit()
                .await
                .map_err(StoreError::db("commit a request purge"))?;
        }
        Ok(outcome)
    }

    /// Purges every request `filter` selects that may go, in one transaction, and reports
    /// the ones that had to stay. A dry run decides the same and commits nothing.
    pub async fn cleanup(&self, filter: &CleanupFilter) -> Result<CleanupReport> {
        let statuses: Vec<RequestStatus> = RequestStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .filter(|s| filter.statuses.is_empty() || filter.statuses.contains(s))
            .collect();
        let mut report = CleanupReport::default();
        if statuses.is_empty() {
            return Ok(report);
        }
        let mut tx = self.begin_purge().await?;
        let marks: Vec<String> = (2..statuses.len() + 2).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT request_id FROM requests WHERE COALESCE(completed_at, last_transition_at) < $1 \
             AND status IN ({}) ORDER BY created_at, request_id",
            marks.join(", ")
        );
        let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql))
            .bind(micros(filter.finished_before));
        for status in &statuses {
            query = query.bind(status.as_str());
        }
        let ids = query
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db("list finished requests to clean up"))?;
        for raw in ids {
            let id = parse_id(&raw, "request")?;
            match self.purge_request_in(&mut tx, &id).await? {
                Some(PurgeOutcome::Purged(purged)) => report.removed.absorb(purged),
                Some(PurgeOutcome::Refused(blockers)) => report.kept.push((id, blockers)),
                None => {}
            }
        }
        if filter.dry_run {
            tx.rollback()
                .await
                .map_err(StoreError::db("roll back a cleanup dry run"))?;
        } else {
            tx.commit()
                .await
                .map_err(StoreError::db("commit a cleanup"))?;
        }
        Ok(report)
    }

    /// Decides and deletes one request with its machines inside `tx` (not committed).
    async fn purge_request_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        request_id: &RequestId,
    ) -> Result<Option<PurgeOutcome>> {
        let id = request_id.to_string();
        let sql = format!(
            "SELECT {REQUEST_COLUMNS} FROM requests WHERE request_id = $1{}",
            row_lock(self.backend)
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.clone())
            .fetch_optional(&mut **tx)
            .await
            .map_err(StoreError::db("read a request to purge"))?;
        let Some(request) = row.as_ref().map(requests::decode).transpose()? else {
            return Ok(None);
        };
        let machines = self
            .lock_machines(tx, "request_id = $1 OR return_request_id = $1", &id)
            .await?;
        let related = self.related_statuses(tx, &machines).await?;
        let mut blockers = request_blockers(&request, &machines, &related);
        if blockers.is_empty() {
            // Other requests the machines name are finished, and a finished request is never
            // claimed again; only a holder still writing its last change could be there.
            blockers = self.claimed(vec![request_id.clone()]).await?;
        }
        if !blockers.is_empty() {
            return Ok(Some(PurgeOutcome::Refused(blockers)));
        }
        for m in &machines {
            delete_machine(tx, m).await?;
        }
        let deleted = sqlx::query("DELETE FROM requests WHERE request_id = $1 AND version = $2")
            .bind(id.clone())
            .bind(request.version)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("delete a request"))?;
        StoreError::expect_updated(
            deleted.rows_affected(),
            "request",
            id.clone(),
            request.version,
        )?;
        // Its history goes with it: a purged request has no timeline, and the broker-wide
        // event stream (numbered by an AUTOINCREMENT/BIGSERIAL seq, never reused) skips it.
        sqlx::query("DELETE FROM request_events WHERE request_id = $1")
            .bind(id)
            .execute(&mut **tx)
            .await
            .map_err(StoreError::db("delete a request's history"))?;
        Ok(Some(PurgeOutcome::Purged(Purged {
            request_ids: vec![request.request_id],
            machine_ids: machines.into_iter().map(|m| m.machine_id).collect(),
        })))
    }

    async fn begin_purge(&self) -> Result<Transaction<'static, Any>> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .map_err(StoreError::db("begin a purge"))
    }

    /// The machines matching `condition` (`$1` bound to `value`), locked for the purge.
    async fn lock_machines(
        &self,
        tx: &mut Transaction<'static, Any>,
        condition: &str,
        value: &str,
    ) -> Result<Vec<Machine>> {
        let sql = format!(
            "SELECT {MACHINE_COLUMNS} FROM machines WHERE {condition} ORDER BY created_at, \
             machine_id{}",
            row_lock(self.backend)
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(value.to_string())
            .fetch_all(&mut **tx)
            .await
            .map_err(StoreError::db("read machines to purge"))?;
        rows.iter().map(machines::decode).collect()
    }

    /// The stored status of every request `machines` name.
    async fn related_statuses(
        &self,
        tx: &mut Transaction<'static, Any>,
        machines: &[Machine],
    ) -> Result<RelatedStatuses> {
        let mut related = RelatedStatuses::new();
        let named: std::collections::BTreeSet<RequestId> = machines
            .iter()
            .flat_map(|m| std::iter::once(m.request_id.clone()).chain(m.return_request_id.clone()))
            .collect();
        for id in named {
            let status: Option<String> =
                sqlx::query_scalar("SELECT status FROM requests WHERE request_id = $1")
                    .bind(id.to_string())
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(StoreError::db("read the requests a machine belongs to"))?;
            if let Some(status) = status {
                let status = status.parse().map_err(|message| StoreError::Corrupt {
                    entity: "request",
                    id: id.to_string(),
                    message: format!("column status: {message}"),
                })?;
                related.insert(id, status);
            }
        }
        Ok(related)
    }

    /// The requests among `ids` whose claim a process holds. A free claim is taken and given
    /// straight back: the rows are locked, so a process that claims one afterwards cannot
    /// write it before the purge commits, and then finds it gone.
    async fn claimed(&self, ids: Vec<RequestId>) -> Result<Vec<PurgeBlocker>> {
        let mut blockers = Vec::new();
        for request_id in ids {
            let free = self.try_claim(&request_id).await?.is_some();
            if !free {
                blockers.push(PurgeBlocker::Claimed { request_id });
            }
        }
        Ok(blockers)
    }
}

async fn delete_machine(tx: &mut Transaction<'static, Any>, m: &Machine) -> Result<()> {
    let deleted = sqlx::query("DELETE FROM machines WHERE machine_id = $1 AND version = $2")
        .bind(m.machine_id.clone())
        .bind(m.version)
        .execute(&mut **tx)
        .await
        .map_err(StoreError::db("delete a machine"))?;
    StoreError::expect_updated(
        deleted.rows_affected(),
        "machine",
        m.machine_id.clone(),
        m.version,
    )
}

fn parse_id(raw: &str, entity: &'static str) -> Result<RequestId> {
    RequestId::parse(raw).map_err(|e| StoreError::Corrupt {
        entity,
        id: raw.to_string(),
        message: format!("request_id is not a request id: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::request::RequestType;
    use orb_core::test_support::{self, id};
    use rstest::rstest;

    const ACQUIRE: &str = "req-11111111-1111-4111-8111-111111111111";
    const RETURN: &str = "ret-22222222-2222-4222-8222-222222222222";

    fn machine(status: MachineStatus, returned_by: Option<&str>) -> Machine {
        let mut b = test_support::machine("m-1")
            .request_id(id(ACQUIRE))
            .status(status);
        if let Some(r) = returned_by {
            b = b.returned_by(id(r));
        }
        b.build()
    }

    fn statuses(acquire: Option<RequestStatus>, ret: Option<RequestStatus>) -> RelatedStatuses {
        let mut related = RelatedStatuses::new();
        if let Some(s) = acquire {
            related.insert(id(ACQUIRE), s);
        }
        if let Some(s) = ret {
            related.insert(id(RETURN), s);
        }
        related
    }

    #[rstest]
    #[case::terminated_of_a_finished_acquire(
        MachineStatus::Terminated,
        None,
        Some(RequestStatus::Complete),
        None,
        0
    )]
    #[case::returned_by_a_finished_return(
        MachineStatus::Returned,
        Some(RETURN),
        Some(RequestStatus::Complete),
        Some(RequestStatus::Complete),
        0
    )]
    #[case::acquire_no_longer_stored(MachineStatus::Terminated, None, None, None, 0)]
    #[case::running(MachineStatus::Running, None, Some(RequestStatus::Complete), None, 1)]
    #[case::failed_pod_still_there(
        MachineStatus::Failed,
        None,
        Some(RequestStatus::Complete),
        None,
        1
    )]
    #[case::acquire_still_running(
        MachineStatus::Terminated,
        None,
        Some(RequestStatus::InProgress),
        None,
        1
    )]
    #[case::return_in_progress(
        MachineStatus::Terminated,
        Some(RETURN),
        Some(RequestStatus::Complete),
        Some(RequestStatus::InProgress),
        1
    )]
    #[case::live_and_being_returned(
        MachineStatus::ShuttingDown,
        Some(RETURN),
        Some(RequestStatus::Complete),
        Some(RequestStatus::InProgress),
        2
    )]
    fn a_machine_goes_only_when_nothing_needs_it(
        #[case] status: MachineStatus,
        #[case] returned_by: Option<&str>,
        #[case] acquire: Option<RequestStatus>,
        #[case] ret: Option<RequestStatus>,
        #[case] blockers: usize,
    ) {
        let m = machine(status, returned_by);
        let got = machine_blockers(&m, &statuses(acquire, ret), None);
        assert_eq!(got.len(), blockers, "{got:?}");
    }

    #[test]
    fn a_request_is_judged_on_itself_and_every_machine_naming_it() {
        let finished = test_support::request(RequestType::Acquire)
            .id(ACQUIRE)
            .status(RequestStatus::Complete)
            .build();
        let related = statuses(Some(RequestStatus::Complete), Some(RequestStatus::Failed));
        let dead = machine(MachineStatus::Returned, Some(RETURN));
        assert!(request_blockers(&finished, std::slice::from_ref(&dead), &related).is_empty());

        let live = machine(MachineStatus::Running, None);
        assert_eq!(
            request_blockers(&finished, &[dead.clone(), live], &related),
            vec![PurgeBlocker::LiveMachine {
                machine_id: "m-1".into(),
                status: MachineStatus::Running
            }]
        );

        let unfinished = test_support::request(RequestType::Acquire)
            .id(ACQUIRE)
            .status(RequestStatus::Acquiring)
            .build();
        // Its own status is one blocker; the machine is not "held" by the request purged.
        let related = statuses(Some(RequestStatus::Acquiring), None);
        assert_eq!(
            request_blockers(
                &unfinished,
                &[machine(MachineStatus::Terminated, None)],
                &related
            ),
            vec![PurgeBlocker::Unfinished {
                request_id: id(ACQUIRE),
                status: RequestStatus::Acquiring
            }]
        );

        // A return is held back by the unfinished acquire whose machine it names.
        let ret = test_support::request(RequestType::Return)
            .id(RETURN)
            .status(RequestStatus::Complete)
            .build();
        let related = statuses(
            Some(RequestStatus::InProgress),
            Some(RequestStatus::Complete),
        );
        assert_eq!(
            request_blockers(&ret, &[dead], &related),
            vec![PurgeBlocker::HeldBy {
                machine_id: "m-1".into(),
                request_id: id(ACQUIRE),
                status: RequestStatus::InProgress
            }]
        );
    }
}
