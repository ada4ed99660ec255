//! The requests' history: one event when a request is stored and one per status change,
//! written in the transaction that stores it, so the history and the request never disagree
//! (a write that conflicts writes neither). `seq` numbers the events of all requests in the
//! order they were written; the broker-wide event stream resumes from it.

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::request::{Request, RequestStatus, RequestType};
use sqlx::any::{Any, AnyRow};
use sqlx::{AssertSqlSafe, Transaction};

use crate::codec::{RowReader, micros};
use crate::{Result, Store, StoreError};

const EVENT_COLUMNS: &str =
    "seq, request_id, request_type, event_type, status, previous_status, message, at";

/// What happened to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The request was stored, in its first status.
    Created,
    /// Its status changed.
    StatusChanged,
}

impl EventKind {
    pub const ALL: [EventKind; 2] = [EventKind::Created, EventKind::StatusChanged];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "request.created",
            EventKind::StatusChanged => "request.status_changed",
        }
    }
}

impl std::str::FromStr for EventKind {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown event type {text:?} (known: {})", known.join(", "))
            })
    }
}

/// One entry of a request's history.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestEvent {
    pub seq: i64,
    pub request_id: RequestId,
    pub request_type: RequestType,
    pub kind: EventKind,
    pub status: RequestStatus,
    /// The status before a change; `None` for [`EventKind::Created`].
    pub previous_status: Option<RequestStatus>,
    /// The request's status message as the change stored it.
    pub message: Option<String>,
    /// When the transition happened (the request's `last_transition_at`).
    pub at: Timestamp,
}

/// Which events to read, oldest first; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only events numbered above this.
    pub after_seq: Option<i64>,
    /// Only events at or after this time.
    pub since: Option<Timestamp>,
    pub kind: Option<EventKind>,
    /// At most this many (default 1000).
    pub limit: Option<u32>,
}

fn decode(row: &AnyRow) -> Result<RequestEvent> {
    let r = RowReader::new(row, "request event", "request_id");
    let id = r.text("request_id")?;
    Ok(RequestEvent {
        seq: r.int("seq")?,
        request_id: RequestId::parse(&id).map_err(|e| StoreError::Corrupt {
            entity: "request event",
            id: id.clone(),
            message: e.to_string(),
        })?,
        request_type: r.parsed("request_type")?,
        kind: r.parsed("event_type")?,
        status: r.parsed("status")?,
        previous_status: r.opt_parsed("previous_status")?,
        message: r.opt_text("message")?,
        at: r.time("at")?,
    })
}

/// Records that `request` was stored (called in its insert's transaction).
pub(crate) async fn record_created(tx: &mut Transaction<'_, Any>, request: &Request) -> Result<()> {
    sqlx::query(
        "INSERT INTO request_events (request_id, request_type, event_type, status, \
         previous_status, message, at) VALUES ($1, $2, $3, $4, NULL, $5, $6)",
    )
    .bind(request.request_id.to_string())
    .bind(request.request_type.as_str())
    .bind(EventKind::Created.as_str())
    .bind(request.status.as_str())
    .bind(request.status_message.clone())
    .bind(micros(request.last_transition_at))
    .execute(&mut **tx)
    .await
    .map_err(StoreError::db("record a new request's event"))?;
    Ok(())
}

/// Records a status change, read against the stored row before the update overwrites it:
/// nothing when the status stays, or when the row is not at the version read (the update then
/// conflicts and the transaction, this insert included, is rolled back).
pub(crate) async fn record_change(tx: &mut Transaction<'_, Any>, request: &Request) -> Result<()> {
    sqlx::query(
        "INSERT INTO request_events (request_id, request_type, event_type, status, \
         previous_status, message, at) \
         SELECT request_id, request_type, $1, $2, status, $3, $4 FROM requests \
         WHERE request_id = $5 AND version = $6 AND status <> $7",
    )
    .bind(EventKind::StatusChanged.as_str())
    .bind(request.status.as_str())
    .bind(request.status_message.clone())
    .bind(micros(request.last_transition_at))
    .bind(request.request_id.to_string())
    .bind(request.version)
    .bind(request.status.as_str())
    .execute(&mut **tx)
    .await
    .map_err(StoreError::db("record a request's status change"))?;
    Ok(())
}

/// The most events one read returns.
pub const MAX_EVENTS_PER_READ: u32 = 1000;

impl Store {
    /// `request_id`'s history, oldest first (empty for an unknown request, and for one
    /// stored before orb kept histories).
    pub async fn request_events(&self, request_id: &RequestId) -> Result<Vec<RequestEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM request_events WHERE request_id = $1 ORDER BY seq"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(request_id.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read a request's history"))?;
        rows.iter().map(decode).collect()
    }

    /// The number of the newest event (0 when there is none): where a live stream starts.
    pub async fn last_event_seq(&self) -> Result<i64> {
        let row: (i64,) = sqlx::query_as("SELECT COALESCE(MAX(seq), 0) FROM request_events")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("read the newest event's number"))?;
        Ok(row.0)
    }

    /// Events of every request matching `filter`, oldest first.
    pub async fn events(&self, filter: &EventFilter) -> Result<Vec<RequestEvent>> {
        let limit = filter
            .limit
            .unwrap_or(MAX_EVENTS_PER_READ)
            .clamp(1, MAX_EVENTS_PER_READ);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM request_events \
             WHERE seq > $1 AND at >= $2 AND ($3 = '' OR event_type = $3) \
             ORDER BY seq LIMIT {limit}"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(filter.after_seq.unwrap_or(0))
            .bind(filter.since.map(micros).unwrap_or(i64::MIN))
            .bind(filter.kind.map(EventKind::as_str).unwrap_or(""))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read request events"))?;
        rows.iter().map(decode).collect()
    }
}
