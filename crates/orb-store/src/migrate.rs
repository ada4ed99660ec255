//! Embedded schema migrations (no build-time macros needed).

use std::borrow::Cow;

use sqlx::AnyPool;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

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

pub(crate) async fn run(pool: &AnyPool, backend: Backend) -> Result<(), StoreError> {
    let migrator = migrator(backend);
    match migrator.run(pool).await {
        Ok(()) => Ok(()),
        // Two processes opening a fresh SQLite file race to apply the same migration; the
        // loser finds it applied on a second look.
        Err(_) => migrator
            .run(pool)
            .await
            .map_err(|e| StoreError::Migrate(e.to_string())),
    }
}
