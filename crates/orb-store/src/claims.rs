//! Claims: which live process is working on a request right now. A process that creates an
//! acquire's objects (or resumes it) holds the request's claim for as long as it works;
//! another process that finds the acquire unfinished and nothing recorded asks for the claim:
//! granted means nobody works on it any more (the creator was killed) and it may resume the
//! acquire at once; refused means someone still does.
//!
//! The claim dies with its holder, whatever kills it: on SQLite it is an exclusive lock on a
//! file next to the database (`<db dir>/claims/<request id>`), which the kernel drops with the
//! process; on PostgreSQL a session advisory lock on a connection of its own, which the server
//! drops with the connection. Within one process a set of held ids answers first (a process
//! must not resume what it is still creating itself).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use orb_core::ids::RequestId;
use sqlx::{AnyConnection, Connection};

use crate::limits::advisory_key;
use crate::{Backend, Result, Store, StoreError};

/// How claims are kept for one store.
#[derive(Debug, Clone)]
pub(crate) enum ClaimBackend {
    /// Lock files in this directory (SQLite).
    Files(PathBuf),
    /// Session advisory locks on one dedicated connection (PostgreSQL), opened on first use.
    Advisory {
        url: String,
        connection: Arc<tokio::sync::Mutex<Option<AnyConnection>>>,
    },
    /// No other process can see this database (in memory).
    ProcessOnly,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct HeldClaims(Arc<Mutex<HashSet<String>>>);

impl HeldClaims {
    fn take(&self, id: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string())
    }

    fn give_back(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
}

/// A held claim; dropping it gives it back.
#[derive(Debug)]
pub struct Claim {
    id: String,
    held: HeldClaims,
    hold: Hold,
}

#[derive(Debug)]
enum Hold {
    File {
        file: std::fs::File,
        path: PathBuf,
    },
    Advisory {
        key: i64,
        connection: Arc<tokio::sync::Mutex<Option<AnyConnection>>>,
    },
    Process,
}

impl Drop for Claim {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.hold, Hold::Process) {
            Hold::File { file, path } => {
                // Unlinked while still locked: a process that opened the file before the
                // unlink and locks it after we close it holds a claim on a file nobody else
                // will open, and finds the acquire recorded when it looks again.
                let _ = std::fs::remove_file(&path);
                drop(file);
            }
            Hold::Advisory { key, connection } => {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        let mut slot = connection.lock().await;
                        if let Some(conn) = slot.as_mut() {
                            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                                .bind(key)
                                .execute(conn)
                                .await;
                        }
                    });
                }
            }
            Hold::Process => {}
        }
        self.held.give_back(&self.id);
    }
}

impl ClaimBackend {
    pub(crate) fn for_url(url: &str, backend: Backend) -> Self {
        match backend {
            Backend::Postgres => Self::Advisory {
                url: url.to_string(),
                connection: Default::default(),
            },
            Backend::Sqlite => match sqlite_file(url) {
                Some(file) => Self::Files(
                    file.parent()
                        .map(|d| d.join("claims"))
                        .unwrap_or_else(|| PathBuf::from("claims")),
                ),
                None => Self::ProcessOnly,
            },
        }
    }
}

/// The database file of a `sqlite://` URL, or `None` for an in-memory database.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && !path.contains(":memory:")).then(|| PathBuf::from(path))
}

impl Store {
    /// Takes the claim on `request_id` if no live process holds it; `None` when one does.
    pub async fn try_claim(&self, request_id: &RequestId) -> Result<Option<Claim>> {
        let id = request_id.to_string();
        if !self.held.take(&id) {
            return Ok(None);
        }
        let hold = match self.try_hold(&id).await {
            Ok(Some(hold)) => hold,
            Ok(None) => {
                self.held.give_back(&id);
                return Ok(None);
            }
            Err(e) => {
                self.held.give_back(&id);
                return Err(e);
            }
        };
        Ok(Some(Claim {
            id,
            held: self.held.clone(),
            hold,
        }))
    }

    async fn try_hold(&self, id: &str) -> Result<Option<Hold>> {
        match &self.claims {
            ClaimBackend::ProcessOnly => Ok(Some(Hold::Process)),
            ClaimBackend::Files(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                    path: dir.display().to_string(),
                    source,
                })?;
                let path = dir.join(id);
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(|source| StoreError::Claim {
                        path: path.display().to_string(),
                        source,
                    })?;
                match file.try_lock() {
                    Ok(()) => Ok(Some(Hold::File { file, path })),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                    Err(std::fs::TryLockError::Error(source)) => Err(StoreError::Claim {
                        path: path.display().to_string(),
                        source,
                    }),
                }
            }
            ClaimBackend::Advisory { url, connection } => {
                let key = advisory_key("orb-request", id);
                let mut slot = connection.lock().await;
                if slot.is_none() {
                    *slot = Some(AnyConnection::connect(url).await.map_err(|source| {
                        StoreError::Connect {
                            url: crate::redact(url),
                            source,
                        }
                    })?);
                }
                let conn = slot.as_mut().expect("connected above");
                let got: bool = match sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(key)
                    .fetch_one(&mut *conn)
                    .await
                {
                    Ok(got) => got,
                    Err(e) => {
                        // A broken connection lost every lock it held; the next claim opens a
                        // new one.
                        *slot = None;
                        return Err(StoreError::from_sqlx("take a request claim", e));
                    }
                };
                Ok(got.then(|| Hold::Advisory {
                    key,
                    connection: connection.clone(),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("sqlite:///var/lib/orb/orb.db?mode=rwc", Some("/var/lib/orb/orb.db"))]
    #[case("sqlite://relative/orb.db", Some("relative/orb.db"))]
    #[case("sqlite::memory:", None)]
    #[case("sqlite://:memory:", None)]
    fn the_database_file_of_a_sqlite_url(#[case] url: &str, #[case] file: Option<&str>) {
        assert_eq!(sqlite_file(url), file.map(PathBuf::from));
    }
}
