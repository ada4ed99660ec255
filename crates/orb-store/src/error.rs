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
    /// No connection could be had in time: the server is down or unreachable (or, rarely,
    /// every pooled connection stayed busy).
    #[error(
        "the database did not answer while trying to {context}: no connection within the pool's \
         wait; check that the server in the storage URL is running and reachable, then retry"
    )]
    Unavailable { context: &'static str },
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
    /// A new acquire would take its template past `maxNumber`; nothing was stored.
    #[error(
        "template {template_id:?} allows {max} machines (maxNumber); {live} exist and unfinished \
         requests will create {reserved} more, so at most {} more can be requested, not \
         {requested}; ask for fewer, return some, or raise maxNumber",
        (max - live - reserved).max(0)
    )]
    LimitExceeded {
        template_id: String,
        max: i64,
        live: i64,
        reserved: i64,
        requested: i64,
    },
    #[error(
        "cannot use the claim file {path}: {source}; check that the directory next to the \
         database is writable"
    )]
    Claim {
        path: String,
        source: std::io::Error,
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
        move |source| StoreError::from_sqlx(context, source)
    }

    pub(crate) fn from_sqlx(context: &'static str, source: sqlx::Error) -> StoreError {
        match source {
            sqlx::Error::PoolTimedOut => StoreError::Unavailable { context },
            source => StoreError::Database { context, source },
        }
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
            _ => StoreError::from_sqlx(context, source),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_timeout_says_the_database_is_unreachable_and_what_to_check() {
        let err = StoreError::db("read a request")(sqlx::Error::PoolTimedOut);
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("while trying to read a request"), "{text}");
        assert!(
            text.contains("check that the server in the storage URL is running"),
            "{text}"
        );
        let err = StoreError::on_insert("request", "r".into(), "store a request")(
            sqlx::Error::PoolTimedOut,
        );
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn other_database_errors_keep_their_cause() {
        let err = StoreError::db("read a request")(sqlx::Error::RowNotFound);
        assert!(matches!(err, StoreError::Database { .. }), "{err:?}");
    }
}
