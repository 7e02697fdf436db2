//! `GET /jobs/{id}/events/stream` and `GET /rooms/{room}/events/stream`: a job's events, or
//! those of every job of a room, as server-sent events, as they are written. Each is sent
//! once, in order, with its id, so a client that reconnects with `Last-Event-ID` (or
//! `?after=`) goes on without a gap or a repeat. A job's stream ends after its terminal
//! event; a room's stays open. While idle, a comment every [`KEEP_ALIVE`] keeps proxies from
//! closing it. Between events it holds no database connection and polls nothing: the job's
//! changes (any job's, for a room) wake it.
//!
//! Ids and commits: on PostgreSQL the sequence hands an event its id before its transaction
//! commits, and writers commit side by side. One job's events are written with its row
//! locked, so its ids commit in order; a room's come from many jobs, so the store hands a
//! room's events out only once every lower id has committed or gone (`store::sea::settle`),
//! and a cursor never passes an id still open. SQLite writes one transaction at a time.

use std::collections::VecDeque;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use uuid::Uuid;

use super::read::visible;
use crate::auth::Caller;
use crate::domain::JobEvent;
use crate::http::{ApiError, AppState, Code, Problem};
use crate::live::{Watch, ANY_JOB};

/// Seconds between keep-alive comments on an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events read from the store at a time.
const PAGE: u64 = 500;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Only events after this id (as `Last-Event-ID`, which wins when both are given).
    pub after: Option<i64>,
}

/// A job's events as `text/event-stream`: `id` (the event's id), `event` (its name) and
/// `data` (the event as JSON) per event.
#[utoipa::path(
    get, path = "/jobs/{id}/events/stream", tag = "jobs", operation_id = "stream_events",
    params(
        ("id" = Uuid, Path, description = "The job's id"),
        ("Last-Event-ID" = Option<i64>, Header, nullable = false, description = "Resume after this event id"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "The events, then each as it is written; ends after the job's last event. \
            Each frame's `data` is the event as JSON",
         content_type = "text/event-stream", body = SentEvent),
        (status = 400, description = "`invalid_query`: `Last-Event-ID` is not an event id", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn job_events(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    id: web::Path<Uuid>,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, ApiError> {
    let after = resume_after(&req, &query)?;
    let id = *id;
    let watch = state.waiters.watch(id);
    visible(&state, &caller, id).await?;
    Ok(stream(Cursor { state, of: Of::Job(id), after, pending: VecDeque::new(), watch, ended: false }))
}

/// Every event of every job of a room as `text/event-stream`, as the job stream sends them;
/// it stays open. A room the caller cannot read is 403 `room_forbidden`.
#[utoipa::path(
    get, path = "/rooms/{room}/events/stream", tag = "jobs", operation_id = "stream_room_events",
    params(
        ("room" = String, Path, description = "The room", pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$"),
        ("Last-Event-ID" = Option<i64>, Header, nullable = false, description = "Resume after this event id"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "The room's events, then each as it is written. Each frame's `data` is the \
            event as JSON", content_type = "text/event-stream", body = SentEvent),
        (status = 400, description = "`invalid_query`, `invalid_room_id`", body = Problem,
         content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`: the caller may not read this room", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn room_events(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    room: web::Path<String>,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, ApiError> {
    let after = resume_after(&req, &query)?;
    let room = crate::http::room_id(&room)?;
    if !caller.can_read(room.as_str()) {
        return Err(ApiError::new(Code::RoomForbidden, format!("this token may not read room {room}")));
    }
    let watch = state.waiters.watch(ANY_JOB);
    let of = Of::Room(room.as_str().to_owned());
    Ok(stream(Cursor { state, of, after, pending: VecDeque::new(), watch, ended: false }))
}

/// Where to resume: `Last-Event-ID`, else `?after=`.
fn resume_after(req: &HttpRequest, query: &StreamQuery) -> Result<Option<i64>, ApiError> {
    match req.headers().get("last-event-id") {
        Some(value) => {
            let text = value.to_str().unwrap_or_default().trim();
            let parsed = text.parse::<i64>().map_err(|_| {
                ApiError::new(Code::InvalidQuery, "Last-Event-ID must be the id of an event this stream sent")
            })?;
            Ok(Some(parsed))
        }
        None => Ok(query.after),
    }
}

fn stream(cursor: Cursor) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(futures_util::stream::unfold(cursor, next_frame))
}

/// One frame of the stream, as a client's SSE parser sees it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SentEvent {
    /// The event's id: send it back as `Last-Event-ID` to resume after it.
    id: String,
    /// The event's name (`job.progress`, `job.succeeded`, …).
    event: String,
    /// The event as JSON, a `JobEvent`.
    data: String,
}

/// What a stream follows.
enum Of {
    Job(Uuid),
    Room(String),
}

/// Where a stream stands.
struct Cursor {
    state: web::Data<AppState>,
    of: Of,
    /// The last event sent (or the one to resume after).
    after: Option<i64>,
    pending: VecDeque<JobEvent>,
    watch: Watch,
    /// The job has ended and its last event is in `pending` or sent.
    ended: bool,
}

/// The next frame: an event, or a keep-alive comment; `None` ends the stream (the job is
/// over, or the store failed and the client should reconnect with `Last-Event-ID`).
async fn next_frame(mut cursor: Cursor) -> Option<(Result<web::Bytes, actix_web::Error>, Cursor)> {
    loop {
        if let Some(event) = cursor.pending.pop_front() {
            cursor.after = Some(event.id);
            return Some((Ok(frame(&event)), cursor));
        }
        if cursor.ended {
            return None;
        }
        let store = &cursor.state.store;
        match &cursor.of {
            Of::Job(id) => {
                // The job's status first (not its row: a coordinator's holds megabytes of
                // inputs, and each batch wakes the stream), then its events: the event that
                // ends a job is written in the same transaction as its state, so a job read
                // as ended has all its events.
                let status = store.head(*id).await.ok()??.status;
                let events = store.events(*id, cursor.after, PAGE).await.ok()?;
                if !events.is_empty() {
                    cursor.pending.extend(events);
                    continue;
                }
                if status.is_terminal() {
                    cursor.ended = true;
                    continue;
                }
            }
            Of::Room(room) => {
                let events = store.room_events(room, cursor.after, PAGE).await.ok()?;
                if !events.is_empty() {
                    cursor.pending.extend(events);
                    continue;
                }
            }
        }
        tokio::select! {
            () = cursor.watch.changed() => {}
            // Draining: the client resumes elsewhere with Last-Event-ID.
            () = cursor.state.closing.cancelled() => return None,
            () = tokio::time::sleep(KEEP_ALIVE) => {
                return Some((Ok(web::Bytes::from_static(b": keep-alive\n\n")), cursor));
            }
        }
    }
}

/// One event as an SSE frame; its JSON is a single line.
fn frame(event: &JobEvent) -> web::Bytes {
    let data = serde_json::to_string(event).unwrap_or_else(|_| "{}".to_owned());
    web::Bytes::from(format!("id: {}\nevent: {}\ndata: {data}\n\n", event.id, event.event))
}
