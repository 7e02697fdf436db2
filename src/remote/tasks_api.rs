//! The HTTP face of remote workers' tasks: `POST /tasks/claim` (up to `max_tasks` in one
//! commit), `GET /tasks/{id}` (with `Prefer: wait`), `PATCH /tasks/{id}` and
//! `POST /tasks:report` (many reports in one request).

use std::collections::{HashMap, HashSet};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::tasks::{self, Report};
use super::Remote;
use crate::auth::Caller;
use crate::domain::{Job, QueueName};
use crate::http::{ApiError, AppState, Code, Problem};

/// Most tasks one claim may hand out.
pub const MAX_CLAIM: usize = 100;

/// Body of `POST /tasks/claim`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    pub worker_id: Uuid,
    /// How many tasks to take at most (1 to 100, default 1), in one commit: the answer's
    /// `tasks` holds 1 to this many, or none when none came within the wait.
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 1, maximum = 100)]
    pub max_tasks: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClaimAnswer {
    /// The first claimed task (RUNNING, leased to the worker; report with its `attempts`),
    /// or `null` when none came within the wait.
    pub task: Option<Job>,
    /// Every claimed task, oldest of the highest priority first (the first is `task`).
    pub tasks: Vec<Job>,
}

/// Claims the oldest runnable tasks of the worker's types, up to `max_tasks`, in one
/// commit (a compare-and-set each: concurrent claimers never get the same one). With
/// `Prefer: wait=N` the request is held until a task arrives or N seconds pass (capped by
/// `server.max_wait_seconds` and the worker's deadline less a second), woken by the
/// submission itself; it answers with what is claimable then, without waiting to fill.
#[utoipa::path(
    post, path = "/tasks/claim", tag = "remote", operation_id = "claim_task",
    request_body = ClaimRequest,
    params(("Prefer" = Option<String>, Header, description = "`wait=N`: hold the request up to N seconds for a task")),
    responses(
        (status = 200, description = "Tasks, or none", body = ClaimAnswer,
         headers(("Preference-Applied" = String, description = "`wait=N`, the wait applied, when one was asked"))),
        (status = 403, description = "`worker_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`: register again", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn claim(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<ClaimRequest>,
) -> Result<HttpResponse, ApiError> {
    let most = body.max_tasks.unwrap_or(1) as usize;
    if !(1..=MAX_CLAIM).contains(&most) {
        return Err(ApiError::new(Code::InvalidRequest, format!("1 to {MAX_CLAIM} tasks")).at("/max_tasks"));
    }
    // A claim renews the worker too, unless this process did lately.
    let worker = remote.workers.renew_lately(body.worker_id, caller.identity().token_id).await?;
    let asked = crate::http::prefer_wait(req.headers());
    let wait = tasks::claim_wait(&remote, asked, state.max_wait).unwrap_or_default();
    let token = caller.identity().token_id;
    let tasks = tasks::claim(&remote, state.store.as_ref(), &worker, token, wait, most, &state.closing).await?;
    let mut response = HttpResponse::Ok();
    if asked.is_some() {
        response.insert_header(("Preference-Applied", format!("wait={}", wait.as_secs())));
    }
    Ok(response.json(ClaimAnswer { task: tasks.first().cloned(), tasks }))
}

/// A task (a job of a registered type, or an uploaded script), for a worker or a client of
/// its room. With `Prefer: wait=N` the answer waits until the task has ended or N seconds
/// (at most `server.max_wait_seconds`) have passed, as `GET /jobs/{id}` does; waiting holds
/// no database connection. A job of another queue, or of a room the caller cannot read, is
/// answered as a missing task.
#[utoipa::path(
    get, path = "/tasks/{id}", tag = "remote", operation_id = "get_task",
    params(
        ("id" = Uuid, Path, description = "The task's (job's) id"),
        ("Prefer" = Option<String>, Header, description = "`wait=N`: answer once the task has ended, or after N \
            seconds (capped by `server.max_wait_seconds`)"),
    ),
    responses(
        (status = 200, description = "The task", body = Job,
         headers(("Preference-Applied" = String, description = "`wait=N`, the wait applied, when one was asked"))),
        (status = 404, description = "`task_not_found`: no such task in the caller's rooms", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let id = *id;
    let Some(wait) = crate::http::prefer_wait(req.headers()).map(|asked| asked.min(state.max_wait)) else {
        return Ok(HttpResponse::Ok().json(find_task(&state, &caller, id).await?));
    };
    let ended = || async { Ok::<_, ApiError>(state.store.has_ended(id).await?) };
    let read = || find_task(&state, &caller, id);
    let task = state.waiters.read_until_ended(id, wait, &state.closing, read, ended).await?;
    let applied = format!("wait={}", wait.as_secs());
    Ok(HttpResponse::Ok().insert_header(("Preference-Applied", applied)).json(task))
}

/// A task the caller may see: a job of a pulled queue in one of its rooms.
async fn find_task(state: &AppState, caller: &Caller, id: Uuid) -> Result<Job, ApiError> {
    let task = state.store.get(id).await?;
    let visible = task.filter(|job| caller.can_read_tasks(&job.room) && QueueName::pulled(job.queue.as_str()));
    visible.ok_or_else(|| ApiError::new(Code::TaskNotFound, format!("no task with id {id}")))
}

/// Reports on a claimed task, by the claiming worker and run only: progress (`running`),
/// or the outcome. A failure is retried by the task's retry policy like any job's.
#[utoipa::path(
    patch, path = "/tasks/{id}", tag = "remote", operation_id = "report_task",
    params(("id" = Uuid, Path, description = "The task's (job's) id")),
    request_body = Report,
    responses(
        (status = 200, description = "Applied: the task as it now is", body = Job),
        (status = 403, description = "`task_forbidden`, `worker_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`task_not_found`, `worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`task_cancelled`: stop; `invalid_transition`: the run is over", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn report(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    id: web::Path<Uuid>,
    body: web::Json<Report>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    body.check()?;
    if body.id.is_some_and(|named| named != *id) {
        return Err(ApiError::new(Code::InvalidRequest, "names another task than the path's").at("/id"));
    }
    let worker = remote.workers.check_lately(body.worker_id, caller.identity().token_id).await?;
    let job = tasks::report(&remote, state.store.as_ref(), state.store.as_ref(), &worker, *id, body).await?;
    Ok(HttpResponse::Ok().json(job))
}

/// Most reports in one `POST /tasks:report`.
pub const MAX_REPORTS: usize = 1000;

/// Body of `POST /tasks:report`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reports {
    /// 1 to 1,000 reports, each naming its task (`id`) and worker; one report per task.
    #[schema(min_items = 1, max_items = 1000)]
    pub reports: Vec<Report>,
}

/// What became of one report of a `POST /tasks:report`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReportResult {
    pub id: Uuid,
    /// The status `PATCH /tasks/{id}` would have answered with.
    pub status: u16,
    /// Applied: the task as it now is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Job>,
    /// Not applied, and why (the problem `PATCH /tasks/{id}` would have answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Problem>)]
    pub problem: Option<Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReportResults {
    /// One per report, in the request's order.
    pub results: Vec<ReportResult>,
}

/// Reports on several claimed tasks in one request, each as `PATCH /tasks/{id}` would
/// (the claiming worker and run only), their writes sharing commits. Each report is
/// applied or refused on its own: the answer says which, in order, with the problem of each
/// refused one. A request that is malformed as a whole (no reports, too many, one without
/// its `id` or out of its schema's bounds, a task named twice) is refused whole and nothing
/// is applied.
#[utoipa::path(
    post, path = "/tasks:report", tag = "remote", operation_id = "report_tasks",
    request_body = Reports,
    responses(
        (status = 200, description = "Each report applied or refused", body = ReportResults),
        (status = 422, description = "`invalid_request`: nothing applied", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn report_many(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    body: web::Json<Reports>,
) -> Result<HttpResponse, ApiError> {
    let reports = body.into_inner().reports;
    if reports.is_empty() || reports.len() > MAX_REPORTS {
        return Err(ApiError::new(Code::InvalidRequest, format!("1 to {MAX_REPORTS} reports")).at("/reports"));
    }
    let mut named = HashSet::with_capacity(reports.len());
    let mut tasks = Vec::with_capacity(reports.len());
    for (at, report) in reports.into_iter().enumerate() {
        let Some(id) = report.id else {
            return Err(ApiError::new(Code::InvalidRequest, "a report names its task").at(format!("/reports/{at}/id")));
        };
        report.check().map_err(|err| ApiError::from(err).at(format!("/reports/{at}")))?;
        if !named.insert(id) {
            return Err(ApiError::new(Code::InvalidRequest, format!("task {id} is reported twice"))
                .at(format!("/reports/{at}/id")));
        }
        tasks.push((id, report));
    }
    let token = caller.identity().token_id;
    let (remote, store) = (&remote, state.store.as_ref());
    // The tasks read together; each report then judged and written on its own.
    let ids: Vec<Uuid> = tasks.iter().map(|(id, _)| *id).collect();
    let mut read: HashMap<Uuid, Job> = store.get_many(&ids).await?.into_iter().map(|job| (job.id, job)).collect();
    let applied = tasks.into_iter().enumerate().map(|(at, (id, report))| {
        let job = read.remove(&id);
        async move {
            let outcome = match remote.workers.check_lately(report.worker_id, token).await {
                Ok(worker) => {
                    tasks::report_on(remote, store, store, &worker, id, job, report).await.map_err(ApiError::from)
                }
                Err(err) => Err(err.into()),
            };
            (id, outcome.map_err(|err| err.at(format!("/reports/{at}"))))
        }
    });
    let results = futures_util::future::join_all(applied).await.into_iter().map(|(id, outcome)| match outcome {
        Ok(job) => ReportResult { id, status: 200, task: Some(job), problem: None },
        Err(err) => ReportResult {
            id,
            status: err.code.status().as_u16(),
            task: None,
            problem: serde_json::to_value(err.problem()).ok(),
        },
    });
    let results = results.collect();
    Ok(HttpResponse::Ok().json(ReportResults { results }))
}
