//! orb-store: durable requests and machines in SQLite (default) or PostgreSQL.
//!
//! # Why sqlx's `Any` driver
//! One code path serves both databases: the same portable SQL (`$n` placeholders, BIGINT
//! epoch-microsecond timestamps, JSON as TEXT) runs on a SQLite file for a single broker and on
//! PostgreSQL for several replicas, and one test suite exercises both. The price is giving up
//! database-specific types (JSONB, TIMESTAMPTZ), which orb does not query into.
//!
//! # Guarantees
//! - Migrations are embedded in the binary and run on open.
//! - Every state change (a request plus the machines it touches) is one transaction: a crash
//!   leaves either the old state or the new one.
//! - Every row has a `version`. A write names the version it read; if another process wrote
//!   in between, the write fails with [`StoreError::Conflict`] and nothing is changed.
#![forbid(unsafe_code)]

mod claims;
mod codec;
mod error;
mod events;
mod limits;
mod machines;
mod migrate;
mod purge;
mod requests;
mod same_thread;

use std::path::Path;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

pub use claims::Claim;
pub use error::StoreError;
pub use events::{EventFilter, EventKind, MAX_EVENTS_PER_READ, RequestEvent};
pub use limits::{TemplateLimit, TemplateUsage};
pub use machines::MachineFilter;
pub use purge::{
    CleanupFilter, CleanupReport, PurgeBlocker, PurgeOutcome, Purged, RelatedStatuses,
    machine_blockers, request_blockers,
};
pub use requests::RequestFilter;
pub use same_thread::{SameThreadError, SameThreadReader};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A handle on the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    claims: claims::ClaimBackend,
    held: claims::HeldClaims,
    /// This process's copies of recently read machine lists of one request.
    lists: machines::ListCache,
    /// This process's copies of recently read requests.
    requests: requests::RequestCache,
}

/// How long a PostgreSQL call waits for a pooled connection. sqlx's default is 30 s, spent
/// retrying a refused connect: while the server is down (restart, failover) every API call
/// would hang that long. 5 s covers a busy pool and a server that is just starting, and then
/// the caller gets a prompt "storage unavailable".
pub const POSTGRES_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The default database file inside the work directory.
pub const DEFAULT_SQLITE_FILE: &str = "orb.db";

impl Store {
    /// Opens `sqlite://…` or `postgres://…` (also `postgresql://…`) and applies migrations.
    pub async fn open(url: &str) -> Result<Self> {
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl { url: redact(url) });
        };
        sqlx::any::install_default_drivers();
        let max = match backend {
            Backend::Sqlite => 1,
            Backend::Postgres => 4,
        };
        let mut options = AnyPoolOptions::new().max_connections(max);
        if backend == Backend::Sqlite {
            // sqlx pings a pooled connection before handing it out, to catch one a server
            // dropped. A SQLite connection is a file this process holds open: the ping can
            // only pass, and it cost a round trip to the connection's worker thread before
            // every statement (a third of the statements of a HostFactory status call).
            options = options
                .test_before_acquire(false)
                .after_connect(|connection, _| Box::pin(machines::mark_connection(connection)));
        }
        if backend == Backend::Postgres {
            // Pooled connections are pinged before use (sqlx's default), so connections the
            // server dropped in a restart are replaced, not handed out.
            options = options.acquire_timeout(POSTGRES_ACQUIRE_TIMEOUT);
        }
        let pool = options
            .connect(url)
            .await
            .map_err(|source| StoreError::Connect {
                url: redact(url),
                source,
            })?;
        migrate::run(&pool, backend).await?;
        Ok(Self {
            pool,
            backend,
            claims: claims::ClaimBackend::for_url(url, backend),
            held: Default::default(),
            lists: Default::default(),
            requests: Default::default(),
        })
    }

    /// Opens (creating if needed) a SQLite database file, creating its directory too.
    pub async fn open_sqlite_file(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::CreateDir {
                path: parent.display().to_string(),
                source,
            })?;
        }
        Self::open(&sqlite_url(path)).await
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// `sqlite://<path>?mode=rwc` for a file path.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// The URL with every password in it replaced, for messages and every output: the one of
/// `user:password@` and the value of any query parameter naming one (`?password=`,
/// `sslpassword=`), which PostgreSQL URLs accept too.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    // The user part ends at the last '@' before the query, or anywhere when the query has
    // none before it (a password may hold an unencoded '?' or '@').
    let query_start = url.find('?').unwrap_or(url.len());
    let at = url[..query_start]
        .rfind('@')
        .or_else(|| url.rfind('@'))
        .filter(|&at| at >= scheme_end);
    let mut out = String::with_capacity(url.len());
    let rest_start = match at.and_then(|at| Some((at, url[scheme_end..at].split_once(':')?.0))) {
        Some((at, user)) => {
            out.push_str(&url[..scheme_end]);
            out.push_str(user);
            out.push_str(":***");
            at
        }
        None => 0,
    };
    let rest = &url[rest_start..];
    let Some((before, query)) = rest.split_once('?') else {
        out.push_str(rest);
        return out;
    };
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    out.push_str(before);
    out.push('?');
    for (i, param) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match param.split_once('=') {
            Some((key, _)) if key.to_ascii_lowercase().contains("password") => {
                out.push_str(key);
                out.push_str("=***");
            }
            _ => out.push_str(param),
        }
    }
    out.push_str(fragment);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::request::RequestType;
    use orb_core::test_support;

    /// The SQLite commit token changes with every commit, whoever makes it, and with a new
    /// connection; it stays put while nothing is committed.
    #[tokio::test]
    async fn the_commit_token_changes_exactly_when_something_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        let store = Store::open_sqlite_file(&path).await.unwrap();
        let token = store.commit_token().await.expect("SQLite has a token");
        assert_eq!(store.commit_token().await.as_ref(), Some(&token));
        let mut request = test_support::request(RequestType::Acquire).build();
        store.insert_request(&mut request, &mut []).await.unwrap();
        let after_own = store.commit_token().await.unwrap();
        assert_ne!(after_own, token, "a commit of this store");
        assert_eq!(store.commit_token().await.as_ref(), Some(&after_own));
        // Another process's handle on the same file.
        let other = Store::open_sqlite_file(&path).await.unwrap();
        let mut theirs = test_support::request(RequestType::Acquire).build();
        other.insert_request(&mut theirs, &mut []).await.unwrap();
        let after_other = store.commit_token().await.unwrap();
        assert_ne!(after_other, after_own, "a commit of another connection");
        // A read changes nothing.
        store.get_request(&theirs.request_id).await.unwrap();
        assert_eq!(store.commit_token().await.as_ref(), Some(&after_other));
        // Two connections never share a token.
        assert_ne!(other.commit_token().await.unwrap(), after_other);
        other.close().await;
        store.close().await;
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://orb:s3cret@db:5432/orb"),
            "postgres://orb:***@db:5432/orb"
        );
        assert_eq!(redact("sqlite:///tmp/orb.db"), "sqlite:///tmp/orb.db");
        assert_eq!(redact("postgres://orb@db/orb"), "postgres://orb@db/orb");
        assert_eq!(
            redact("postgres://orb@db/orb?sslmode=require&password=s3cret"),
            "postgres://orb@db/orb?sslmode=require&password=***"
        );
        assert_eq!(
            redact("postgres://orb:s3cret@db/orb?PassWord=s3cret&sslpassword=s3cret#x"),
            "postgres://orb:***@db/orb?PassWord=***&sslpassword=***#x"
        );
        assert_eq!(
            redact("postgres://db/orb?user=orb&password=p%40ss@word"),
            "postgres://db/orb?user=orb&password=***"
        );
        assert_eq!(
            redact("postgres://orb:a?b@db/orb"),
            "postgres://orb:***@db/orb"
        );
    }
}
