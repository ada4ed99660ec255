//! Store errors: each says what was being done and, where possible, how to fix it.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage URL {url:?} is not supported; use sqlite://<file> or postgres://user@host/db")]
    UnsupportedUrl { url: String },
    #[error("cannot open the database at {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("cannot create the database directory {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot bring the database schema up to date: {0}")]
    Migrate(String),
    #[error("database error while trying to {context}: {source}")]
    Database {
        context: &'static str,
        source: sqlx::Error,
    },
    /// Someone else changed the row since it was read. Re-read and retry the operation.
    #[error(
        "{entity} {id} was changed by another orb process (expected version {expected_version}); \
         re-read it and try again"
    )]
    Conflict {
        entity: &'static str,
        id: String,
        expected_version: i64,
    },
    #[error("{entity} {id} already exists; ids must be unique")]
    AlreadyExists { entity: &'static str, id: String },
    #[error(
        "stored {entity} {id} is unreadable ({message}); the database may have been edited by hand"
    )]
    Corrupt {
        entity: &'static str,
        id: String,
        message: String,
    },
}

impl StoreError {
    pub(crate) fn db(context: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { context, source }
    }

    /// An INSERT's error: a duplicate id is [`StoreError::AlreadyExists`], anything else a
    /// database error while doing `context`.
    pub(crate) fn on_insert(
        entity: &'static str,
        id: String,
        context: &'static str,
    ) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| match &source {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::AlreadyExists { entity, id }
            }
            _ => StoreError::Database { context, source },
        }
    }

    /// A version-guarded UPDATE that touched no row lost the race: [`StoreError::Conflict`].
    pub(crate) fn expect_updated(
        rows_affected: u64,
        entity: &'static str,
        id: String,
        expected_version: i64,
    ) -> Result<(), StoreError> {
        if rows_affected == 0 {
            return Err(StoreError::Conflict {
                entity,
                id,
                expected_version,
            });
        }
        Ok(())
    }
}
