//! `GET /jobs/{id}/events/stream`: a job's events as server-sent events, as they are
//! written. Each is sent once, in order, with its id, so a client that reconnects with
//! `Last-Event-ID` (or `?after=`) goes on without a gap or a repeat. The stream ends after
//! the job's terminal event; while the job runs, a comment every [`KEEP_ALIVE`] keeps
//! proxies from closing it. Between events it holds no database connection and polls
//! nothing: the job's changes wake it.

use std::collections::VecDeque;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use uuid::Uuid;

use super::error::{ApiError, Code, Problem};
use super::jobs::find;
use super::AppState;
use crate::auth::Caller;
use crate::domain::JobEvent;
use crate::live::Watch;

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
    let after = match req.headers().get("last-event-id") {
        Some(value) => {
            let text = value.to_str().unwrap_or_default().trim();
            let parsed = text.parse::<i64>().map_err(|_| {
                ApiError::new(Code::InvalidQuery, "Last-Event-ID must be the id of an event this stream sent")
            })?;
            Some(parsed)
        }
        None => query.after,
    };
    let id = *id;
    let watch = state.waiters.watch(id);
    find(&state, &caller, id).await?;
    let cursor = Cursor { state, id, after, pending: VecDeque::new(), watch, ended: false };
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(futures_util::stream::unfold(cursor, next_frame)))
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

/// Where a stream stands.
struct Cursor {
    state: web::Data<AppState>,
    id: Uuid,
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
        // The job first, then its events: the event that ends a job is written in the same
        // transaction as its state, so a job read as ended has all its events readable.
        let job = cursor.state.store.get(cursor.id).await.ok()??;
        let events = cursor.state.store.events(cursor.id, cursor.after, PAGE).await.ok()?;
        if !events.is_empty() {
            cursor.pending.extend(events);
            continue;
        }
        if job.status.is_terminal() {
            cursor.ended = true;
            continue;
        }
        tokio::select! {
            () = cursor.watch.changed() => {}
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
