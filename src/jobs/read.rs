//! Reading jobs: one (with `Prefer: wait`), a page of summaries, a job's children, its events.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::{Job, JobEvent, JobStatus, JobSummary};
use crate::http::{page_size, ApiError, AppState, Code, Problem};
use crate::store::{JobFilter, Links, Page};

/// A job, payload and result included. With `Prefer: wait=N` (RFC 7240), the answer waits
/// until the job has ended or N seconds (at most `server.max_wait_seconds`) have passed,
/// and says what it applied in `Preference-Applied`; waiting holds no database connection.
#[utoipa::path(
    get, path = "/jobs/{id}", tag = "jobs", operation_id = "get_job",
    params(
        ("id" = Uuid, Path, description = "The job's id"),
        ("Prefer" = Option<String>, Header, description = "`wait=N`: answer once the job has ended, or after N \
            seconds (capped by `server.max_wait_seconds`)"),
    ),
    responses(
        (status = 200, description = "The job", body = JobView,
         headers(("Preference-Applied" = String, description = "`wait=N`, the wait applied, when one was asked"))),
        (status = 404, description = "`job_not_found`: no such job in the caller's rooms", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let Some(wait) = crate::http::prefer_wait(req.headers()).map(|asked| asked.min(state.max_wait)) else {
        let job = find(&state, &caller, *id).await?;
        return Ok(HttpResponse::Ok().json(JobView::of(&state, job).await?));
    };
    let ended = || async { Ok::<_, ApiError>(state.store.has_ended(*id).await?) };
    let read = || find(&state, &caller, *id);
    let job = state.waiters.read_until_ended(*id, wait, &state.closing, read, ended).await?;
    let applied = format!("wait={}", wait.as_secs());
    Ok(HttpResponse::Ok().insert_header(("Preference-Applied", applied)).json(JobView::of(&state, job).await?))
}

/// A job as `GET /jobs/{id}` shows it: with its place in line while QUEUED.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub job: Job,
    /// While QUEUED: 1 for the next to run, else 1 + the runnable jobs ahead of it (of its
    /// registered type, or of its queue); `null` otherwise, and while the job waits for its
    /// time (`run_after` ahead: a `run_at`, a delay), when it is in no line yet.
    pub queue_position: Option<i64>,
}

impl JobView {
    async fn of(state: &AppState, job: Job) -> Result<JobView, ApiError> {
        let queue_position = state.store.queue_position(&job).await?;
        Ok(JobView { job, queue_position })
    }
}

/// A job the caller may see; another room's job is answered exactly as a missing one.
pub async fn find(state: &AppState, caller: &Caller, id: Uuid) -> Result<Job, ApiError> {
    let job = state.store.get(id).await?.filter(|job| caller.can_read(&job.room));
    job.ok_or_else(|| ApiError::new(Code::JobNotFound, format!("no job with id {id}")))
}

/// That job `id` exists in one of the caller's rooms (as [`find`] answers), read without its
/// row: its events, children and links need no more, and a coordinator's row holds megabytes.
pub async fn visible(state: &AppState, caller: &Caller, id: Uuid) -> Result<(), ApiError> {
    match state.store.head(id).await? {
        Some(head) if caller.can_read(&head.room) => Ok(()),
        _ => Err(ApiError::new(Code::JobNotFound, format!("no job with id {id}"))),
    }
}

/// Query of `GET /jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this room's jobs; default: every room the caller can see.
    #[param(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    pub status: Option<JobStatus>,
    #[param(pattern = r"^[^\u0000]*$")]
    pub operation: Option<String>,
    #[param(pattern = r"^[^\u0000]*$")]
    pub queue: Option<String>,
    pub parent_job_id: Option<Uuid>,
    /// Jobs per page (at most `server.max_page_size`); default 50.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// A page of job summaries (`GET /jobs/{id}` has a job's payload and result).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobSummary>,
    pub next_cursor: Option<Uuid>,
}

/// Most bytes of summaries in one page; a page that would pass it ends early, with a
/// cursor to the rest.
const PAGE_BYTES: usize = 1024 * 1024;

impl JobPage {
    /// The store's page, cut at [`PAGE_BYTES`] of JSON.
    fn within_budget(page: Page) -> JobPage {
        let mut bytes = 0;
        let fits = page.jobs.iter().position(|job| {
            bytes += serde_json::to_vec(job).map_or(PAGE_BYTES, |json| json.len() + 1);
            bytes > PAGE_BYTES
        });
        match fits {
            // Always at least one job, so paging moves on.
            Some(cut) => {
                let mut jobs = page.jobs;
                jobs.truncate(cut.max(1));
                let next_cursor = jobs.last().map(|job| job.id);
                JobPage { jobs, next_cursor }
            }
            None => JobPage { jobs: page.jobs, next_cursor: page.next_cursor },
        }
    }
}

/// Job summaries, newest first.
#[utoipa::path(
    get, path = "/jobs", tag = "jobs", operation_id = "list_jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of summaries", body = JobPage),
        (status = 403, description = "`room_forbidden`: the token has no grant for `room`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<ListQuery>,
) -> Result<web::Json<JobPage>, ApiError> {
    let query = query.into_inner();
    let rooms = match query.room.as_deref() {
        Some(room) => {
            let room = crate::http::room_id(room)?;
            if !caller.can_read(room.as_str()) {
                return Err(ApiError::new(Code::RoomForbidden, format!("this token cannot see room {room:?}")));
            }
            Some(vec![room.into()])
        }
        None => caller.visible_rooms(),
    };
    for (name, value) in [("operation", &query.operation), ("queue", &query.queue)] {
        if value.as_deref().is_some_and(|value| value.contains('\0')) {
            return Err(ApiError::new(Code::InvalidQuery, format!("{name} holds a NUL character, which no job has")));
        }
    }
    let filter = JobFilter {
        rooms,
        status: query.status,
        operation: query.operation,
        queue: query.queue,
        parent_job_id: query.parent_job_id,
        before: query.cursor,
        limit: page_size(query.limit, state.max_page_size)?,
        ..Default::default()
    };
    Ok(web::Json(JobPage::within_budget(state.store.list(&filter).await?)))
}

/// Query of `GET /jobs/{id}/children`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChildrenQuery {
    pub status: Option<JobStatus>,
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u64>,
    pub cursor: Option<Uuid>,
}

/// A job's children (jobs submitted with its id as `parent_job_id`), newest first.
#[utoipa::path(
    get, path = "/jobs/{id}/children", tag = "jobs", operation_id = "list_children",
    params(("id" = Uuid, Path, description = "The parent's id"), ChildrenQuery),
    responses(
        (status = 200, description = "A page of summaries", body = JobPage),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn children(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
    query: web::Query<ChildrenQuery>,
) -> Result<web::Json<JobPage>, ApiError> {
    visible(&state, &caller, *id).await?;
    let query = query.into_inner();
    let filter = JobFilter {
        // Children are in their parent's room; the filter keeps it so whatever happens.
        rooms: caller.visible_rooms(),
        status: query.status,
        parent_job_id: Some(*id),
        before: query.cursor,
        limit: page_size(query.limit, state.max_page_size)?,
        ..Default::default()
    };
    Ok(web::Json(JobPage::within_budget(state.store.list(&filter).await?)))
}

/// The jobs a job waits for (`depends_on`) and the jobs that wait for it, oldest first.
#[utoipa::path(
    get, path = "/jobs/{id}/dependencies", tag = "jobs", operation_id = "list_dependencies",
    params(("id" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Its dependencies and dependents", body = Links),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn dependencies(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<Links>, ApiError> {
    // Both ends of an edge are in one room: the job's, which the caller may read.
    visible(&state, &caller, *id).await?;
    Ok(web::Json(state.store.links(*id).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger id (the `next_after` of the previous call).
    pub after: Option<i64>,
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventPage {
    pub events: Vec<JobEvent>,
    /// Pass as `after` to read on; unchanged when there is nothing new.
    pub next_after: Option<i64>,
}

/// A job's event log, in order.
#[utoipa::path(
    get, path = "/jobs/{id}/events", tag = "jobs", operation_id = "list_events",
    params(("id" = Uuid, Path, description = "The job's id"), EventsQuery),
    responses(
        (status = 200, description = "Events after `after`", body = EventPage),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn events(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
    query: web::Query<EventsQuery>,
) -> Result<web::Json<EventPage>, ApiError> {
    visible(&state, &caller, *id).await?;
    let limit = page_size(query.limit, state.max_page_size)?;
    let events = state.store.events(*id, query.after, limit).await?;
    let next_after = events.last().map(|event| event.id).or(query.after);
    Ok(web::Json(EventPage { events, next_after }))
}
