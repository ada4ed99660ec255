//! Reads of a SQLite store on the calling thread, for a process that answers one call and
//! exits (a HostFactory status poll with no daemon up).
//!
//! sqlx runs every SQLite connection on a worker thread of its own and hands each statement
//! over to it. For a process that makes three reads and exits, starting that thread and
//! waking it and the caller for every statement cost more than the reads themselves. This
//! reader makes the same reads, decoded by the same code as [`Store`](crate::Store)'s, on
//! the caller's thread. It only reads, and only a file that needs nothing done first: any
//! error ([`SameThreadError`]) means "ask the [`Store`](crate::Store) instead", which
//! migrates, creates, or reports the problem with its full context.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_core::request::Request;
use rusqlite::{Connection, OpenFlags};
use sqlx::sqlite::SqliteConnectOptions;

use crate::machines::{aggregate_sql, from_aggregate, one_request};
use crate::migrate::{SQLITE_HEADER_SQL, SQLITE_SCHEMA_VERSION};
use crate::requests::{REQUEST_COLUMNS, decode};
use crate::{Backend, MachineFilter, StoreError};

/// Why a read was not made here; the caller reads through a [`Store`](crate::Store) instead.
#[derive(Debug, thiserror::Error)]
pub enum SameThreadError {
    #[error("{url:?} is not a plain SQLite file URL (only `?mode=rwc` or `?mode=rw` options)")]
    NotAFile { url: String },
    #[error(
        "the SQLite file is at schema version {user_version} in journal mode {journal_mode:?}; \
         this build reads version {SQLITE_SCHEMA_VERSION} in WAL mode without migrating"
    )]
    NeedsMigrator {
        user_version: i64,
        journal_mode: String,
    },
    #[error("only the machines of exactly one request are read on this thread")]
    NotOneRequest,
    #[error("the machines do not decode from one JSON value; only a read row by row says why")]
    NeedsRowByRow,
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A connection to a SQLite store on the thread that opened it. Dropping it closes the
/// file; the last connection to close checkpoints the write-ahead log and removes it, as
/// [`Store::close`](crate::Store::close) does.
#[derive(Debug)]
pub struct SameThreadReader {
    connection: Connection,
}

impl SameThreadReader {
    /// Opens the SQLite file of `url` if it exists and is at this build's schema in WAL mode
    /// (what every file a [`Store`](crate::Store) opened once is). Nothing is created or
    /// changed.
    pub fn open(url: &str) -> Result<Self, SameThreadError> {
        let path = file_of(url).ok_or_else(|| SameThreadError::NotAFile { url: url.into() })?;
        // Not created when missing; no mutex: the connection never leaves this value.
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let (user_version, journal_mode): (i64, String) =
            connection.query_row(SQLITE_HEADER_SQL, [], |row| Ok((row.get(0)?, row.get(1)?)))?;
        if user_version != SQLITE_SCHEMA_VERSION || !journal_mode.eq_ignore_ascii_case("wal") {
            return Err(SameThreadError::NeedsMigrator {
                user_version,
                journal_mode,
            });
        }
        Ok(Self { connection })
    }

    /// The request `request_id`, as [`Store::get_request`](crate::Store::get_request) reads it.
    pub fn get_request(&self, request_id: &RequestId) -> Result<Option<Request>, SameThreadError> {
        let sql = format!("SELECT {REQUEST_COLUMNS} FROM requests WHERE request_id = ?1");
        let mut statement = self.connection.prepare(&sql)?;
        let mut rows = statement.query([request_id.to_string()])?;
        match rows.next()? {
            Some(row) => Ok(Some(decode(row)?)),
            None => Ok(None),
        }
    }

    /// The machines of the one request `filter` names (its `request_id` or its
    /// `return_request_id`, nothing else), in list order, as
    /// [`Store::request_machines`](crate::Store::request_machines) reads them.
    pub fn request_machines(
        &self,
        filter: &MachineFilter,
    ) -> Result<Vec<Machine>, SameThreadError> {
        let (column, id, _) = one_request(filter).ok_or(SameThreadError::NotOneRequest)?;
        let sql = aggregate_sql(Backend::Sqlite, &format!("{column} = ?1"));
        // An aggregate always yields one row, `[]` when no machine matches.
        let text: String = self
            .connection
            .query_row(&sql, [id.to_string()], |row| row.get(0))?;
        Ok(from_aggregate(&text).ok_or(SameThreadError::NeedsRowByRow)??)
    }
}

/// The file of a `sqlite:` URL, decoded as sqlx decodes it; `None` for an in-memory database
/// or a URL with options beyond the open mode (they change how the file is opened).
fn file_of(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (database, options) = rest.split_once('?').unwrap_or((rest, ""));
    if database.is_empty() || database == ":memory:" {
        return None;
    }
    if !matches!(options, "" | "mode=rwc" | "mode=rw") {
        return None;
    }
    let parsed = SqliteConnectOptions::from_str(url).ok()?;
    Some(Path::to_path_buf(parsed.get_filename()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, sqlite_url};
    use orb_core::machine::MachineStatus;
    use orb_core::request::{RequestStatus, RequestType};
    use orb_core::test_support::{self, at};

    /// A store holding an acquire of three machines, two of them taken back by a return.
    async fn stored(path: &Path) -> (Store, Request, Request) {
        let store = Store::open_sqlite_file(path).await.unwrap();
        let mut acquire = test_support::request(RequestType::Acquire)
            .count(3)
            .status(RequestStatus::Complete)
            .fulfilled(3)
            .message("3 of 3 running")
            .started(at(1))
            .deadline(at(600))
            .provider_data(serde_json::json!({"pods": ["a", "b", "c"]}))
            .build();
        let mut giving_back = test_support::request(RequestType::Return)
            .no_template()
            .count(2)
            .build();
        let mut machines: Vec<Machine> = (0..3)
            .map(|i| {
                let mut m = test_support::machine(&format!("m-{i}"))
                    .of(&acquire)
                    .ip(&format!("10.0.0.{i}"))
                    .launched(at(5))
                    .tag("team", "hpc")
                    .status(MachineStatus::Running)
                    .build();
                // Created out of id order: the list order is creation time, then id.
                m.created_at = at(10 - i);
                if i > 0 {
                    m.return_request_id = Some(giving_back.request_id.clone());
                }
                m
            })
            .collect();
        store
            .insert_request(&mut acquire, &mut machines)
            .await
            .unwrap();
        store
            .insert_request(&mut giving_back, &mut [])
            .await
            .unwrap();
        (store, acquire, giving_back)
    }

    #[tokio::test]
    async fn reads_what_the_store_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        let (store, acquire, giving_back) = stored(&path).await;
        let reader = SameThreadReader::open(&sqlite_url(&path)).unwrap();
        for request in [&acquire, &giving_back] {
            let id = &request.request_id;
            assert_eq!(
                reader.get_request(id).unwrap(),
                store.get_request(id).await.unwrap(),
                "{id}"
            );
            let filter = MachineFilter::of_request(request);
            let here = reader.request_machines(&filter).unwrap();
            assert_eq!(here, store.request_machines(&filter).await.unwrap(), "{id}");
            assert!(!here.is_empty(), "{id}");
        }
        let names: Vec<_> = reader
            .request_machines(&MachineFilter::of_request(&acquire))
            .unwrap()
            .into_iter()
            .map(|m| m.machine_id)
            .collect();
        assert_eq!(names, ["m-2", "m-1", "m-0"], "oldest first");
        let unknown = RequestId::new_acquire();
        assert_eq!(reader.get_request(&unknown).unwrap(), None);
        assert!(matches!(
            reader.request_machines(&MachineFilter::default()),
            Err(SameThreadError::NotOneRequest)
        ));
        store.close().await;
    }

    #[tokio::test]
    async fn each_read_sees_what_was_committed_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        let (store, mut acquire, _) = stored(&path).await;
        let reader = SameThreadReader::open(&sqlite_url(&path)).unwrap();
        let before = reader.get_request(&acquire.request_id).unwrap().unwrap();
        acquire.status_message = Some("changed by another process".into());
        store.update_request(&mut acquire, &mut []).await.unwrap();
        let after = reader.get_request(&acquire.request_id).unwrap().unwrap();
        assert_eq!(after.version, before.version + 1);
        assert_eq!(
            after,
            store
                .get_request(&acquire.request_id)
                .await
                .unwrap()
                .unwrap()
        );
        store.close().await;
    }

    #[tokio::test]
    async fn the_last_close_removes_the_write_ahead_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        let (store, acquire, _) = stored(&path).await;
        store.close().await;
        let wal = path.with_extension("db-wal");
        assert!(!wal.exists());
        let reader = SameThreadReader::open(&sqlite_url(&path)).unwrap();
        reader.get_request(&acquire.request_id).unwrap();
        assert!(wal.exists(), "a connection in WAL mode opens the log");
        drop(reader);
        assert!(!wal.exists() && !path.with_extension("db-shm").exists());
    }

    #[test]
    fn a_missing_file_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        assert!(matches!(
            SameThreadReader::open(&sqlite_url(&path)),
            Err(SameThreadError::Sqlite(_))
        ));
        assert!(!path.exists());
    }

    #[test]
    fn a_file_not_brought_up_to_date_is_left_to_the_migrator() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER)")
            .unwrap();
        match SameThreadReader::open(&sqlite_url(&path)) {
            Err(SameThreadError::NeedsMigrator {
                user_version,
                journal_mode,
            }) => assert_eq!((user_version, journal_mode.as_str()), (0, "delete")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_plain_file_urls_are_opened_here() {
        assert_eq!(
            file_of("sqlite:///var/lib/orb/orb.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/orb/orb.db"))
        );
        assert_eq!(file_of("sqlite://orb.db"), Some(PathBuf::from("orb.db")));
        assert_eq!(
            file_of("sqlite:/tmp/a%3Fb.db?mode=rw"),
            Some(PathBuf::from("/tmp/a?b.db"))
        );
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://?mode=memory",
            "sqlite:///tmp/orb.db?mode=ro",
            "sqlite:///tmp/orb.db?immutable=true",
            "postgres://orb@db/orb",
        ] {
            assert_eq!(file_of(url), None, "{url}");
        }
    }
}
