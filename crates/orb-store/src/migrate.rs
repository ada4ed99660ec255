//! Embedded schema migrations (no build-time macros needed).

use std::borrow::Cow;
use std::time::{Duration, Instant};

use sqlx::AnyPool;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::{AssertSqlSafe, SqlSafeStr};

use crate::{Backend, StoreError};

fn migration(version: i64, description: &'static str, sql: &'static str) -> Migration {
    Migration::new(
        version,
        Cow::Borrowed(description),
        MigrationType::Simple,
        sql.into_sql_str(),
        false,
    )
}

/// The migrations for `backend`: portable SQL where it can be, else one text per backend (an
/// auto-numbered column is spelt differently).
fn migrator(backend: Backend) -> Migrator {
    let events = match backend {
        Backend::Sqlite => include_str!("../migrations/0002_request_events.sqlite.sql"),
        Backend::Postgres => include_str!("../migrations/0002_request_events.postgres.sql"),
    };
    Migrator::with_migrations(vec![
        migration(
            1,
            "requests and machines",
            include_str!("../migrations/0001_requests_and_machines.sql"),
        ),
        migration(2, "request events", events),
    ])
}

/// How long processes racing to migrate one fresh SQLite file keep trying before the last
/// error is reported. Each lost race means another process made progress, so twenty processes
/// finish in well under a second; the bound only stops a stuck file from hanging a call.
const SQLITE_RACE_BUDGET: Duration = Duration::from_secs(30);

/// The schema version a SQLite file that this build brought fully up to date records in its
/// `user_version` header field: the number of the last migration above.
pub(crate) const SQLITE_SCHEMA_VERSION: i64 = 2;

pub(crate) async fn run(pool: &AnyPool, backend: Backend) -> Result<(), StoreError> {
    if backend == Backend::Postgres {
        return migrate(pool, backend).await;
    }
    // A file that says it is at this build's schema and is in WAL mode (both kept in the
    // file, both read by one statement) needs nothing more: every HostFactory script call
    // opens the file, and each statement is a round trip to sqlx's connection thread. Any
    // other version (0 for a file from before this field was kept, a higher one from a newer
    // build) goes through the migrator, which applies what is missing or refuses a schema it
    // does not know.
    let header = sqlite_header(pool).await;
    if header.as_ref().is_none_or(|h| h.journal_mode != "wal") {
        // WAL lets HostFactory's concurrent script processes read while one writes. The
        // mode is recorded in the file, so this runs once per file.
        sqlx::query("PRAGMA journal_mode = WAL")
            .execute(pool)
            .await
            .map_err(StoreError::db("enable SQLite WAL journal"))?;
    }
    if header.is_some_and(|h| h.user_version == SQLITE_SCHEMA_VERSION) {
        return Ok(());
    }
    migrate(pool, backend).await?;
    // Only a shortcut for the next opener: if another process holds the file, the next open
    // simply runs the migrator again.
    let _ = sqlx::query(AssertSqlSafe(format!(
        "PRAGMA user_version = {SQLITE_SCHEMA_VERSION}"
    )))
    .execute(pool)
    .await;
    Ok(())
}

/// What a SQLite file's header says: the schema version this project recorded in it and its
/// journal mode.
struct SqliteHeader {
    user_version: i64,
    journal_mode: String,
}

/// One statement reading the schema version and journal mode from a SQLite file's header.
pub(crate) const SQLITE_HEADER_SQL: &str = "SELECT v.user_version, j.journal_mode \
    FROM pragma_user_version AS v, pragma_journal_mode AS j";

async fn sqlite_header(pool: &AnyPool) -> Option<SqliteHeader> {
    let (user_version, journal_mode): (i64, String) = sqlx::query_as(SQLITE_HEADER_SQL)
        .fetch_one(pool)
        .await
        .ok()?;
    Some(SqliteHeader {
        user_version,
        journal_mode: journal_mode.to_ascii_lowercase(),
    })
}

async fn migrate(pool: &AnyPool, backend: Backend) -> Result<(), StoreError> {
    let migrator = migrator(backend);
    // PostgreSQL serialises migrators with an advisory lock; SQLite has none, so processes
    // opening a fresh file race: each reads the applied list, then applies what it lacks in a
    // transaction of its own. The loser's transaction fails (the version the winner just
    // recorded, a table it just made, or the file busy) and rolls back whole; a second look
    // sees the winner's work. Only those errors are retried: a schema from another build or
    // an unreadable file is reported at once.
    let started = Instant::now();
    let mut attempt: u64 = 0;
    loop {
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            Err(e)
                if backend == Backend::Sqlite
                    && lost_a_race(&e)
                    && started.elapsed() < SQLITE_RACE_BUDGET =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(10 * attempt.min(10))).await;
            }
            Err(e) => return Err(StoreError::Migrate(e.to_string())),
        }
    }
}

/// Whether a failed migration run lost a race with another process migrating the same file.
fn lost_a_race(error: &MigrateError) -> bool {
    let (MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _)) = error else {
        return false;
    };
    let Some(db) = e.as_database_error() else {
        return false;
    };
    // SQLITE_BUSY (5), SQLITE_LOCKED (6), busy-snapshot (517), UNIQUE / PRIMARY KEY (2067,
    // 1555): the codes SQLite answers a writer that came second with.
    matches!(
        db.code().as_deref(),
        Some("5" | "6" | "517" | "1555" | "2067")
    ) || db.message().contains("already exists")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_sqlite_schema_version_is_the_last_migration() {
        let last = migrator(Backend::Sqlite)
            .iter()
            .map(|m| m.version)
            .max()
            .unwrap();
        assert_eq!(
            SQLITE_SCHEMA_VERSION, last,
            "a new migration must raise SQLITE_SCHEMA_VERSION, or files at the old schema \
             would skip it"
        );
    }

    async fn header_of(path: &std::path::Path) -> (i64, String) {
        let store = crate::Store::open_sqlite_file(path).await.unwrap();
        let header = sqlite_header(&store.pool).await.expect("the header reads");
        store.close().await;
        (header.user_version, header.journal_mode)
    }

    #[tokio::test]
    async fn a_new_file_is_put_in_wal_mode_at_this_schema_and_reopens_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        assert_eq!(
            header_of(&path).await,
            (SQLITE_SCHEMA_VERSION, "wal".to_string())
        );
        assert_eq!(
            header_of(&path).await,
            (SQLITE_SCHEMA_VERSION, "wal".to_string())
        );
    }

    #[tokio::test]
    async fn a_file_without_the_header_facts_is_migrated_and_put_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        header_of(&path).await;
        // As a file written before either fact was kept: rollback journal, version 0.
        let store = crate::Store::open_sqlite_file(&path).await.unwrap();
        sqlx::query("PRAGMA journal_mode = DELETE")
            .execute(&store.pool)
            .await
            .unwrap();
        sqlx::query("PRAGMA user_version = 0")
            .execute(&store.pool)
            .await
            .unwrap();
        store.close().await;
        assert_eq!(
            header_of(&path).await,
            (SQLITE_SCHEMA_VERSION, "wal".to_string())
        );
    }
}
