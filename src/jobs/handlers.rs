//! The job endpoints: submit, read, list, cancel, retry, events.

use std::collections::{BTreeSet, HashMap};

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::{nul_pointer, Job, JobEvent, JobStatus, JobSummary, NewJob, QueueName, RetryPolicy, RoomId};
use crate::http::{page_size, ApiError, AppState, Code, Problem};
use crate::ops::OperationRegistry;
use crate::remote::names::{is_type_reference, TypeReference};
use crate::remote::Remote;
use crate::store::{JobFilter, Page, StoreError};

/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;
const MAX_RETRIES_LIMIT: i32 = 100;
/// Most submissions in one `POST /jobs:batch`.
pub const MAX_BATCH: usize = 1000;

/// Body of `POST /jobs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"operation": "sleep", "payload": {"seconds": 2, "steps": 4}}))]
pub struct SubmitRequest {
    /// A built-in operation (the contract served lists this server's), or a registered
    /// type: `category:name` (the job's room, then `@global`) or `room:category:name`. An
    /// unknown one is 422 `unknown_operation`.
    #[schema(pattern = r"^[^\u0000]*$")]
    pub operation: String,
    /// The room the job belongs to; default: the caller's first room (a child: its
    /// parent's, and no other). `@global` (admins) or 1-64 characters without `@`, `:` or
    /// control characters.
    #[serde(default)]
    #[schema(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    /// A `jobs` queue of this deployment (the contract served lists them); default
    /// `default`.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub queue: Option<String>,
    /// The operation's input; default `{}`.
    #[serde(default)]
    pub payload: Option<Value>,
    /// The same key (in the same room) returns the same job instead of creating another.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255, pattern = r"^[^\u0000]*$")]
    pub idempotency_key: Option<String>,
    /// Retries after a failure; default: the operation's.
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 0, maximum = 100)]
    pub max_retries: Option<i32>,
    /// Backoff and error classes for those retries; default: the operation's.
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    #[serde(default)]
    pub parent_job_id: Option<Uuid>,
    /// For a registered type no live worker serves: queue the job until one comes (true)
    /// or refuse it with 409 `no_worker` (false); default: `remote.queue_without_worker`.
    #[serde(default)]
    pub wait_for_worker: Option<bool>,
}

/// Submits a job.
#[utoipa::path(
    post, path = "/jobs", tag = "jobs", operation_id = "submit_job",
    request_body = SubmitRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Same as `idempotency_key` in the body",
        pattern = r"^[\t -~]{1,255}$")),
    responses(
        (status = 201, description = "Created", body = Job,
         headers(("Location" = String, description = "The job's URL"))),
        (status = 200, description = "An earlier submission with the same idempotency key made this job", body = Job,
         headers(("Location" = String, description = "The job's URL"))),
        (status = 403, description = "`room_forbidden`, `read_only_token`, `forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency_conflict`, `parent_is_coordinator`, `no_worker`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`, `unknown_operation`, `invalid_payload`, `operation_unavailable`, \
            `unknown_queue`, `invalid_queue`, `parent_not_found`, `room_mismatch`, `nul_character`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<SubmitRequest>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency_header(&req)?;
    let body = body.into_inner();
    let parent = check_parent(&state, &caller, body.parent_job_id).await?;
    let asked_room = body.room.is_some();
    let wait_for_worker = body.wait_for_worker;
    let mut new = validate_submission(&state.submissions(), body, header_key, &caller.default_room())?;
    place(&caller, &mut new, asked_room, parent.as_ref())?;
    admit_type(&remote, &mut new, wait_for_worker).await?;
    let submission = state.dispatcher.submit(new).await?;
    let location = format!("/jobs/{}", submission.job.id);
    let mut response = match submission.created {
        true => HttpResponse::Created(),
        false => HttpResponse::Ok(),
    };
    Ok(response.insert_header((header::LOCATION, location)).json(submission.job))
}

/// Body of `POST /jobs:batch`; each item is read on its own, so a bad one is named.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1-1000 submissions of the `POST /jobs` shape.
    #[schema(value_type = Vec<SubmitRequest>, min_items = 1, max_items = 1000)]
    pub jobs: Vec<Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchItem {
    /// False when an earlier submission with the same key made the job.
    pub created: bool,
    #[serde(flatten)]
    pub job: Job,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchResponse {
    pub jobs: Vec<BatchItem>,
}

/// Submits up to [`MAX_BATCH`] jobs in one transaction: all are accepted or none is. An
/// invalid item is a problem whose `pointer` names it (`/jobs/3`). 201 when any job was
/// created, 200 when every one was an idempotent repeat.
#[utoipa::path(
    post, path = "/jobs:batch", tag = "jobs", operation_id = "submit_jobs",
    request_body = BatchRequest,
    responses(
        (status = 201, description = "At least one job was created", body = BatchResponse),
        (status = 200, description = "Every submission was an idempotent repeat", body = BatchResponse),
        (status = 403, description = "`room_forbidden`, `read_only_token`, `forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency_conflict`, `parent_is_coordinator`, `no_worker`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An item is invalid: its problem, with a `pointer` such as `/jobs/3`; \
            `invalid_request` for an `Idempotency-Key` header", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit_batch(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<BatchRequest>,
) -> Result<HttpResponse, ApiError> {
    if req.headers().contains_key("Idempotency-Key") {
        let detail = "a batch takes no Idempotency-Key header: give each job its idempotency_key";
        return Err(ApiError::new(Code::InvalidRequest, detail));
    }
    let items = body.into_inner().jobs;
    if items.is_empty() || items.len() > MAX_BATCH {
        let detail = format!("jobs must hold 1-{MAX_BATCH} submissions, not {}", items.len());
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/jobs"));
    }
    let mut parents: HashMap<Uuid, Job> = HashMap::new();
    let default_room = caller.default_room();
    let mut jobs = Vec::with_capacity(items.len());
    for (at, item) in items.into_iter().enumerate() {
        let validated = async {
            let request: SubmitRequest =
                serde_json::from_value(item).map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()))?;
            if let Some(id) = request.parent_job_id.filter(|id| !parents.contains_key(id)) {
                parents.extend(check_parent(&state, &caller, Some(id)).await?.map(|parent| (id, parent)));
            }
            let parent = request.parent_job_id.and_then(|id| parents.get(&id));
            let asked_room = request.room.is_some();
            let wait_for_worker = request.wait_for_worker;
            let mut new = validate_submission(&state.submissions(), request, None, &default_room)?;
            place(&caller, &mut new, asked_room, parent)?;
            admit_type(&remote, &mut new, wait_for_worker).await?;
            Ok::<_, ApiError>(new)
        };
        jobs.push(validated.await.map_err(|err| err.at(format!("/jobs/{at}")))?);
    }
    let keys: Vec<Option<String>> = jobs.iter().map(|job| job.idempotency_key.clone()).collect();
    let submissions = state.dispatcher.submit_many(jobs).await.map_err(|err| match err {
        StoreError::IdempotencyConflict(key) => {
            let at = keys.iter().position(|item| item.as_deref() == Some(key.as_str())).unwrap_or_default();
            ApiError::from(StoreError::IdempotencyConflict(key)).at(format!("/jobs/{at}/idempotency_key"))
        }
        err => ApiError::from(err),
    })?;
    let mut response = match submissions.iter().any(|submission| submission.created) {
        true => HttpResponse::Created(),
        false => HttpResponse::Ok(),
    };
    let jobs = submissions.into_iter().map(|submission| BatchItem { created: submission.created, job: submission.job });
    Ok(response.json(BatchResponse { jobs: jobs.collect() }))
}

/// A parent must exist for the caller (another room's job does not), and must not be a
/// coordinator: its count is of the batches or children it makes itself, from its
/// submission on (a `group` still QUEUED included).
async fn check_parent(state: &AppState, caller: &Caller, parent: Option<Uuid>) -> Result<Option<Job>, ApiError> {
    let Some(parent) = parent else { return Ok(None) };
    match state.store.get(parent).await?.filter(|job| caller.can_read(&job.room)) {
        None => Err(ApiError::new(Code::ParentNotFound, format!("no job with id {parent}")).at("/parent_job_id")),
        Some(job) if job.fan_out.is_some() || state.registry.is_coordinator(&job.operation) => {
            let detail = format!("job {parent} is a {} coordinator; it counts only the work it makes", job.operation);
            Err(ApiError::new(Code::ParentIsCoordinator, detail).at("/parent_job_id"))
        }
        Some(job) => Ok(Some(job)),
    }
}

/// Puts a submission in its room: a child in its parent's (naming another is refused), any
/// other job where it asked or in the caller's default room; the caller must be allowed to
/// write there.
fn place(caller: &Caller, new: &mut NewJob, asked_room: bool, parent: Option<&Job>) -> Result<(), ApiError> {
    if let Some(parent) = parent {
        if asked_room && new.room.as_str() != parent.room {
            let detail = format!("a child belongs to its parent's room {:?}, not {:?}", parent.room, new.room.as_str());
            return Err(ApiError::new(Code::RoomMismatch, detail).at("/room"));
        }
        new.room = RoomId::parse(&parent.room).map_err(|err| ApiError::new(Code::Internal, err))?;
    }
    new.submitted_by = Some(caller.identity().user.clone());
    caller.may_write(new.room.as_str()).map_err(|err| err.at("/room"))
}

/// A submission naming a registered type (`category:name` or `room:category:name`): the
/// type must be active in the job's room or `@global`, the payload must pass its schema, and
/// unless the submission may wait, a live worker must serve it.
async fn admit_type(remote: &Remote, new: &mut NewJob, wait_for_worker: Option<bool>) -> Result<(), ApiError> {
    if !new.queue.is_remote() {
        return Ok(());
    }
    let reference = TypeReference::parse(&new.operation)
        .map_err(|err| ApiError::new(Code::UnknownOperation, err).at("/operation"))?;
    let resolved =
        remote.types.resolve(&new.room, &reference).await.map_err(|err| ApiError::from(err).at("/operation"))?;
    let violations = crate::remote::schema::violations(&resolved.validator, &new.payload);
    if let Some(first) = violations.first() {
        let listed: Vec<String> =
            violations.iter().map(|violation| format!("{:?}: {}", violation.pointer, violation.message)).collect();
        let detail = format!("the payload fails the schema of {}: {}", resolved.name, listed.join("; "));
        return Err(ApiError::new(Code::InvalidPayload, detail).at(format!("/payload{}", first.pointer)));
    }
    new.operation = resolved.name.full();
    let may_wait = wait_for_worker.unwrap_or(remote.queue_without_worker);
    let serving = remote.workers.serving(&new.operation).await.map_err(StoreError::Database)?;
    if !may_wait && !serving {
        let detail = format!(
            "no live worker serves {}; submit with \"wait_for_worker\": true to queue it until one registers",
            resolved.name
        );
        return Err(ApiError::new(Code::NoWorker, detail).at("/operation"));
    }
    Ok(())
}

/// Refuses a NUL character anywhere in a submission, naming where: PostgreSQL cannot
/// store one, and both backends answer alike.
fn refuse_nul(body: &SubmitRequest, header_key: Option<&str>) -> Result<(), ApiError> {
    let nul = |pointer: &str| {
        Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(pointer))
    };
    let texts = [
        ("/operation", Some(body.operation.as_str())),
        ("/queue", body.queue.as_deref()),
        ("/room", body.room.as_deref()),
    ];
    let keys = [("/idempotency_key", body.idempotency_key.as_deref()), ("/idempotency_key", header_key)];
    for (pointer, text) in texts.into_iter().chain(keys) {
        if text.is_some_and(|text| text.contains('\0')) {
            return nul(pointer);
        }
    }
    if let Some(inner) = body.payload.as_ref().and_then(nul_pointer) {
        return nul(&format!("/payload{inner}"));
    }
    let classes = body.retry.iter().flat_map(|policy| {
        let retry_on = policy.retry_on.iter().enumerate().map(|(at, class)| (format!("/retry/retry_on/{at}"), class));
        let no_retry_on =
            policy.no_retry_on.iter().enumerate().map(|(at, class)| (format!("/retry/no_retry_on/{at}"), class));
        retry_on.chain(no_retry_on)
    });
    for (pointer, class) in classes {
        if class.contains('\0') {
            return nul(&pointer);
        }
    }
    Ok(())
}

/// A job queue this deployment consumes (`[queues.NAME]` with `kind = "jobs"`): a job sent
/// anywhere else would never be claimed.
fn known_job_queue(rules: &Submissions, name: Option<&str>) -> Result<QueueName, ApiError> {
    let queue = match name {
        Some(name) => QueueName::parse(name).map_err(|err| ApiError::new(Code::InvalidQueue, err))?,
        None => QueueName::default(),
    };
    if !rules.job_queues.contains(queue.as_str()) {
        let known: Vec<&str> = rules.job_queues.iter().map(String::as_str).collect();
        let detail = format!("no job queue named {:?}; job queues: {}", queue.as_str(), known.join(", "));
        return Err(ApiError::new(Code::UnknownQueue, detail));
    }
    Ok(queue)
}

/// What a submission is checked against: the operations, and the job queues.
pub struct Submissions<'a> {
    pub registry: &'a OperationRegistry,
    pub job_queues: &'a BTreeSet<String>,
}

impl AppState {
    fn submissions(&self) -> Submissions<'_> {
        Submissions { registry: &self.registry, job_queues: &self.job_queues }
    }
}

/// A `POST /jobs` body read and checked as the API does (the fuzz targets call this).
pub fn parse_submission(rules: &Submissions, body: &[u8]) -> Result<NewJob, ApiError> {
    let request: SubmitRequest =
        serde_json::from_slice(body).map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()))?;
    validate_submission(rules, request, None, &RoomId::default())
}

fn validate_submission(
    state: &Submissions,
    body: SubmitRequest,
    header_key: Option<String>,
    default_room: &RoomId,
) -> Result<NewJob, ApiError> {
    refuse_nul(&body, header_key.as_deref())?;
    let room = match body.room.as_deref() {
        Some(room) => crate::http::room_id(room).map_err(|err| err.at("/room"))?,
        None => default_room.clone(),
    };
    let payload = body.payload.unwrap_or_else(|| Value::Object(Default::default()));
    // A registered type's payload is checked against its schema once its room is known.
    let registered = is_type_reference(&body.operation);
    let (default_retries, default_policy) = match registered {
        true => (0, RetryPolicy::default()),
        false => {
            state.registry.validate(&body.operation, &payload)?;
            for (at, nested) in state.registry.nested(&body.operation, &payload).into_iter().enumerate() {
                known_job_queue(state, nested.queue.as_deref())
                    .map_err(|err| err.at(format!("/payload/jobs/{at}/queue")))?;
            }
            state.registry.retry_defaults(&body.operation)
        }
    };
    let retry_policy = body.retry.unwrap_or(default_policy);
    retry_policy.validate().map_err(|err| ApiError::new(Code::InvalidRequest, err).at("/retry"))?;
    let queue = match (registered, body.queue.as_deref()) {
        (true, None) => QueueName::remote(),
        (true, Some(_)) => {
            let detail = "a registered type's jobs are claimed by its remote workers, not from a queue: omit queue";
            return Err(ApiError::new(Code::InvalidQueue, detail).at("/queue"));
        }
        (false, name) => known_job_queue(state, name).map_err(|err| err.at("/queue"))?,
    };
    let idempotency_key = check_idempotency_key(body.idempotency_key.or(header_key))?;
    let max_retries = body.max_retries.unwrap_or(default_retries);
    if !(0..=MAX_RETRIES_LIMIT).contains(&max_retries) {
        let detail = format!("max_retries must be between 0 and {MAX_RETRIES_LIMIT}");
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/max_retries"));
    }
    Ok(NewJob {
        room,
        operation: body.operation,
        queue,
        payload,
        parent_job_id: body.parent_job_id,
        max_retries,
        retry_policy,
        idempotency_key,
        announced: false,
        id: None,
        submitted_by: None,
        service: None,
    })
}

/// The `Idempotency-Key` header, if sent.
pub fn idempotency_header(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    req.headers()
        .get("Idempotency-Key")
        .map(|value| value.to_str().map(str::to_owned))
        .transpose()
        .map_err(|_| ApiError::new(Code::InvalidRequest, "Idempotency-Key must be visible ASCII"))
}

/// An idempotency key of 1-255 characters (as the `varchar(255)` column counts them).
pub fn check_idempotency_key(key: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(key) = &key {
        if key.is_empty() || key.chars().count() > MAX_IDEMPOTENCY_KEY {
            let detail = format!("idempotency_key must be 1-{MAX_IDEMPOTENCY_KEY} characters");
            return Err(ApiError::new(Code::InvalidRequest, detail).at("/idempotency_key"));
        }
    }
    Ok(key)
}

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
    // Watching starts before the first read, so an ending between the two is not missed.
    let mut watch = state.waiters.watch(*id);
    let deadline = tokio::time::Instant::now() + wait;
    let mut job = find(&state, &caller, *id).await?;
    while !job.status.is_terminal() {
        tokio::select! {
            () = watch.changed() => job = find(&state, &caller, *id).await?,
            () = tokio::time::sleep_until(deadline) => break,
            () = state.closing.cancelled() => break,
        }
    }
    let applied = format!("wait={}", wait.as_secs());
    Ok(HttpResponse::Ok().insert_header(("Preference-Applied", applied)).json(JobView::of(&state, job).await?))
}

/// A job as `GET /jobs/{id}` shows it: with its place in line while QUEUED.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobView {
    #[serde(flatten)]
    pub job: Job,
    /// While QUEUED: 1 for the next to run, else 1 + the runnable jobs ahead of it (of its
    /// registered type, or of its queue); `null` otherwise.
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

/// A job the caller may see and change (cancel, retry).
async fn find_writable(state: &AppState, caller: &Caller, id: Uuid) -> Result<Job, ApiError> {
    let job = find(state, caller, id).await?;
    caller.may_write(&job.room)?;
    Ok(job)
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
    find(&state, &caller, *id).await?;
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

/// Cancels a QUEUED or RUNNING job and its unfinished descendants; a no-op on finished jobs.
#[utoipa::path(
    post, path = "/jobs/{id}/cancel", tag = "jobs", operation_id = "cancel_job",
    params(("id" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job, CANCELLED (or as it was, if it had finished)", body = Job),
        (status = 403, description = "`room_forbidden` (`@global` for a member), `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<Job>, ApiError> {
    find_writable(&state, &caller, *id).await?;
    let cancellation = state.store.cancel(*id).await?;
    tracing::info!(job_id = %id, user = %caller.identity().user, "job cancelled by request");
    Ok(web::Json(cancellation.job))
}

/// Re-queues a FAILED or CANCELLED job by hand; any other state is a 409.
#[utoipa::path(
    post, path = "/jobs/{id}/retry", tag = "jobs", operation_id = "retry_job",
    params(("id" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job, QUEUED again", body = Job),
        (status = 403, description = "`room_forbidden` (`@global` for a member), `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`invalid_transition`: the job is not FAILED or CANCELLED", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn retry(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<Job>, ApiError> {
    let job = find_writable(&state, &caller, *id).await?;
    if let Some(at) = job.cleaned_at {
        let detail = format!("job {id}'s files were removed at {at}: upload them again");
        return Err(ApiError::new(Code::ResultCleaned, detail));
    }
    let job = state.store.retry(*id).await?;
    tracing::info!(job_id = %id, user = %caller.identity().user, "job queued again by request");
    state.dispatcher.publish(&job).await;
    Ok(web::Json(job))
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
    find(&state, &caller, *id).await?;
    let limit = page_size(query.limit, state.max_page_size)?;
    let events = state.store.events(*id, query.after, limit).await?;
    let next_after = events.last().map(|event| event.id).or(query.after);
    Ok(web::Json(EventPage { events, next_after }))
}
