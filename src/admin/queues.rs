//! `GET /admin/queues`: every job queue with its waiting and running jobs and its longest
//! wait, read over the status index (the figures the dashboard and `/metrics` show).

use actix_web::web;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::http::{ApiError, AppState, Problem};
use crate::store::clock;

/// Takes no parameter; any is refused (`invalid_query`).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueuesQuery {}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueList {
    /// Every configured job queue (at 0 when empty) and every queue with live jobs, by name.
    pub queues: Vec<QueueView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    pub name: String,
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

/// The job queues, across every room (admins).
#[utoipa::path(
    get, path = "/admin/queues", tag = "admin", operation_id = "list_queues",
    params(QueuesQuery),
    responses(
        (status = 200, description = "Every queue's figures", body = QueueList),
        (status = 400, description = "`invalid_query`: a parameter was given", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    _query: web::Query<QueuesQuery>,
) -> Result<web::Json<QueueList>, ApiError> {
    let names: Vec<String> = state.job_queues.iter().cloned().collect();
    let figures = state.store.queue_figures(&names, None).await?;
    let now = clock::now();
    let queues = figures
        .into_iter()
        .map(|(name, figures)| QueueView {
            name,
            queued: figures.queued,
            running: figures.running,
            oldest_due: figures.oldest_due,
            oldest_wait_seconds: figures
                .oldest_due
                .map_or(0.0, |due| (now - due).num_milliseconds().max(0) as f64 / 1000.0),
        })
        .collect();
    Ok(web::Json(QueueList { queues }))
}
