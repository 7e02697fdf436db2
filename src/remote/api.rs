//! The HTTP face of registered types and remote workers: `/types`, `/workers`, `/tasks`.

use std::collections::{HashMap, HashSet};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::names::TypeName;
use super::tasks::{self, HeldTask, Report, ReportError, Stop};
use super::types::{Registered, TypeError, TypeInfo};
use super::workers::{LiveWorker, WorkerError, WorkerInfo};
use super::Remote;
use crate::auth::Caller;
use crate::domain::{Job, RoomId};
use crate::http::{room_id, ApiError, AppState, Code, Problem};
use crate::store::{Requeue, StoreError};

/// Most types one worker serves.
const MAX_TYPES: usize = 100;
/// Most tasks one heartbeat names.
const MAX_HELD: usize = 1000;

impl From<TypeError> for ApiError {
    fn from(err: TypeError) -> Self {
        let code = match &err {
            TypeError::InvalidCategory(..) => Code::InvalidCategory,
            TypeError::InvalidSchema(_) => Code::InvalidSchema,
            TypeError::SchemaConflict(_) => Code::SchemaConflict,
            TypeError::NotFound(_) => Code::UnknownOperation,
            TypeError::Database(_) => return db(err),
        };
        ApiError::new(code, err.to_string())
    }
}

impl From<WorkerError> for ApiError {
    fn from(err: WorkerError) -> Self {
        let code = match &err {
            WorkerError::NotFound(_) => Code::WorkerNotFound,
            WorkerError::NotYours(_) => Code::WorkerForbidden,
            WorkerError::Gone(_) => Code::WorkerGone,
            WorkerError::Database(_) => return db(err),
        };
        ApiError::new(code, err.to_string())
    }
}

impl From<ReportError> for ApiError {
    fn from(err: ReportError) -> Self {
        match err {
            ReportError::NotFound(_) => ApiError::new(Code::TaskNotFound, err.to_string()),
            ReportError::NotYours(_) => ApiError::new(Code::TaskForbidden, err.to_string()),
            ReportError::Cancelled(_) => ApiError::new(Code::TaskCancelled, err.to_string()),
            ReportError::Stale { .. } => ApiError::new(Code::InvalidTransition, err.to_string()),
            ReportError::Invalid(pointer, detail) => ApiError::new(Code::InvalidRequest, detail).at(pointer),
            ReportError::Store(err) => err.into(),
        }
    }
}

fn db(err: impl std::fmt::Display) -> ApiError {
    let err = StoreError::Database(sea_orm::DbErr::Custom(err.to_string()));
    ApiError::from(err)
}

/// Query of `GET /types`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TypesQuery {
    /// Only this room's types; default: every room the caller can use, `@global` and the
    /// built-in operations (`@internal`).
    #[param(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TypeList {
    pub types: Vec<TypeInfo>,
}

/// Lists the active types the caller's rooms can use, `@global`'s, and the server's
/// built-in operations as `@internal` types.
#[utoipa::path(
    get, path = "/types", tag = "remote", operation_id = "list_types",
    params(TypesQuery),
    responses(
        (status = 200, description = "The types", body = TypeList),
        (status = 400, description = "`invalid_room_id`, `invalid_query`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_types(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    query: web::Query<TypesQuery>,
) -> Result<HttpResponse, ApiError> {
    let asked = query.into_inner().room.map(|room| room_id(&room)).transpose()?;
    let mut rooms: Option<Vec<String>> = match caller.is_admin() {
        true => None,
        false => {
            let granted = caller.identity().rooms.iter().map(|room| room.as_str().to_owned());
            Some(granted.chain([RoomId::GLOBAL.to_owned()]).collect())
        }
    };
    let mut internal = true;
    if let Some(room) = &asked {
        internal = room.as_str() == RoomId::INTERNAL;
        let visible = rooms.as_ref().is_none_or(|rooms| rooms.iter().any(|r| r == room.as_str()));
        rooms = Some(match visible {
            true => vec![room.as_str().to_owned()],
            false => Vec::new(),
        });
    }
    let mut types = match rooms.as_deref() {
        Some([]) => Vec::new(),
        rooms => remote.types.list(rooms).await.map_err(db)?,
    };
    if internal {
        types.extend(state.registry.names().map(|operation| TypeInfo {
            id: format!("{}:builtin:{operation}", RoomId::INTERNAL),
            room: RoomId::INTERNAL.to_owned(),
            category: "builtin".to_owned(),
            name: operation.to_owned(),
            schema: None,
            active: true,
            created_at: None,
            updated_at: None,
        }));
    }
    Ok(HttpResponse::Ok().json(TypeList { types }))
}

/// Body of `POST /types`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterType {
    /// Default: the caller's first room. `@global` for admins; never `@internal`.
    #[serde(default)]
    #[schema(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    /// One of the deployment's categories (`remote.categories`).
    #[schema(pattern = "^[A-Za-z0-9._-]{1,32}$")]
    pub category: String,
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub name: String,
    /// A JSON Schema (draft 2020-12) every payload of the type must pass: an object, or
    /// `true` / `false`.
    pub schema: Value,
}

/// Registers a type (201), repeats a registration with the same schema (200), or revives a
/// soft-deleted type with a new schema (201). Another schema for an active type is 409.
#[utoipa::path(
    post, path = "/types", tag = "remote", operation_id = "register_type",
    request_body = RegisterType,
    responses(
        (status = 201, description = "Registered (or revived)", body = TypeInfo),
        (status = 200, description = "Registered before with this very schema", body = TypeInfo),
        (status = 400, description = "`invalid_category`, `invalid_room_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`schema_conflict`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_type_name`, `invalid_schema`, `invalid_request`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn register_type(
    remote: web::Data<Remote>,
    caller: Caller,
    body: web::Json<RegisterType>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let room = match body.room.as_deref() {
        Some(room) => room_id(room).map_err(|err| err.at("/room"))?,
        None => caller.default_room(),
    };
    caller.may_serve(room.as_str()).map_err(|err| err.at("/room"))?;
    let name =
        TypeName::new(room, &body.category, &body.name).map_err(|err| ApiError::new(Code::InvalidTypeName, err))?;
    if let Some(at) = crate::domain::nul_pointer(&body.schema) {
        return Err(
            ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(format!("/schema{at}"))
        );
    }
    let (info, registered) = remote.types.register(&name, body.schema).await?;
    let mut response = match registered {
        Registered::Unchanged => HttpResponse::Ok(),
        Registered::Created | Registered::Revived => HttpResponse::Created(),
    };
    Ok(response.json(info))
}

/// Body of `POST /workers`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterWorker {
    /// A name for people (a host name); default: the token's user.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128)]
    pub name: Option<String>,
    /// The active types it serves, by full name (`room:category:name`), up to 100.
    #[serde(default)]
    #[schema(max_items = 100)]
    pub types: Vec<String>,
    /// The upload services whose `run.sh` jobs it runs (`POST /scripts/claim`), up to 100.
    /// A worker serves at least one type or service.
    #[serde(default)]
    #[schema(max_items = 100)]
    pub services: Vec<String>,
}

/// Registers a remote worker serving active types of rooms its token may serve. Its
/// heartbeats (`POST /workers/{id}/heartbeat`) keep it and its tasks' leases alive.
#[utoipa::path(
    post, path = "/workers", tag = "remote", operation_id = "register_worker",
    request_body = RegisterWorker,
    responses(
        (status = 201, description = "Registered", body = WorkerInfo),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`unknown_type`, `unknown_service`, `invalid_type_name`, `invalid_request`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn register_worker(
    remote: web::Data<Remote>,
    caller: Caller,
    body: web::Json<RegisterWorker>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let name = body.name.unwrap_or_else(|| caller.identity().user.clone());
    if name.is_empty() || name.chars().count() > 128 || name.chars().any(char::is_control) {
        return Err(
            ApiError::new(Code::InvalidRequest, "name must be 1-128 characters, no control character").at("/name")
        );
    }
    if body.types.len() > MAX_TYPES || body.services.len() > MAX_TYPES {
        let detail = format!("types and services may name {MAX_TYPES} each at most");
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/types"));
    }
    if body.types.is_empty() && body.services.is_empty() {
        return Err(ApiError::new(Code::InvalidRequest, "name at least one type or service").at("/types"));
    }
    let mut types: Vec<TypeName> = Vec::with_capacity(body.types.len());
    for (at, text) in body.types.iter().enumerate() {
        let pointer = format!("/types/{at}");
        let name =
            TypeName::parse(text).map_err(|err| ApiError::new(Code::InvalidTypeName, err).at(pointer.clone()))?;
        caller.may_serve(name.room.as_str()).map_err(|err| err.at(pointer.clone()))?;
        if !remote.types.is_active(&name).await.map_err(db)? {
            let detail = format!("no active type {name}: register it with POST /types first");
            return Err(ApiError::new(Code::UnknownType, detail).at(pointer));
        }
        if !types.contains(&name) {
            types.push(name);
        }
    }
    let mut served: Vec<String> = types.iter().map(TypeName::full).collect();
    for (at, service) in body.services.iter().enumerate() {
        if !remote.services.contains(service) {
            let detail = format!("no upload service {service:?} is configured here");
            return Err(ApiError::new(Code::UnknownService, detail).at(format!("/services/{at}")));
        }
        let name = format!("{}{service}", super::workers::SERVICE_PREFIX);
        if !served.contains(&name) {
            served.push(name);
        }
    }
    let (id, _) = remote.workers.register(caller.identity().token_id, &name, &served).await.map_err(db)?;
    let info = remote.workers.info(id, remote.lease).await.map_err(db)?;
    Ok(HttpResponse::Created().insert_header(("Location", format!("/workers/{id}"))).json(info))
}

/// The worker `id` as this caller may use it, renewed: a heartbeat's sign of life.
async fn live_worker(remote: &Remote, caller: &Caller, id: Uuid) -> Result<LiveWorker, ApiError> {
    Ok(remote.workers.renew(id, caller.identity().token_id).await?)
}

/// Body of `POST /workers/{id}/heartbeat`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The runs the worker is working on: their leases are renewed.
    #[serde(default)]
    #[schema(max_items = 1000)]
    pub tasks: Vec<HeldTask>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HeartbeatAnswer {
    pub worker: WorkerInfo,
    /// Runs to stop now: cancelled, or no longer this worker's.
    pub stop: Vec<Stop>,
}

/// A sign of life: renews the worker and the leases of the runs it names, and answers
/// which of them to stop (a cancel reaches the worker here). With `Prefer: wait=N` the
/// answer is held while there is nothing to stop, up to N seconds (within
/// `server.max_wait_seconds` and half the lease and the worker's deadline), and given as
/// soon as one of the runs is cancelled or taken away: a worker that beats again at once
/// hears of a cancel as it commits.
#[utoipa::path(
    post, path = "/workers/{id}/heartbeat", tag = "remote", operation_id = "worker_heartbeat",
    params(("id" = Uuid, Path, description = "The worker's id"),
        ("Prefer" = Option<String>, Header, description = "`wait=N`: hold the answer up to N seconds while there is nothing to stop")),
    request_body = Heartbeat,
    responses(
        (status = 200, description = "Alive", body = HeartbeatAnswer,
         headers(("Preference-Applied" = String, description = "`wait=N`, the wait applied, when one was asked"))),
        (status = 403, description = "`worker_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`: register again", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn heartbeat(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: web::Json<Heartbeat>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if body.tasks.len() > MAX_HELD {
        return Err(ApiError::new(Code::InvalidRequest, format!("at most {MAX_HELD} tasks")).at("/tasks"));
    }
    let worker = live_worker(&remote, &caller, *id).await?;
    let asked = crate::http::prefer_wait(req.headers());
    let wait = tasks::heartbeat_wait(&remote, asked, state.max_wait).unwrap_or_default();
    let (store, remote) = (state.store.as_ref(), &remote);
    let stop =
        tasks::renew_held(remote, store, store, &state.waiters, &worker, &body.tasks, wait, &state.closing).await?;
    let info = remote.workers.info(worker.id, remote.lease).await.map_err(db)?;
    let info = info.ok_or_else(|| ApiError::new(Code::WorkerNotFound, format!("no worker {id}")))?;
    let mut response = HttpResponse::Ok();
    if asked.is_some() {
        response.insert_header(("Preference-Applied", format!("wait={}", wait.as_secs())));
    }
    Ok(response.json(HeartbeatAnswer { worker: info, stop }))
}

/// The worker leaves: it is marked gone and the tasks it held go back to the queue at once
/// (`job.requeued_on_shutdown`), for another worker.
#[utoipa::path(
    delete, path = "/workers/{id}", tag = "remote", operation_id = "deregister_worker",
    params(("id" = Uuid, Path, description = "The worker's id")),
    responses(
        (status = 200, description = "Gone", body = WorkerInfo),
        (status = 403, description = "`worker_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`worker_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn deregister_worker(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    match remote.workers.check(*id, caller.identity().token_id).await {
        Ok(_) | Err(WorkerError::Gone(_)) => {}
        Err(WorkerError::NotYours(_)) if caller.is_admin() => {}
        Err(err) => return Err(err.into()),
    }
    remote.workers.leave(*id).await.map_err(db)?;
    let owner = super::workers::owner(*id);
    loop {
        let runs = state.store.runs_owned_by(&owner, 100).await?;
        for run in &runs {
            state.store.requeue(*run, &Requeue::Shutdown).await?;
        }
        if runs.len() < 100 {
            break;
        }
    }
    let info = remote.workers.info(*id, remote.lease).await.map_err(db)?;
    Ok(HttpResponse::Ok().json(info))
}

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
    for (at, report) in reports.iter().enumerate() {
        let Some(id) = report.id else {
            return Err(ApiError::new(Code::InvalidRequest, "a report names its task").at(format!("/reports/{at}/id")));
        };
        report.check().map_err(|err| ApiError::from(err).at(format!("/reports/{at}")))?;
        if !named.insert(id) {
            return Err(ApiError::new(Code::InvalidRequest, format!("task {id} is reported twice"))
                .at(format!("/reports/{at}/id")));
        }
    }
    let token = caller.identity().token_id;
    let (remote, store) = (&remote, state.store.as_ref());
    // The tasks read together; each report then judged and written on its own.
    let ids: Vec<Uuid> = named.into_iter().collect();
    let mut read: HashMap<Uuid, Job> = store.get_many(&ids).await?.into_iter().map(|job| (job.id, job)).collect();
    let reports = reports.into_iter().map(|report| {
        let job = report.id.and_then(|id| read.remove(&id));
        (report, job)
    });
    let applied = reports.enumerate().map(|(at, (report, job))| async move {
        let id = report.id.unwrap_or_default();
        let outcome = match remote.workers.check_lately(report.worker_id, token).await {
            Ok(worker) => {
                tasks::report_on(remote, store, store, &worker, id, job, report).await.map_err(ApiError::from)
            }
            Err(err) => Err(err.into()),
        };
        (id, outcome.map_err(|err| err.at(format!("/reports/{at}"))))
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
