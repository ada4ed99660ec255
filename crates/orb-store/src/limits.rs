//! Storing an acquire together with its `maxNumber` check, atomically: the machines a template
//! already holds are counted, and the new request stored, in one transaction that no other
//! acquire of the same template can interleave with (SQLite: `BEGIN IMMEDIATE`, the database's
//! write lock; PostgreSQL: a transaction-scoped advisory lock on the template). Unfinished
//! acquires reserve what they asked for until their machines are stored, so twenty processes
//! asking at once cannot all fit under the limit.

use orb_core::request::{Request, RequestStatus, RequestType};
use sqlx::AssertSqlSafe;

use crate::requests::insert_row;
use crate::{Backend, Result, Store, StoreError};

/// Statuses of machines whose objects are gone (see `MachineStatus::is_live`).
const GONE: &str = "('terminated', 'returned')";

/// A template's cap: at most `max` machines whose objects may exist, counting those that
/// unfinished acquires still have to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateLimit {
    pub template_id: String,
    pub max: i64,
}

/// What a template holds: stored machines that may exist, plus the rest of what unfinished
/// acquires asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TemplateUsage {
    pub live: i64,
    pub reserved: i64,
}

impl TemplateUsage {
    pub fn in_use(&self) -> i64 {
        self.live + self.reserved
    }
}

/// A stable 64-bit key for a PostgreSQL advisory lock on `name` (FNV-1a): the same in every
/// process, whatever its build.
pub(crate) fn advisory_key(scope: &str, name: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in scope.bytes().chain([0]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

impl Store {
    /// Stores a new acquire `request` (version 0, no machines yet) if `limit` allows its
    /// `requested_count`; otherwise stores nothing and returns [`StoreError::LimitExceeded`].
    pub async fn insert_acquire(
        &self,
        request: &mut Request,
        limit: Option<&TemplateLimit>,
    ) -> Result<()> {
        let mut tx = match (self.backend, limit) {
            (_, None) => self.pool.begin().await,
            (Backend::Sqlite, Some(_)) => self.pool.begin_with("BEGIN IMMEDIATE").await,
            (Backend::Postgres, Some(_)) => self.pool.begin().await,
        }
        .map_err(StoreError::db("begin an acquire"))?;
        if let Some(limit) = limit {
            if self.backend == Backend::Postgres {
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(advisory_key("orb-template", &limit.template_id))
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("lock the template's machine count"))?;
            }
            let usage = usage_in(&mut tx, &limit.template_id).await?;
            let available = (limit.max - usage.in_use()).max(0);
            if i64::from(request.requested_count) > available {
                return Err(StoreError::LimitExceeded {
                    template_id: limit.template_id.clone(),
                    max: limit.max,
                    live: usage.live,
                    reserved: usage.reserved,
                    requested: i64::from(request.requested_count),
                });
            }
        }
        insert_row(&mut tx, request).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("commit a new acquire"))?;
        request.version += 1;
        Ok(())
    }

    /// What `template_id` holds now (outside any lock: for reports such as availableNumber).
    pub async fn template_usage(&self, template_id: &str) -> Result<TemplateUsage> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("begin a read"))?;
        let usage = usage_in(&mut tx, template_id).await?;
        tx.commit().await.map_err(StoreError::db("end a read"))?;
        Ok(usage)
    }
}

/// Both counts in one statement, so they come from one snapshot: on PostgreSQL (read
/// committed) two statements could straddle the commit that turns an acquire's reservation
/// into its machines, and count it in neither.
async fn usage_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    template_id: &str,
) -> Result<TemplateUsage> {
    let unfinished: Vec<String> = RequestStatus::UNFINISHED
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    let of_request = format!(
        "(SELECT COUNT(*) FROM machines m WHERE m.request_id = r.request_id \
          AND m.status NOT IN {GONE})"
    );
    let (live, reserved): (i64, i64) = sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(format!(
        "SELECT \
           (SELECT COUNT(*) FROM machines WHERE template_id = $1 AND status NOT IN {GONE}), \
           CAST(COALESCE((SELECT SUM(CASE WHEN r.requested_count > {of_request} \
                                          THEN r.requested_count - {of_request} ELSE 0 END) \
                          FROM requests r \
                          WHERE r.template_id = $1 AND r.request_type = '{}' \
                          AND r.status IN ({})), 0) AS BIGINT)",
        RequestType::Acquire.as_str(),
        unfinished.join(", ")
    )))
    .bind(template_id.to_string())
    .fetch_one(&mut **tx)
    .await
    .map_err(StoreError::db(
        "count a template's machines and reservations",
    ))?;
    Ok(TemplateUsage { live, reserved })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_stable_and_scoped() {
        assert_eq!(
            advisory_key("orb-template", "worker"),
            advisory_key("orb-template", "worker")
        );
        assert_ne!(
            advisory_key("orb-template", "worker"),
            advisory_key("orb-acquire", "worker")
        );
        assert_ne!(
            advisory_key("orb-template", "worker"),
            advisory_key("orb-template", "worker2")
        );
    }
}
