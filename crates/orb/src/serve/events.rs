//! `GET /api/v1/requests/{id}/events`: a Server-Sent Events stream of one request, over the
//! broker's [`Watch`] (each poll a status call, backing off to the poll interval while
//! nothing changes): an event whenever what a client sees has changed, and the stream ends
//! after the event that shows a terminal status. `…/{id}/stream` is the reference broker's
//! stream: a frame every interval, and a closing `data: {}`.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use super::AppState;
use super::extract::ApiQuery;
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

fn status_event(state: &AppState, sequence: u64, view: &RequestView) -> Event {
    let data = serde_json::to_string(&state.detail(view)).unwrap_or_default();
    Event::default()
        .event(STATUS_EVENT)
        .id(sequence.to_string())
        .data(data)
}

async fn next_event(mut cursor: Cursor) -> Option<(Result<Event, Infallible>, Cursor)> {
    let event = match cursor.watch.next(cursor.state.broker()).await? {
        Ok(view) => {
            cursor.sequence += 1;
            status_event(&cursor.state, cursor.sequence, &view)
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
        // The body is a stream of SSE frames, not one JSON document: a schema of RequestDetail
        // here made generated clients parse the whole stream as one object (and fail).
        (status = 200, description = "text/event-stream of `status` events; each event's `data` is a RequestDetail (#/components/schemas/RequestDetail) as JSON", content_type = "text/event-stream", body = String),
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

/// `?interval=S&timeout=S` of `GET /api/v1/requests/{id}/stream`.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Seconds between frames, 0.5 to 60 (default 2).
    pub interval: Option<f64>,
    /// Seconds before the stream ends anyway, 1 to 3600 (default 300).
    pub timeout: Option<f64>,
}

pub const STREAM_INTERVAL: (f64, f64, f64) = (0.5, 2.0, 60.0);
pub const STREAM_TIMEOUT: (f64, f64, f64) = (1.0, 300.0, 3600.0);

fn seconds(
    name: &str,
    given: Option<f64>,
    (low, default, high): (f64, f64, f64),
) -> Result<Duration, Problem> {
    let secs = given.unwrap_or(default);
    if !(low..=high).contains(&secs) {
        return Err(Problem::bad_request(
            &format!("invalid-{name}"),
            format!("{name}={secs} is out of range; give {low} to {high} seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

struct Frames {
    state: AppState,
    id: orb_core::ids::RequestId,
    interval: Duration,
    deadline: Instant,
    next: Next,
}

enum Next {
    /// The first frame, already read.
    First(Box<RequestView>),
    /// Read again after the interval.
    Poll,
    /// Send the closing `data: {}`, with a comment saying why.
    Close(String),
    Ended,
}

fn frame(state: &AppState, view: &RequestView) -> Event {
    Event::default().data(serde_json::to_string(&state.detail(view)).unwrap_or_default())
}

async fn next_frame(mut f: Frames) -> Option<(Result<Event, Infallible>, Frames)> {
    let event = match std::mem::replace(&mut f.next, Next::Ended) {
        Next::Ended => return None,
        Next::Close(why) => Event::default().comment(why).data("{}"),
        Next::First(view) => {
            f.next = after(&view);
            frame(&f.state, &view)
        }
        Next::Poll => {
            // The last wait is cut short at the deadline, so the final frame is current.
            let wait = f
                .interval
                .min(f.deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(wait).await;
            match f.state.broker().refresh(&f.id).await {
                Ok(Some(view)) => {
                    f.next = after(&view);
                    if matches!(f.next, Next::Poll) && Instant::now() >= f.deadline {
                        f.next =
                            Next::Close("timeout reached; the request is still running".into());
                    }
                    frame(&f.state, &view)
                }
                Ok(None) => Event::default().comment("the request is gone").data("{}"),
                Err(err) => {
                    let problem = Problem::from(err);
                    tracing::warn!(request_id = %f.id, error = %problem.detail, "stream ended on an error");
                    Event::default()
                        .comment(format!("error: {}", problem.detail))
                        .data("{}")
                }
            }
        }
    };
    Some((Ok(event), f))
}

fn after(view: &RequestView) -> Next {
    if view.request.status.is_terminal() {
        Next::Close(format!("request {}", view.request.status))
    } else {
        Next::Poll
    }
}

/// The reference broker's stream of one request: every `interval` a frame `data: <the same
/// JSON as …/status>`; once the request is terminal, on an error, or at `timeout`, one
/// closing `data: {}` (with an SSE comment saying why) and the stream ends.
#[utoipa::path(
    get,
    path = "/api/v1/requests/{request_id}/stream",
    tag = "requests",
    operation_id = "stream_request_status_api_v1_requests__request_id__stream_get",
    params(("request_id" = String, Path, description = "req-… or ret-…"), StreamQuery),
    responses(
        // A stream of frames, not one JSON document (as on `…/events`).
        (status = 200, description = "text/event-stream of status frames, each frame's `data` a RequestDetail (#/components/schemas/RequestDetail) as JSON, then a closing `data: {}`", content_type = "text/event-stream", body = String),
        (status = 400, description = "Not a request id, or interval/timeout out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown request", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_stream(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    ApiQuery(query): ApiQuery<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let id = parse_id(&raw)?;
    let interval = seconds("interval", query.interval, STREAM_INTERVAL)?;
    let timeout = seconds("timeout", query.timeout, STREAM_TIMEOUT)?;
    let Some(first) = state.broker().refresh(&id).await? else {
        return Err(unknown(&id));
    };
    let frames = Frames {
        state,
        id,
        interval,
        deadline: Instant::now() + timeout,
        next: Next::First(Box::new(first)),
    };
    Ok(Sse::new(futures::stream::unfold(frames, next_frame)).keep_alive(KeepAlive::default()))
}
