//! The submission rules, shared by `POST /jobs`, `POST /jobs:batch` and uploads: a body read
//! and checked (operation, queue, payload, NUL characters, retries), a key's shape, a job's
//! room and parent, and a registered type's schema and workers. The times a submission
//! names are read in `times.rs`.

use std::collections::BTreeSet;

use actix_web::HttpRequest;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::{
    nul_pointer, Job, JobStatus, Limit, NewJob, OnDependencyFailure, QueueName, RetryPolicy, RoomId, Unique,
    LOWEST_PRIORITY,
};
use crate::http::{ApiError, AppState, Code};
use crate::ops::{OperationRegistry, Rejection};
use crate::remote::names::{is_type_reference, TypeReference};
use crate::remote::Remote;

use super::settings::{JobsSettings, MAX_TIMEOUT_SECONDS};
use super::times::{expiry, seconds, start_after};
use crate::store::StoreError;

/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;
const MAX_RETRIES_LIMIT: i32 = 100;

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
    /// Start no earlier than this time (RFC 3339). One already past starts at once; one
    /// beyond `jobs.max_delay_days` is refused. Not with `delay_seconds`.
    #[serde(default)]
    pub run_at: Option<DateTime<Utc>>,
    /// Start no earlier than this many seconds from now. Not with `run_at`.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub delay_seconds: Option<f64>,
    /// How long one run may take: past it the worker stops the run (its cancel token; a
    /// script's process group) and the job fails `Timeout`, retried by its policy; if the
    /// worker is gone, the reaper fails it. Default: `[jobs.operations.NAME]`, then
    /// `[jobs.queues.NAME]`, else none.
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 31536000)]
    pub timeout_seconds: Option<f64>,
    /// A job not started by this time (RFC 3339) is CANCELLED with `job.expired`. Not
    /// with `queue_timeout_seconds`.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// A job not started within this many seconds of when it may start (its `run_at`, or
    /// now) is CANCELLED with `job.expired`. Not with `expires_at`.
    #[serde(default)]
    #[schema(exclusive_minimum = 0)]
    pub queue_timeout_seconds: Option<f64>,
    /// 0 (first) to 9 (last): within its queue (or a registered type's line), a runnable
    /// job starts before any of a higher number. Default: `[jobs.operations.NAME]`, then
    /// `[jobs.queues.NAME]`, else 0. A waiting job rises a level every
    /// `jobs.priority_aging_seconds`, so none waits for good.
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 0, maximum = 9)]
    pub priority: Option<i32>,
    /// Which partition of its limit the job counts under (a tenant, a customer): each key
    /// gets the limit's `max_running` and `rate` to itself. Default: the value at the
    /// limit's `concurrency_key` pointer in the payload. Without a limit it changes nothing.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001f\u007f]*$")]
    pub concurrency_key: Option<String>,
    /// Make the job only if no job of the same key (in the same room) was made within
    /// `for_seconds` and is now in one of `states`: that job answers instead, with 200.
    #[serde(default)]
    pub unique: Option<UniqueRequest>,
    /// Jobs of the same room this one waits for: it stays QUEUED with `waiting_since`,
    /// unsent and in no line, until every one has succeeded (or ended, with
    /// `on_dependency_failure` `run`). In `POST /jobs:batch`, `#N`
    /// names the batch's item N, which must come before this one. At most
    /// `jobs.max_dependencies` (1000 unless configured).
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub depends_on: Option<Vec<String>>,
    /// When a dependency fails or is cancelled: `cancel` (the default: this job is
    /// CANCELLED with `job.dependency_failed`, and so are the jobs that wait for it) or
    /// `run` (it runs once every dependency has ended).
    #[serde(default)]
    pub on_dependency_failure: Option<OnDependencyFailure>,
}

/// `unique` on a submission (Oban's unique jobs).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UniqueRequest {
    /// What makes two submissions the same; default: the operation, the queue and the
    /// payload (`auto:` and their digest).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255, pattern = r"^[^\u0000-\u001f\u007f]*$")]
    pub key: Option<String>,
    /// How long after the earlier job was made it still answers, in seconds.
    #[schema(exclusive_minimum = 0, maximum = 31536000)]
    pub for_seconds: f64,
    /// The states of the earlier job that count; default `queued`, `running`, `succeeded`
    /// (a failed or cancelled job does not stop a new one).
    #[serde(default)]
    #[schema(min_items = 1)]
    pub states: Option<Vec<JobStatus>>,
}

/// Longest unique key a submission names.
const MAX_UNIQUE_KEY: usize = 255;

/// A submission's `unique`, checked, with its key.
fn unique_of(asked: UniqueRequest, operation: &str, queue: &str, payload: &Value) -> Result<Unique, ApiError> {
    let bad = |detail: &str, pointer: &str| Err(ApiError::new(Code::InvalidRequest, detail).at(pointer));
    let window = asked.for_seconds;
    if !window.is_finite() || window <= 0.0 || window > MAX_TIMEOUT_SECONDS {
        return bad("unique.for_seconds must be above 0 and at most a year", "/unique/for_seconds");
    }
    let key = match asked.key {
        Some(key) if key.is_empty() || key.chars().count() > MAX_UNIQUE_KEY || key.chars().any(char::is_control) => {
            return bad("unique.key is 1-255 characters, none of them control characters", "/unique/key");
        }
        Some(key) => key,
        None => {
            use sha2::Digest as _;
            let described = format!("{operation}\n{queue}\n{payload}");
            format!("auto:{}", hex::encode(sha2::Sha256::digest(described.as_bytes())))
        }
    };
    let states = asked.states.unwrap_or_else(|| vec![JobStatus::Queued, JobStatus::Running, JobStatus::Succeeded]);
    if states.is_empty() {
        return bad("unique.states names no state; leave it out for queued, running, succeeded", "/unique/states");
    }
    Ok(Unique { key, window: std::time::Duration::from_secs_f64(window), states })
}

/// A parent must exist for the caller (another room's job does not), and must not be a
/// coordinator: its count is of the batches or children it makes itself, from its
/// submission on (a `group` still QUEUED included).
pub(super) async fn check_parent(
    state: &AppState,
    caller: &Caller,
    parent: Option<Uuid>,
) -> Result<Option<Job>, ApiError> {
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
pub(super) fn place(caller: &Caller, new: &mut NewJob, asked_room: bool, parent: Option<&Job>) -> Result<(), ApiError> {
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
pub async fn admit_type(remote: &Remote, new: &mut NewJob, wait_for_worker: Option<bool>) -> Result<(), ApiError> {
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

/// A built-in operation named as `GET /types` lists it (`@internal:builtin:NAME`) is that
/// operation; any other `@internal` type names nothing.
fn builtin_by_type_name(registry: &OperationRegistry, operation: String) -> Result<String, ApiError> {
    let Some(rest) = operation.strip_prefix(RoomId::INTERNAL).and_then(|rest| rest.strip_prefix(':')) else {
        return Ok(operation);
    };
    match rest.strip_prefix("builtin:").filter(|name| registry.names().any(|known| known == *name)) {
        Some(name) => Ok(name.to_owned()),
        None => {
            let detail = format!("{operation:?} is no built-in operation of this server (GET /types lists them)");
            Err(ApiError::new(Code::UnknownOperation, detail).at("/operation"))
        }
    }
}

/// Refuses a NUL character anywhere in a submission, naming where: PostgreSQL cannot
/// store one, and both backends answer alike.
pub(super) fn refuse_nul(body: &SubmitRequest, header_key: Option<&str>) -> Result<(), ApiError> {
    let nul = |pointer: &str| {
        Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(pointer))
    };
    let texts = [
        ("/operation", Some(body.operation.as_str())),
        ("/queue", body.queue.as_deref()),
        ("/room", body.room.as_deref()),
        ("/concurrency_key", body.concurrency_key.as_deref()),
        ("/unique/key", body.unique.as_ref().and_then(|unique| unique.key.as_deref())),
    ];
    for (at, dependency) in body.depends_on.iter().flatten().enumerate() {
        if dependency.contains('\0') {
            return nul(&format!("/depends_on/{at}"));
        }
    }
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
pub(super) fn known_job_queue(rules: &Submissions, name: Option<&str>) -> Result<QueueName, ApiError> {
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

/// What a submission is checked against: the operations, the job queues, and `[jobs]`
/// (how far ahead a start may be, the defaults by operation and queue).
pub struct Submissions<'a> {
    pub registry: &'a OperationRegistry,
    pub job_queues: &'a BTreeSet<String>,
    pub jobs: &'a JobsSettings,
}

impl AppState {
    pub fn submissions<'a>(&'a self, jobs: &'a JobsSettings) -> Submissions<'a> {
        Submissions { registry: &self.registry, job_queues: &self.job_queues, jobs }
    }
}

/// A `POST /jobs` body read and checked as the API does (the fuzz targets call this).
pub fn parse_submission(rules: &Submissions, body: &[u8]) -> Result<NewJob, ApiError> {
    let request: SubmitRequest =
        serde_json::from_slice(body).map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()))?;
    validate_submission(rules, request, None, &RoomId::default())
}

pub fn validate_submission(
    state: &Submissions,
    body: SubmitRequest,
    header_key: Option<String>,
    default_room: &RoomId,
) -> Result<NewJob, ApiError> {
    refuse_nul(&body, header_key.as_deref())?;
    let body = SubmitRequest { operation: builtin_by_type_name(state.registry, body.operation)?, ..body };
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
            state.registry.validate(&body.operation, &payload).map_err(|rejection| {
                let at = match rejection {
                    Rejection::InvalidPayload { .. } => "/payload",
                    Rejection::UnknownOperation(_) | Rejection::Unavailable { .. } => "/operation",
                };
                ApiError::from(rejection).at(at)
            })?;
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
    let horizon = state.jobs.horizon();
    let run_after = start_after(body.run_at, body.delay_seconds, horizon)?;
    let expires_at = expiry(body.expires_at, body.queue_timeout_seconds, run_after, horizon)?;
    let timeout_seconds = match body.timeout_seconds {
        Some(asked) => seconds(asked, MAX_TIMEOUT_SECONDS, "/timeout_seconds").map(|_| Some(asked))?,
        None => state.jobs.timeout_of(&body.operation, queue.as_str()),
    };
    let priority = match body.priority {
        Some(asked) => u8::try_from(asked).ok().filter(|level| *level <= LOWEST_PRIORITY).ok_or_else(|| {
            let detail = format!("priority must be a whole number from 0 (first) to {LOWEST_PRIORITY} (last)");
            ApiError::new(Code::InvalidPriority, detail).at("/priority")
        })?,
        None => state.jobs.priority_of(&body.operation, queue.as_str()),
    };
    let limit = limit_of(state.jobs, &body.operation, queue.as_str(), &payload, body.concurrency_key.as_deref())?;
    let depends_on = dependencies_of(body.depends_on.unwrap_or_default(), state.jobs.max_dependencies)?;
    let unique = body.unique.map(|asked| unique_of(asked, &body.operation, queue.as_str(), &payload)).transpose()?;
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
        outbox: None,
        id: None,
        submitted_by: None,
        service: None,
        run_after,
        timeout_seconds,
        expires_at,
        priority,
        ages_at: None,
        limit,
        unique,
        depends_on,
        on_dependency_failure: body.on_dependency_failure.unwrap_or_default(),
    })
}

/// A submission's `depends_on`, read: job ids, each once, in the order given. A batch has
/// put its items' ids in place of its `#N` references already.
fn dependencies_of(asked: Vec<String>, most: usize) -> Result<Vec<Uuid>, ApiError> {
    if asked.len() > most {
        let detail = format!("a job may wait for at most {most} jobs (jobs.max_dependencies), not {}", asked.len());
        return Err(ApiError::new(Code::InvalidDependency, detail).at("/depends_on"));
    }
    let mut ids: Vec<Uuid> = Vec::with_capacity(asked.len());
    for (at, text) in asked.iter().enumerate() {
        let id = match (text.strip_prefix('#'), Uuid::parse_str(text)) {
            (_, Ok(id)) => id,
            (Some(_), _) => {
                let detail = format!("{text:?} names an item of a batch: only POST /jobs:batch reads #N");
                return Err(ApiError::new(Code::InvalidDependency, detail).at(format!("/depends_on/{at}")));
            }
            (None, Err(_)) => {
                let detail = format!("{text:?} is not a job id");
                return Err(ApiError::new(Code::InvalidDependency, detail).at(format!("/depends_on/{at}")));
            }
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Longest concurrency key.
const MAX_CONCURRENCY_KEY: usize = 200;

/// The limit a job counts under, if its operation or queue has one: partitioned by the
/// submission's `concurrency_key`, else by the payload's value at the limit's pointer,
/// which must be there (a string, a number or a boolean).
fn limit_of(
    jobs: &JobsSettings,
    operation: &str,
    queue: &str,
    payload: &Value,
    asked: Option<&str>,
) -> Result<Option<Limit>, ApiError> {
    let refused = |detail: String, pointer: String| Err(ApiError::new(Code::InvalidConcurrencyKey, detail).at(pointer));
    let check = |key: &str, pointer: &str| -> Result<(), ApiError> {
        if key.is_empty() || key.chars().count() > MAX_CONCURRENCY_KEY || key.chars().any(char::is_control) {
            let detail =
                format!("a concurrency key is 1-{MAX_CONCURRENCY_KEY} characters, none of them control characters");
            return refused(detail, pointer.to_owned());
        }
        Ok(())
    };
    if let Some(asked) = asked {
        check(asked, "/concurrency_key")?;
    }
    let Some((rule, defaults)) = jobs.limit_rule(operation, queue) else { return Ok(None) };
    let key = match (asked, defaults.concurrency_key.as_deref()) {
        (Some(asked), _) => Some(asked.to_owned()),
        (None, None) => None,
        (None, Some(pointer)) => {
            let at = format!("/payload{pointer}");
            let key = match payload.pointer(pointer) {
                Some(Value::String(text)) => text.clone(),
                Some(value @ (Value::Number(_) | Value::Bool(_))) => value.to_string(),
                Some(_) => {
                    let detail =
                        format!("{rule}'s concurrency key at {pointer} must be a string, a number or a boolean");
                    return refused(detail, at).map(|()| None);
                }
                None => {
                    let detail =
                        format!("{rule} is partitioned by the payload's {pointer}, and this payload has nothing there");
                    return refused(detail, at).map(|()| None);
                }
            };
            check(&key, &at)?;
            Some(key)
        }
    };
    Ok(Some(defaults.limit(&rule, key.as_deref())))
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
