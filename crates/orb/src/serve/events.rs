//! `GET /api/v1/requests/{id}/events`: a Server-Sent Events stream of one request. The
//! request is re-read (through the broker, so the provider is asked as for a status call)
//! every poll interval; an event is sent whenever what a client sees has changed, and the
//! stream ends after the event that shows a terminal status.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use super::AppState;
use super::model::RequestDetail;
use super::problem::Problem;
use super::requests::{parse_id, unknown};
use orb_broker::RequestView;
use orb_core::ids::RequestId;

/// Event names on the stream.
pub const STATUS_EVENT: &str = "status";
pub const ERROR_EVENT: &str = "error";

/// What a subscriber can observe of a request; a change of any part is an event.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    status: orb_core::request::RequestStatus,
    fulfilled: u32,
    failed: u32,
    message: Option<String>,
    machines: Vec<(String, orb_core::machine::MachineStatus)>,
}

impl Seen {
    fn of(view: &RequestView) -> Self {
        Self {
            status: view.request.status,
            fulfilled: view.request.fulfilled_count,
            failed: view.request.failed_count,
            message: view.request.status_message.clone(),
            machines: view
                .machines
                .iter()
                .map(|m| (m.machine_id.clone(), m.status))
                .collect(),
        }
    }
}

struct Cursor {
    state: AppState,
    id: RequestId,
    last: Option<Seen>,
    first: Option<RequestView>,
    sequence: u64,
    done: bool,
}

fn status_event(sequence: u64, view: &RequestView) -> Event {
    let data = serde_json::to_string(&RequestDetail::from(view)).unwrap_or_default();
    Event::default()
        .event(STATUS_EVENT)
        .id(sequence.to_string())
        .data(data)
}

async fn next_event(mut cursor: Cursor) -> Option<(Result<Event, Infallible>, Cursor)> {
    if cursor.done {
        return None;
    }
    loop {
        let view = match cursor.first.take() {
            Some(view) => view,
            None => {
                tokio::time::sleep(cursor.state.options().poll_interval).await;
                match cursor.state.broker().refresh(&cursor.id).await {
                    Ok(Some(view)) => view,
                    Ok(None) => {
                        cursor.done = true;
                        let problem = unknown(&cursor.id);
                        return Some((Ok(error_event(&problem)), cursor));
                    }
                    Err(err) => {
                        cursor.done = true;
                        let problem = Problem::from(err);
                        return Some((Ok(error_event(&problem)), cursor));
                    }
                }
            }
        };
        let seen = Seen::of(&view);
        if cursor.last.as_ref() == Some(&seen) {
            continue;
        }
        cursor.last = Some(seen);
        cursor.sequence += 1;
        cursor.done = view.request.status.is_terminal();
        return Some((Ok(status_event(cursor.sequence, &view)), cursor));
    }
}

fn error_event(problem: &Problem) -> Event {
    Event::default()
        .event(ERROR_EVENT)
        .data(serde_json::to_string(problem).unwrap_or_default())
}

/// Streams the request's changes as `status` events (each carrying the whole request and
/// its machines, like `/status`); the first event is the current state, the stream ends
/// after a terminal status. An `error` event (a problem document) ends it early.
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}/events",
    tag = "requests",
    params(("request_id" = String, Path, description = "req-… or ret-…")),
    responses(
        (status = 200, description = "text/event-stream of `status` events, each a RequestDetail as JSON", content_type = "text/event-stream", body = RequestDetail),
        (status = 400, description = "Not a request id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_events(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let id = parse_id(&raw)?;
    let Some(first) = state.broker().refresh(&id).await? else {
        return Err(unknown(&id));
    };
    let cursor = Cursor {
        state,
        id,
        last: None,
        first: Some(first),
        sequence: 0,
        done: false,
    };
    Ok(Sse::new(futures::stream::unfold(cursor, next_event)).keep_alive(KeepAlive::default()))
}
