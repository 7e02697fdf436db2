//! Script hosts elsewhere: the HTTP face for a host with no shared file system, speaking
//! the remote-worker protocol with a `worker` token (it registers with
//! `"services": [...]`, heart-beats, reports with `PATCH /tasks/{id}`) plus what files need:
//!
//! - `POST /scripts/claim` claims the next script job of its services under the quotas, as
//!   a local host does, holding the request with `Prefer: wait=N`; the answer carries the
//!   service's limits, which the host applies;
//! - `GET /tasks/{id}/files/{path}` downloads an uploaded file (`Range` resumes);
//! - `PUT /tasks/{id}/result` sends the archive back, whole or in pieces
//!   (`Content-Range: bytes a-b/total`, each piece where the last ended), kept aside until
//!   complete, then put in place whole.

use std::io::{Seek as _, SeekFrom, Write as _};

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::api::{internal, stream_blob};
use super::names::normalise;
use super::quota::Scope;
use super::sandbox::Limits;
use super::Uploads;
use crate::auth::Caller;
use crate::domain::{Job, RUN_SCRIPT};
use crate::http::{prefer_wait, ApiError, AppState, Code, Problem};
use crate::remote::tasks::{claim_wait, current, hold_claim, ReportError};
use crate::remote::workers::LiveWorker;
use crate::remote::Remote;

/// Body of `POST /scripts/claim`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptClaim {
    /// The claiming worker (registered with the services it runs).
    pub worker_id: Uuid,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScriptTask {
    /// The claimed job (RUNNING, its `attempts` the run to report), or `null`.
    pub task: Option<Job>,
    /// Its service's limits, with the task: the host applies them.
    pub limits: Option<Limits>,
}

/// Claims the next uploaded script of the worker's services under their quotas.
#[utoipa::path(
    post, path = "/scripts/claim", tag = "uploads", operation_id = "claim_script",
    request_body = ScriptClaim,
    params(("Prefer" = Option<String>, Header, description = "`wait=N`: hold the request up to N seconds for a task")),
    responses(
        (status = 200, description = "A task, or `{\"task\": null}` when none came in time", body = ScriptTask),
        (status = 403, description = "`worker_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn claim(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    req: HttpRequest,
    body: web::Json<ScriptClaim>,
) -> Result<HttpResponse, ApiError> {
    let worker = remote.workers.renew_lately(body.worker_id, caller.identity().token_id).await?;
    let wait = claim_wait(&remote, prefer_wait(req.headers()), state.max_wait).unwrap_or_default();
    let scope = Scope {
        services: Some(worker.services()),
        rooms: (!caller.is_admin())
            .then(|| caller.identity().rooms.iter().map(|room| room.as_str().to_owned()).collect()),
    };
    // Woken when a script job is queued or a running one frees its quota slot.
    let keys = [RUN_SCRIPT.to_owned()];
    let (quotas, owner) = (&uploads.quotas, worker.owner());
    let attempt = || quotas.claim(state.store.as_ref(), &owner, remote.lease, &scope);
    let token = caller.identity().token_id;
    let task = hold_claim(&remote, &worker, token, &keys, wait, &state.closing, attempt).await?;
    let limits = task
        .as_ref()
        .and_then(|job| job.service.as_deref())
        .and_then(|service| uploads.services.get(service).map(Limits::from));
    Ok(HttpResponse::Ok().json(ScriptTask { task, limits }))
}

/// Query of the task file endpoints: who asks, for which run.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunQuery {
    pub worker_id: Uuid,
    #[param(minimum = 1)]
    pub attempt: i32,
}

/// Path of `GET /tasks/{id}/files/{path}`.
#[derive(Debug, Deserialize)]
pub struct TaskFilePath {
    id: Uuid,
    path: String,
}

/// The script job `id` as its claiming worker's current run, or why not.
async fn held(
    state: &AppState,
    remote: &Remote,
    caller: &Caller,
    id: Uuid,
    query: &RunQuery,
) -> Result<(LiveWorker, Job), ApiError> {
    let worker = remote.workers.check_lately(query.worker_id, caller.identity().token_id).await?;
    let job = current(state.store.as_ref(), &worker, id, query.attempt).await.map_err(ApiError::from)?;
    if job.operation != RUN_SCRIPT {
        return Err(ReportError::NotFound(id).into());
    }
    Ok((worker, job))
}

/// An uploaded file of a claimed script job, for its host; `Range` resumes a download.
#[utoipa::path(
    get, path = "/tasks/{id}/files/{path}", tag = "uploads", operation_id = "get_task_file",
    params(
        ("id" = Uuid, Path, description = "The task"),
        ("path" = String, Path, description = "The uploaded file's name", pattern = r"^[^\u0000-\u001f\u007f-\u009f\\]{1,1024}$"),
        RunQuery,
    ),
    responses(
        (status = 200, description = "The file", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The range asked for", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "`invalid_file_name`, `path_traversal`, `absolute_path`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`worker_forbidden`, `task_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`task_not_found`, `worker_not_found`, `file_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`task_cancelled`, `invalid_transition`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`", body = Problem, content_type = "application/problem+json"),
        (status = 416, description = "`range_not_satisfiable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn task_file(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<TaskFilePath>,
    query: web::Query<RunQuery>,
) -> Result<HttpResponse, ApiError> {
    let TaskFilePath { id, path } = path.into_inner();
    let name = normalise(&path)?;
    let (_, job) = held(&state, &remote, &caller, id, &query).await?;
    let (blobs, wanted) = (uploads.blobs.clone(), name.clone());
    let opened = web::block(move || blobs.open_input(job.id, &wanted)).await.map_err(internal)?;
    let blob =
        opened.map_err(|_| ApiError::new(Code::FileNotFound, format!("no uploaded file {name:?} in task {id}")))?;
    let range = req.headers().get(header::RANGE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    stream_blob(blob, range, "application/octet-stream", None).await
}

/// How much of an archive has arrived.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Received {
    /// Bytes stored so far: the next piece starts here.
    pub received: u64,
    /// The whole archive is in place.
    pub complete: bool,
}

/// The run's archive from its host: the whole body, or the piece `Content-Range` names,
/// which must start where the stored part ends (409 `invalid_request` says where).
#[utoipa::path(
    put, path = "/tasks/{id}/result", tag = "uploads", operation_id = "put_task_result",
    params(("id" = Uuid, Path, description = "The task"), RunQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The archive's bytes (or the piece `Content-Range` names)"),
    responses(
        (status = 200, description = "Stored", body = Received),
        (status = 403, description = "`worker_forbidden`, `task_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`task_not_found`, `worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`task_cancelled`, `invalid_transition`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`upload_too_large`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: a piece that does not start where the last ended", body = Problem, content_type = "application/problem+json"),
    )
)]
#[allow(clippy::too_many_arguments)] // an actix handler: one argument per extractor
pub async fn put_result(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    req: HttpRequest,
    id: web::Path<Uuid>,
    query: web::Query<RunQuery>,
    mut body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (_, job) = held(&state, &remote, &caller, *id, &query).await?;
    let limit = job.service.as_deref().and_then(|service| uploads.services.get(service)).map_or(0, |service| {
        // Outputs are bounded by the file-size limit per file; the archive by the log caps
        // and a generous multiple for the files.
        service.file_size_bytes.saturating_mul(4).saturating_add(service.log_bytes * 2)
    });
    let range = match req.headers().get(header::CONTENT_RANGE) {
        None => None,
        Some(value) => Some(
            parse_content_range(value.to_str().unwrap_or_default())
                .ok_or_else(|| ApiError::new(Code::InvalidRequest, "Content-Range must be `bytes FIRST-LAST/TOTAL`"))?,
        ),
    };
    let total = range.map(|(_, _, total)| total);
    if total.is_some_and(|total| total > limit) {
        return Err(ApiError::new(
            Code::UploadTooLarge,
            format!("an archive of this service is {limit} bytes at most"),
        ));
    }
    let partial = partial_result(&uploads, &job);
    let start = range.map_or(0, |(first, _, _)| first);
    let opened = {
        let partial = partial.clone();
        web::block(move || {
            if let Some(dir) = partial.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(&partial)?;
            let len = file.metadata()?.len();
            if start == 0 {
                file.set_len(0)?;
            } else if start == len {
                file.seek(SeekFrom::Start(len))?;
            }
            Ok::<_, std::io::Error>((file, len))
        })
        .await
        .map_err(internal)?
        .map_err(internal)?
    };
    let (mut file, stored) = opened;
    if start != 0 && start != stored {
        let detail = format!("{stored} bytes are stored: send the piece that starts there");
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/Content-Range"));
    }
    let mut written = start;
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|err| ApiError::new(Code::RequestTimeout, format!("the archive did not arrive: {err}")))?;
        written += chunk.len() as u64;
        if written > limit || total.is_some_and(|total| written > total) {
            return Err(ApiError::new(Code::UploadTooLarge, "the archive is larger than announced or allowed"));
        }
        file = web::block(move || file.write_all(&chunk).map(|()| file)).await.map_err(internal)?.map_err(internal)?;
    }
    let complete = total.is_none_or(|total| written == total);
    let blobs = uploads.blobs.clone();
    web::block(move || {
        file.sync_all()?;
        if complete {
            blobs.put_result(job.id, &partial)?;
        }
        Ok::<_, std::io::Error>(())
    })
    .await
    .map_err(internal)?
    .map_err(internal)?;
    Ok(HttpResponse::Ok().json(Received { received: written, complete }))
}

/// How much of the run's archive is stored: where a broken upload resumes.
#[utoipa::path(
    get, path = "/tasks/{id}/result", tag = "uploads", operation_id = "get_task_result_progress",
    params(("id" = Uuid, Path, description = "The task"), RunQuery),
    responses(
        (status = 200, description = "What is stored", body = Received),
        (status = 403, description = "`worker_forbidden`, `task_forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`task_not_found`, `worker_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`task_cancelled`, `invalid_transition`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`worker_gone`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn result_progress(
    state: web::Data<AppState>,
    remote: web::Data<Remote>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    id: web::Path<Uuid>,
    query: web::Query<RunQuery>,
) -> Result<HttpResponse, ApiError> {
    let (_, job) = held(&state, &remote, &caller, *id, &query).await?;
    let partial = partial_result(&uploads, &job);
    let stored =
        web::block(move || std::fs::metadata(partial).map(|meta| meta.len()).unwrap_or(0)).await.map_err(internal)?;
    Ok(HttpResponse::Ok().json(Received { received: stored, complete: false }))
}

/// Where the pieces of a run's archive gather until the last arrives: this process's
/// workspace, beside the job's local runs.
fn partial_result(uploads: &Uploads, job: &Job) -> std::path::PathBuf {
    uploads.workspace.job_dir(job.id).join(format!("result.zip.part-{}", job.attempts))
}

/// `bytes FIRST-LAST/TOTAL` → (first, last, total).
fn parse_content_range(value: &str) -> Option<(u64, u64, u64)> {
    let spec = value.trim().strip_prefix("bytes ")?;
    let (span, total) = spec.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let (first, last, total) = (first.trim().parse().ok()?, last.trim().parse().ok()?, total.trim().parse().ok()?);
    (first <= last && last < total).then_some((first, last, total))
}
