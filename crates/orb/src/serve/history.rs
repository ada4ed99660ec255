//! What happened to requests, from the store's history: `GET /api/v1/requests/{id}/timeline`
//! (one request's status changes with their times) and `GET /api/v1/events/` (a Server-Sent
//! Events feed of every request's changes, resumable by event number). Both read what orb has
//! recorded; nothing asks the cluster.

use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use jiff::Timestamp;
use orb_store::{EventFilter, EventKind, RequestEvent};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::ApiQuery;
use super::problem::Problem;
use super::requests::{parse_id, unknown};

/// One status change of a request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventItem {
    /// The event's number, increasing across all requests (resume a feed after it).
    pub seq: i64,
    /// When the change happened (RFC 3339).
    pub at: String,
    /// `request.created` or `request.status_changed`.
    pub event_type: String,
    pub request_id: String,
    /// `acquire` or `return`.
    pub request_type: String,
    /// The status the request took.
    pub status: String,
    /// The status it left; null for `request.created`.
    pub previous_status: Option<String>,
    /// The request's status message as the change stored it.
    pub message: Option<String>,
}

impl EventItem {
    fn of(event: &RequestEvent) -> Self {
        Self {
            seq: event.seq,
            at: event.at.to_string(),
            event_type: event.kind.as_str().into(),
            request_id: event.request_id.to_string(),
            request_type: event.request_type.as_str().into(),
            status: event.status.as_str().into(),
            previous_status: event.previous_status.map(|s| s.as_str().to_string()),
            message: event.message.clone(),
        }
    }
}

/// `{request_id, request_type, status, is_terminal, timeline, count}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Timeline {
    pub request_id: String,
    pub request_type: String,
    /// The status now.
    pub status: String,
    pub is_terminal: bool,
    /// Oldest first. Empty for a request stored before orb kept histories.
    pub timeline: Vec<EventItem>,
    pub count: usize,
}

/// A request's status changes with their times, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}/timeline",
    tag = "requests",
    operation_id = "get_request_timeline_api_v1_requests__request_id__timeline_get",
    params(("request_id" = String, Path, description = "req-… or ret-…")),
    responses(
        (status = 200, description = "The request's history", body = Timeline),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn timeline(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Timeline>, Problem> {
    let id = parse_id(&raw)?;
    let Some((request, events)) = state.broker().timeline(&id).await? else {
        return Err(unknown(&id));
    };
    let timeline: Vec<EventItem> = events.iter().map(EventItem::of).collect();
    Ok(Json(Timeline {
        request_id: request.request_id.to_string(),
        request_type: request.request_type.as_str().into(),
        status: request.status.as_str().into(),
        is_terminal: request.status.is_terminal(),
        count: timeline.len(),
        timeline,
    }))
}

/// `?since=T&since_seq=N&type=E&timeout=S` of `GET /api/v1/events/`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Replay events from this time on (RFC 3339, e.g. `2026-12-01T10:00:00Z`).
    pub since: Option<String>,
    /// Replay events numbered above this (`Last-Event-ID` does the same on a reconnect).
    pub since_seq: Option<i64>,
    /// Only this event type: `request.created` or `request.status_changed`.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    /// End the stream after this many seconds, 1 to 86400 (default: never; the client
    /// disconnects, or the server stops).
    pub timeout: Option<f64>,
}

/// How far behind the newest number a feed looks again for events committed late (on
/// PostgreSQL numbers are taken before commit, so a lower one can appear after a higher).
const LOOKBACK: i64 = 200;
const EVENTS_TIMEOUT_MAX: f64 = 86_400.0;

struct Feed {
    state: AppState,
    /// The highest number sent.
    cursor: i64,
    /// Numbers sent within the look-back window, so a second look sends nothing twice.
    sent: BTreeSet<i64>,
    since: Option<Timestamp>,
    kind: Option<EventKind>,
    deadline: Option<Instant>,
    interval: Duration,
    ready: VecDeque<Event>,
    first_read: bool,
}

impl Feed {
    async fn fill(&mut self) {
        let filter = EventFilter {
            after_seq: Some((self.cursor - LOOKBACK).max(0)),
            since: self.since,
            kind: self.kind,
            limit: None,
        };
        match self.state.broker().events(&filter).await {
            Ok(events) => {
                for event in events {
                    if event.seq <= self.cursor - LOOKBACK || !self.sent.insert(event.seq) {
                        continue;
                    }
                    self.cursor = self.cursor.max(event.seq);
                    let data = serde_json::to_string(&EventItem::of(&event)).unwrap_or_default();
                    self.ready.push_back(
                        Event::default()
                            .id(event.seq.to_string())
                            .event(event.kind.as_str())
                            .data(data),
                    );
                }
                let floor = self.cursor - LOOKBACK;
                self.sent.retain(|seq| *seq > floor);
            }
            Err(err) => {
                let problem = Problem::from(err);
                self.ready.push_back(
                    Event::default()
                        .event("error")
                        .data(serde_json::to_string(&problem).unwrap_or_default()),
                );
            }
        }
        self.first_read = false;
    }
}

async fn next_event(mut feed: Feed) -> Option<(Result<Event, Infallible>, Feed)> {
    loop {
        if let Some(event) = feed.ready.pop_front() {
            return Some((Ok(event), feed));
        }
        let wait = match feed.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                feed.interval.min(left)
            }
            None => feed.interval,
        };
        if !feed.first_read {
            tokio::time::sleep(wait).await;
        }
        feed.fill().await;
    }
}

/// Every request's status changes as Server-Sent Events: `id: <seq>`, `event: <type>`,
/// `data: <EventItem>`. Without `since`/`since_seq` (or `Last-Event-ID`) it starts with the
/// next change; with one, it first replays what was recorded after it.
#[utoipa::path(
    get,
    path = "/api/v1/events/",
    tag = "events",
    operation_id = "stream_events_api_v1_events__get",
    params(EventsQuery),
    responses(
        // A stream of frames, not one JSON document (as on `…/events` of one request).
        (status = 200, description = "text/event-stream of request events; each event's `data` is an entry of a request's timeline (seq, at, event_type, request_id, request_type, status, previous_status, message) as JSON", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad since, since_seq, type or timeout", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let since = query
        .since
        .as_deref()
        .map(|text| {
            text.parse::<Timestamp>().map_err(|e| {
                Problem::bad_request(
                    "invalid-since",
                    format!(
                        "since={text:?} is not an RFC 3339 time ({e}); give e.g. \
                         2026-12-01T10:00:00Z"
                    ),
                )
            })
        })
        .transpose()?;
    let kind = query
        .event_type
        .as_deref()
        .map(|text| {
            text.parse::<EventKind>()
                .map_err(|e| Problem::bad_request("invalid-type", e))
        })
        .transpose()?;
    if let Some(seq) = query.since_seq
        && seq < 0
    {
        return Err(Problem::bad_request(
            "invalid-since-seq",
            format!("since_seq={seq} is negative; give an event number (0 replays them all)"),
        ));
    }
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    Problem::bad_request(
                        "invalid-last-event-id",
                        "Last-Event-ID must be the number of an event this stream sent",
                    )
                })?,
        ),
    };
    let deadline = match query.timeout {
        None => None,
        Some(secs) if (1.0..=EVENTS_TIMEOUT_MAX).contains(&secs) => {
            Some(Instant::now() + Duration::from_secs_f64(secs))
        }
        Some(secs) => {
            return Err(Problem::bad_request(
                "invalid-timeout",
                format!("timeout={secs} is out of range; give 1 to {EVENTS_TIMEOUT_MAX} seconds"),
            ));
        }
    };
    // A replay starts where it is told; a live feed at the newest event.
    let cursor = match (last_event_id.or(query.since_seq), since) {
        (Some(seq), _) => seq,
        (None, Some(_)) => 0,
        (None, None) => state.broker().last_event_seq().await?,
    };
    let feed = Feed {
        interval: state.options().poll_interval,
        state,
        cursor,
        // The look-back must not resend what the replay point already covers.
        sent: ((cursor - LOOKBACK).max(0) + 1..=cursor).collect(),
        since,
        kind,
        deadline,
        ready: VecDeque::new(),
        first_read: true,
    };
    Ok(Sse::new(futures::stream::unfold(feed, next_event)).keep_alive(KeepAlive::default()))
}

/// `GET /api/v1/events`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "events",
    params(EventsQuery),
    responses(
        (status = 200, description = "As GET /api/v1/events/", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad since, since_seq, type or timeout", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn events_bare(
    state: State<AppState>,
    headers: HeaderMap,
    query: ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    events(state, headers, query).await
}
