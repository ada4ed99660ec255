//! `GET /api/v1/requests/{id}/events`: a Server-Sent Events stream of one request, over the
//! broker's [`Watch`] (each poll a status call, backing off to the poll interval while
//! nothing changes): an event whenever what a client sees has changed, and the stream ends
//! after the event that shows a terminal status.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use super::AppState;
use super::model::RequestDetail;
use super::problem::Problem;
use super::requests::{parse_id, unknown};
use orb_broker::RequestView;
use orb_broker::watch::{Pace, Watch};

/// Event names on the stream.
pub const STATUS_EVENT: &str = "status";
pub const ERROR_EVENT: &str = "error";

struct Cursor {
    state: AppState,
    watch: Watch,
    sequence: u64,
}

fn status_event(sequence: u64, view: &RequestView) -> Event {
    let data = serde_json::to_string(&RequestDetail::from(view)).unwrap_or_default();
    Event::default()
        .event(STATUS_EVENT)
        .id(sequence.to_string())
        .data(data)
}

async fn next_event(mut cursor: Cursor) -> Option<(Result<Event, Infallible>, Cursor)> {
    let event = match cursor.watch.next(cursor.state.broker()).await? {
        Ok(view) => {
            cursor.sequence += 1;
            status_event(cursor.sequence, &view)
        }
        Err(err) => error_event(&Problem::from(err)),
    };
    Some((Ok(event), cursor))
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
    let pace = Pace::up_to(state.options().poll_interval);
    let cursor = Cursor {
        state,
        watch: Watch::new(id, pace, Some(first)),
        sequence: 0,
    };
    Ok(Sse::new(futures::stream::unfold(cursor, next_event)).keep_alive(KeepAlive::default()))
}
