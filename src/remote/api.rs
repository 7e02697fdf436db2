//! The HTTP face of registered types and remote workers: `/types` and `/workers` (the
//! tasks they claim and report are [`super::tasks_api`]).

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::names::TypeName;
use super::tasks::{self, HeldTask, ReportError, Stop};
use super::types::{Registered, TypeError, TypeInfo};
use super::workers::{LiveWorker, WorkerError, WorkerInfo};
use super::Remote;
use crate::auth::Caller;
use crate::domain::RoomId;
use crate::http::{room_id, ApiError, AppState, Code, Problem};
use crate::store::{Requeue, StoreError};

/// Most types one worker serves.
const MAX_TYPES: usize = 100;
/// Most tasks one heartbeat names.
const MAX_HELD: usize = 1000;

impl From<TypeError> for ApiError {
    fn from(err: TypeError) -> Self {
        let code = match err {
            TypeError::InvalidCategory(..) => Code::InvalidCategory,
            TypeError::InvalidSchema(_) => Code::InvalidSchema,
            TypeError::SchemaConflict(_) => Code::SchemaConflict,
            TypeError::NotFound(_) => Code::UnknownOperation,
            TypeError::Database(err) => return db(err),
        };
        ApiError::new(code, err.to_string())
    }
}

impl From<WorkerError> for ApiError {
    fn from(err: WorkerError) -> Self {
        let code = match err {
            WorkerError::NotFound(_) => Code::WorkerNotFound,
            WorkerError::NotYours(_) => Code::WorkerForbidden,
            WorkerError::Gone(_) => Code::WorkerGone,
            WorkerError::Database(err) => return db(err),
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

/// A failure of the worker book's database: 503 `store_unavailable` when it cannot be reached.
fn db(err: sea_orm::DbErr) -> ApiError {
    ApiError::from(StoreError::Database(err))
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
