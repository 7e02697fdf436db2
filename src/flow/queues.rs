//! `/admin/queues`: every queue with its state (running or paused), its waiting and running
//! jobs and its longest wait, read over the status index (the figures the dashboard and
//! `/metrics` show); `POST /admin/queues/{name}/pause` and `/resume`.

use std::collections::BTreeMap;

use actix_web::web;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::pauses::{Pause, QueuePauses};
use crate::auth::Caller;
use crate::http::{ApiError, AppState, Code, Problem};
use crate::store::{clock, overview::QueueFigures, StoreError};

/// Takes no parameter; any is refused (`invalid_query`).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueuesQuery {}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueList {
    /// Every configured job queue (at 0 when empty), the queues of registered types
    /// (`@remote`) and uploads (`@scripts`), and every queue with live jobs, by name.
    pub queues: Vec<QueueView>,
}

/// Whether a queue starts jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    Running,
    /// Starts nothing new: submissions are accepted and wait; running jobs finish.
    Paused,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    pub name: String,
    pub state: QueueState,
    /// Since when it is paused (null while it runs).
    pub paused_at: Option<DateTime<Utc>>,
    /// Who paused it.
    pub paused_by: Option<String>,
    /// Jobs QUEUED.
    pub queued: i64,
    /// Jobs RUNNING.
    pub running: i64,
    /// When the longest-waiting QUEUED job became due (`run_after`, else its creation);
    /// null when none waits.
    pub oldest_due: Option<DateTime<Utc>>,
    /// How long that job has waited, in seconds (0 when none waits).
    pub oldest_wait_seconds: f64,
}

impl QueueView {
    fn of(name: String, figures: QueueFigures, pause: Option<&Pause>) -> Self {
        QueueView {
            name,
            state: if pause.is_some() { QueueState::Paused } else { QueueState::Running },
            paused_at: pause.map(|pause| pause.at),
            paused_by: pause.and_then(|pause| pause.by.clone()),
            queued: figures.queued,
            running: figures.running,
            oldest_due: figures.oldest_due,
            oldest_wait_seconds: figures
                .oldest_due
                .map_or(0.0, |due| (clock::now() - due).num_milliseconds().max(0) as f64 / 1000.0),
        }
    }
}

/// Every queue's view, paused ones included.
async fn views(state: &AppState, pauses: &QueuePauses) -> Result<Vec<QueueView>, ApiError> {
    let names: Vec<String> = pauses.names().iter().cloned().collect();
    let figures = state.store.queue_figures(&names, None).await?;
    let paused: BTreeMap<String, Pause> = pauses.all().await.map_err(StoreError::Database)?;
    Ok(figures.into_iter().map(|(name, figures)| QueueView::of(name.clone(), figures, paused.get(&name))).collect())
}

/// The job queues, across every room (admins).
#[utoipa::path(
    get, path = "/admin/queues", tag = "admin", operation_id = "list_queues",
    params(QueuesQuery),
    responses(
        (status = 200, description = "Every queue's state and figures", body = QueueList),
        (status = 400, description = "`invalid_query`: a parameter was given", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    pauses: web::Data<QueuePauses>,
    _query: web::Query<QueuesQuery>,
) -> Result<web::Json<QueueList>, ApiError> {
    Ok(web::Json(QueueList { queues: views(&state, &pauses).await? }))
}

/// A queue an admin may pause, by its name in the path; any other is `queue_not_found`.
fn known(pauses: &QueuePauses, name: &str) -> Result<String, ApiError> {
    if pauses.names().contains(name) {
        return Ok(name.to_owned());
    }
    let known: Vec<&str> = pauses.names().iter().map(String::as_str).collect();
    let shown: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    let detail = format!("no queue named {shown:?}; queues: {}", known.join(", "));
    Err(ApiError::new(Code::QueueNotFound, detail))
}

/// The queue's view after a pause or resume: 200 whether it changed or already was so.
async fn view_of(state: &AppState, pauses: &QueuePauses, name: &str) -> Result<web::Json<QueueView>, ApiError> {
    let views = views(state, pauses).await?;
    let view = views.into_iter().find(|view| view.name == name);
    view.map(web::Json).ok_or_else(|| ApiError::new(Code::QueueNotFound, format!("no queue named {name:?}")))
}

/// Pauses a queue (admins): no process starts a job of it from the moment this answers
/// (claims refuse them; consumers give back what they hold), its running jobs finish,
/// submissions are accepted and wait. The state is stored: it outlives every restart.
/// Pausing a paused queue changes nothing.
#[utoipa::path(
    post, path = "/admin/queues/{name}/pause", tag = "admin", operation_id = "pause_queue",
    params(("name" = String, Path, description = "A job queue, `@remote` or `@scripts`")),
    responses(
        (status = 200, description = "The queue, paused", body = QueueView),
        (status = 404, description = "`queue_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn pause(
    state: web::Data<AppState>,
    pauses: web::Data<QueuePauses>,
    caller: Caller,
    name: web::Path<String>,
) -> Result<web::Json<QueueView>, ApiError> {
    let name = known(&pauses, &name)?;
    pauses.pause(&name, &caller.identity().user).await.map_err(StoreError::Database)?;
    view_of(&state, &pauses, &name).await
}

/// Resumes a paused queue (admins): its waiting jobs are sent and start as before.
/// Resuming a running queue changes nothing.
#[utoipa::path(
    post, path = "/admin/queues/{name}/resume", tag = "admin", operation_id = "resume_queue",
    params(("name" = String, Path, description = "A job queue, `@remote` or `@scripts`")),
    responses(
        (status = 200, description = "The queue, running", body = QueueView),
        (status = 404, description = "`queue_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn resume(
    state: web::Data<AppState>,
    pauses: web::Data<QueuePauses>,
    name: web::Path<String>,
) -> Result<web::Json<QueueView>, ApiError> {
    let name = known(&pauses, &name)?;
    pauses.resume(&name).await.map_err(StoreError::Database)?;
    view_of(&state, &pauses, &name).await
}
