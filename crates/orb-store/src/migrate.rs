//! Embedded schema migrations (no build-time macros needed).

use std::borrow::Cow;

use sqlx::AnyPool;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use crate::StoreError;

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![Migration::new(
        1,
        Cow::Borrowed("requests and machines"),
        MigrationType::Simple,
        include_str!("../migrations/0001_requests_and_machines.sql").into_sql_str(),
        false,
    )])
}

pub(crate) async fn run(pool: &AnyPool) -> Result<(), StoreError> {
    let migrator = migrator();
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
