//! The HTTP face of uploads: `POST /uploads`, `GET /jobs/{id}/result`, and
//! `GET /jobs/{id}/files/{path}`.
//!
//! An upload is read part by part and written to a staging directory as it arrives, its
//! limits counted as the bytes come (nothing is buffered whole); a refused or broken upload
//! removes what it wrote, and no job exists until every file is in place under the job's
//! id. A text field `service` must come before the files (it decides their limits).

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::time::Duration;

use actix_multipart::{Field, Multipart};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::files::{open_inside, Blob, BlobWriter, StagedUpload};
use super::names::{normalise, NameError, NameSet};
use super::sandbox::SCRIPT;
use super::settings::ServiceSettings;
use super::Uploads;
use crate::auth::Caller;
use crate::domain::{EventLevel, Job, JobStatus, NewEvent, NewJob, QueueName, RoomId, RUN_SCRIPT};
use crate::http::{ApiError, AppState, Code, Problem};
use crate::jobs::{check_idempotency_key, find, idempotency_header};

/// Longest text field (service, room, idempotency key), in bytes.
const MAX_TEXT_FIELD: usize = 1024;

impl From<NameError> for ApiError {
    fn from(err: NameError) -> Self {
        let code = match &err {
            NameError::Traversal(_) => Code::PathTraversal,
            NameError::Absolute(_) => Code::AbsolutePath,
            NameError::Invalid { .. } => Code::InvalidFileName,
            NameError::Duplicate(_) => Code::DuplicateFile,
        };
        ApiError::new(code, err.to_string())
    }
}

/// The form of `POST /uploads` (multipart/form-data), for the API document.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct UploadForm {
    /// The service to run under (its limits and quotas). Must come before the files.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    service: String,
    /// The room of the job; default: the token's first room.
    #[schema(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    room: Option<String>,
    /// As `POST /jobs`' `idempotency_key` (or the `Idempotency-Key` header): the same key
    /// with the same files answers the job made first.
    #[schema(min_length = 1, max_length = 255, pattern = r"^[^\u0000]*$")]
    idempotency_key: Option<String>,
    /// The files, `run.sh` among them, each a part with a `filename` (`dir/name` nests).
    #[schema(value_type = Vec<String>, format = Binary)]
    files: Vec<Vec<u8>>,
}

/// A file of an upload as its job's payload records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UploadedFile {
    name: String,
    bytes: u64,
    sha256: String,
}

/// Uploads files with `run.sh` and queues the job that runs it.
#[utoipa::path(
    post, path = "/uploads", tag = "uploads", operation_id = "upload",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    params(("Idempotency-Key" = Option<String>, Header, description = "Same as the `idempotency_key` field",
        pattern = r"^[\t -~]{1,255}$")),
    responses(
        (status = 201, description = "Created", body = Job, headers(("Location" = String, description = "The job's URL"))),
        (status = 200, description = "An earlier upload with the same idempotency key and files made this job", body = Job),
        (status = 400, description = "`invalid_multipart`, `invalid_file_name`, `path_traversal`, `absolute_path`, `duplicate_file`, `invalid_room_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`, `read_only_token`, `forbidden`", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency_conflict`", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`too_many_files`, `file_too_large`, `upload_too_large`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`unknown_service`, `missing_script`, `invalid_request`, `nul_character`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn upload(
    state: web::Data<AppState>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    req: HttpRequest,
    multipart: Multipart,
) -> Result<HttpResponse, ApiError> {
    let mut key = idempotency_header(&req)?;
    let id = Uuid::now_v7();
    let mut form = Form { multipart, idle: uploads.idle_timeout };
    let mut service: Option<(String, ServiceSettings)> = None;
    let mut room: Option<RoomId> = None;
    let mut staging: Option<Box<dyn StagedUpload>> = None;
    let mut names = NameSet::default();
    let mut files = Vec::new();
    let mut total = 0u64;
    while let Some(mut field) = form.next().await? {
        let name = field.name().unwrap_or_default().to_owned();
        let filename =
            field.content_disposition().and_then(|disposition| disposition.get_filename()).map(str::to_owned);
        let Some(filename) = filename else {
            let text = text_field(&mut field, &name, uploads.idle_timeout).await?;
            match name.as_str() {
                "service" if service.is_none() => service = Some(known_service(&uploads, &text)?),
                "room" if room.is_none() => room = Some(crate::http::room_id(&text).map_err(|err| err.at("/room"))?),
                "idempotency_key" => key = Some(text),
                _ => {
                    let detail = format!(
                        "unexpected field {name:?} (or given twice): send service, room, idempotency_key and files"
                    );
                    return Err(ApiError::new(Code::InvalidMultipart, detail));
                }
            }
            continue;
        };
        let Some((_, limits)) = &service else {
            return Err(ApiError::new(Code::InvalidMultipart, "the service field must come before the files"));
        };
        let filename = normalise(&filename)?;
        names.add(&filename)?;
        if names.len() > limits.max_files {
            let detail = format!("this service takes at most {} files per upload", limits.max_files);
            return Err(ApiError::new(Code::TooManyFiles, detail));
        }
        if staging.is_none() {
            // Checked before the first byte is stored (and again at the end, for a room
            // field sent after the files).
            let room = room.clone().unwrap_or_else(|| caller.default_room());
            caller.may_write(room.as_str()).map_err(|err| err.at("/room"))?;
            let blobs = uploads.blobs.clone();
            staging = Some(web::block(move || blobs.stage(id)).await.map_err(internal)?.map_err(internal)?);
        }
        let target = staging.as_ref().map(|staging| staging.create(&filename)).transpose().map_err(internal)?;
        let Some(target) = target else { continue };
        let written = receive_file(&mut field, target, limits, &mut total, uploads.idle_timeout).await?;
        files.push(UploadedFile { name: filename, bytes: written.0, sha256: written.1 });
    }
    let Some((service, _)) = service else {
        return Err(ApiError::new(Code::InvalidMultipart, "the upload names no service"));
    };
    if !names.contains(SCRIPT) {
        return Err(ApiError::new(Code::MissingScript, "the upload must hold run.sh at its top level"));
    }
    let key = check_idempotency_key(key)?;
    let room = room.unwrap_or_else(|| caller.default_room());
    caller.may_write(room.as_str()).map_err(|err| err.at("/room"))?;
    let staging = staging.ok_or_else(|| internal("the upload's files were not staged"))?;
    web::block(move || staging.commit()).await.map_err(internal)?.map_err(internal)?;
    let new = NewJob {
        room,
        queue: QueueName::scripts(),
        payload: json!({ "service": service, "files": files }),
        idempotency_key: key,
        id: Some(id),
        submitted_by: Some(caller.identity().user.clone()),
        service: Some(service.clone()),
        ..NewJob::new(RUN_SCRIPT)
    };
    let submitted = state.dispatcher.submit(new).await;
    let submission = match submitted {
        Ok(submission) if submission.created => submission,
        // Not ours (an earlier upload's job answers), or nothing made: our files go.
        other => {
            let blobs = uploads.blobs.clone();
            let _ = web::block(move || blobs.remove(id)).await;
            other?
        }
    };
    if submission.created {
        explain_wait(&state, &uploads, &submission.job, &service).await;
    }
    let mut response = match submission.created {
        true => HttpResponse::Created(),
        false => HttpResponse::Ok(),
    };
    let location = format!("/jobs/{}", submission.job.id);
    Ok(response.insert_header((header::LOCATION, location)).json(submission.job))
}

/// Records why a new job waits, when its user or its service is at its quota.
async fn explain_wait(state: &AppState, uploads: &Uploads, job: &Job, service: &str) {
    let (Some(limits), Some(user)) = (uploads.services.get(service), job.submitted_by.as_deref()) else { return };
    let load = match uploads.quotas.load(service, user, job.id).await {
        Ok(load) => load,
        Err(err) => return tracing::warn!(job_id = %job.id, error = %err, "quota not read"),
    };
    let message = if load.user_ahead >= limits.per_user {
        format!(
            "waiting for a slot: {user:?} has {} jobs of service {service:?} running or queued before this one, \
             and {} may run at once",
            load.user_ahead, limits.per_user
        )
    } else if load.service_ahead >= limits.total {
        format!(
            "waiting for a slot: service {service:?} has {} jobs running or queued before this one, and {} may run at once",
            load.service_ahead, limits.total
        )
    } else {
        return;
    };
    let fields = json!({
        "service": service,
        "user_ahead": load.user_ahead,
        "per_user": limits.per_user,
        "service_ahead": load.service_ahead,
        "total": limits.total,
    });
    let event = NewEvent::new("job.waiting_for_quota").fields(fields).level(EventLevel::Info).message(message);
    if let Err(err) = state.store.note_queued(job.id, event).await {
        tracing::warn!(job_id = %job.id, error = %err, "quota wait not recorded");
    }
}

fn known_service(uploads: &super::Uploads, name: &str) -> Result<(String, ServiceSettings), ApiError> {
    match uploads.services.get(name) {
        Some(settings) => Ok((name.to_owned(), settings.clone())),
        None => {
            let known: Vec<&str> = uploads.services.keys().map(String::as_str).collect();
            let detail = format!("no service {name:?} takes uploads here; known: {}", known.join(", "));
            Err(ApiError::new(Code::UnknownService, detail).at("/service"))
        }
    }
}

pub(super) fn internal(err: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %err, "upload storage failed");
    ApiError::new(Code::Internal, "the upload could not be stored")
}

/// The multipart body, read with a limit on how long it may stall.
struct Form {
    multipart: Multipart,
    idle: Duration,
}

impl Form {
    async fn next(&mut self) -> Result<Option<Field>, ApiError> {
        match tokio::time::timeout(self.idle, self.multipart.next()).await {
            Err(_) => Err(stalled()),
            Ok(None) => Ok(None),
            Ok(Some(Ok(field))) => Ok(Some(field)),
            Ok(Some(Err(err))) => Err(multipart_error(err)),
        }
    }
}

fn stalled() -> ApiError {
    ApiError::new(Code::RequestTimeout, "the upload stalled; send it again")
}

fn multipart_error(err: actix_multipart::MultipartError) -> ApiError {
    use actix_multipart::MultipartError;
    match err {
        MultipartError::Payload(payload) if crate::http::is_body_timeout(&payload) => {
            ApiError::new(Code::RequestTimeout, "the upload did not arrive in time")
        }
        other => ApiError::new(Code::InvalidMultipart, other.to_string()),
    }
}

/// A text field's value, up to [`MAX_TEXT_FIELD`] bytes of UTF-8 without NUL.
async fn text_field(field: &mut Field, name: &str, idle: Duration) -> Result<String, ApiError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = next_chunk(field, idle).await? {
        if bytes.len() + chunk.len() > MAX_TEXT_FIELD {
            return Err(ApiError::new(Code::InvalidMultipart, format!("field {name:?} is longer than 1024 bytes")));
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ApiError::new(Code::InvalidMultipart, format!("field {name:?} is not UTF-8")))?;
    if text.contains('\0') {
        return Err(ApiError::new(Code::NulCharacter, format!("field {name:?} holds a NUL character")));
    }
    Ok(text)
}

async fn next_chunk(field: &mut Field, idle: Duration) -> Result<Option<web::Bytes>, ApiError> {
    match tokio::time::timeout(idle, field.next()).await {
        Err(_) => Err(stalled()),
        Ok(None) => Ok(None),
        Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
        Ok(Some(Err(err))) => Err(multipart_error(err)),
    }
}

/// Streams one file to disk, counting it against the limits; answers its size and digest.
async fn receive_file(
    field: &mut Field,
    target: Box<dyn BlobWriter>,
    limits: &ServiceSettings,
    total: &mut u64,
    idle: Duration,
) -> Result<(u64, String), ApiError> {
    let mut file = Some(target);
    let mut digest = Sha256::new();
    let mut bytes = 0u64;
    while let Some(chunk) = next_chunk(field, idle).await? {
        bytes += chunk.len() as u64;
        *total += chunk.len() as u64;
        if bytes > limits.max_file_bytes {
            let detail = format!("a file is larger than this service's {} bytes per file", limits.max_file_bytes);
            return Err(ApiError::new(Code::FileTooLarge, detail));
        }
        if *total > limits.max_total_bytes {
            let detail = format!("the upload is larger than this service's {} bytes in all", limits.max_total_bytes);
            return Err(ApiError::new(Code::UploadTooLarge, detail));
        }
        digest.update(&chunk);
        let mut writing = file.take().ok_or_else(|| internal("the file was lost"))?;
        writing = web::block(move || writing.write_all(&chunk).map(|()| writing))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        file = Some(writing);
    }
    if let Some(file) = file {
        web::block(move || file.finish()).await.map_err(internal)?.map_err(internal)?;
    }
    Ok((bytes, hex::encode(digest.finalize())))
}

/// The result archive of a finished upload job: 200 with the ZIP once it exists (a failed
/// run's too: its logs say why); while the job is QUEUED or RUNNING, 202 with the job.
#[utoipa::path(
    get, path = "/jobs/{id}/result", tag = "uploads", operation_id = "get_result",
    params(("id" = Uuid, Path, description = "The job")),
    responses(
        // Also as bytes in general: generated clients (openapi-python-client) read
        // `application/octet-stream` as a file and drop a media type they do not know.
        (status = 200, description = "The ZIP of the run's outputs and logs (sent as `application/zip`)",
         content((Vec<u8> = "application/zip"), (Vec<u8> = "application/octet-stream"))),
        (status = 202, description = "Not finished yet: the job as it is", body = Job),
        (status = 404, description = "`job_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_an_upload`, `no_result`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`result_cleaned`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn result(
    state: web::Data<AppState>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    let job = find(&state, &caller, *id).await?;
    if job.operation != RUN_SCRIPT {
        return Err(ApiError::new(Code::NotAnUpload, format!("job {} is a {} job", job.id, job.operation)));
    }
    if matches!(job.status, JobStatus::Queued | JobStatus::Running) {
        return Ok(HttpResponse::Accepted().json(job));
    }
    if let Some(at) = job.cleaned_at {
        return Err(ApiError::new(Code::ResultCleaned, format!("job {}'s files were removed at {at}", job.id)));
    }
    let blobs = uploads.blobs.clone();
    let blob = match web::block(move || blobs.open_result(job.id)).await.map_err(internal)? {
        Ok(blob) => blob,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let blobs = uploads.blobs.clone();
            let holds = web::block(move || blobs.holds(job.id)).await.map_err(internal)?.map_err(internal)?;
            return Err(match holds {
                true => ApiError::new(Code::NoResult, format!("job {} is {} and left no archive", job.id, job.status)),
                false => ApiError::new(Code::ResultCleaned, format!("job {}'s files are gone", job.id)),
            });
        }
        Err(err) => return Err(internal(err)),
    };
    let disposition = format!("attachment; filename=\"{}.zip\"", job.id);
    stream_blob(blob, None, "application/zip", Some(disposition)).await
}

/// Path of `GET /jobs/{id}/files/{path}`.
#[derive(Debug, Deserialize)]
pub struct FilePath {
    id: Uuid,
    path: String,
}

/// A file of a job's latest run (partial results while it runs), or of its upload, with
/// `Range: bytes=a-b` honoured.
#[utoipa::path(
    get, path = "/jobs/{id}/files/{path}", tag = "uploads", operation_id = "get_job_file",
    params(
        ("id" = Uuid, Path, description = "The job"),
        ("path" = String, Path, description = "The file, relative to the run's working directory (`dir/name`)",
         pattern = r"^[^\u0000-\u001f\u007f-\u009f\\]{1,1024}$"),
    ),
    responses(
        (status = 200, description = "The file", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The range asked for", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "`invalid_file_name`, `path_traversal`, `absolute_path`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`job_not_found`, `file_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_an_upload`", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "`result_cleaned`", body = Problem, content_type = "application/problem+json"),
        (status = 416, description = "`range_not_satisfiable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn file(
    state: web::Data<AppState>,
    uploads: web::Data<Uploads>,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<FilePath>,
) -> Result<HttpResponse, ApiError> {
    let FilePath { id, path } = path.into_inner();
    let name = normalise(&path)?;
    let job = find(&state, &caller, id).await?;
    if job.operation != RUN_SCRIPT {
        return Err(ApiError::new(Code::NotAnUpload, format!("job {} is a {} job", job.id, job.operation)));
    }
    let (blobs, workspace) = (uploads.blobs.clone(), uploads.workspace.clone());
    let holds = {
        let blobs = blobs.clone();
        web::block(move || blobs.holds(id)).await.map_err(internal)?.map_err(internal)?
    };
    if job.cleaned_at.is_some() || !holds {
        return Err(ApiError::new(Code::ResultCleaned, format!("job {}'s files are gone", job.id)));
    }
    // The working directory of its latest run on this host when there is one, else the
    // upload; never through a link.
    let runs = workspace.job_dir(id);
    let work = workspace.run_dir(id, job.attempts.max(1)).join("work").join(&name);
    let wanted = name.clone();
    let opened = web::block(move || match open_inside(&runs, &work) {
        Ok(file) => Blob::file(file),
        Err(_) => blobs.open_input(id, &wanted),
    })
    .await
    .map_err(internal)?;
    let blob = opened.map_err(|_| ApiError::new(Code::FileNotFound, format!("no file {name:?} in job {id}")))?;
    let range = req.headers().get(header::RANGE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    stream_blob(blob, range, "application/octet-stream", None).await
}

/// A blob as the response body, whole or the one range asked (`bytes=a-b`, `a-`, `-n`),
/// read a piece at a time on a blocking thread.
pub(super) async fn stream_blob(
    blob: Blob,
    range: Option<String>,
    content_type: &str,
    disposition: Option<String>,
) -> Result<HttpResponse, ApiError> {
    let len = blob.len;
    let (start, end, partial) = match range.as_deref().map(|range| parse_range(range, len)) {
        None | Some(Ok(None)) => (0, len, false),
        Some(Ok(Some((start, end)))) => (start, end, true),
        Some(Err(())) => {
            let detail = format!("the file has {len} bytes");
            return Err(ApiError::new(Code::RangeNotSatisfiable, detail));
        }
    };
    let mut reader = blob.reader;
    let reader = web::block(move || reader.seek(SeekFrom::Start(start)).map(|_| reader))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    let body = futures_util::stream::try_unfold((reader, end - start), |(mut reader, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let want = left.min(PIECE) as usize;
        let (reader, piece) = web::block(move || {
            let mut piece = vec![0; want];
            let got = reader.read(&mut piece)?;
            piece.truncate(got);
            Ok::<_, std::io::Error>((reader, piece))
        })
        .await
        .map_err(std::io::Error::other)??;
        if piece.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file shrank while sent"));
        }
        let left = left - piece.len() as u64;
        Ok(Some((actix_web::web::Bytes::from(piece), (reader, left))))
    });
    let mut response = match partial {
        true => HttpResponse::PartialContent(),
        false => HttpResponse::Ok(),
    };
    response.content_type(content_type.to_owned()).insert_header((header::ACCEPT_RANGES, "bytes"));
    if partial {
        response.insert_header((header::CONTENT_RANGE, format!("bytes {start}-{}/{len}", end.saturating_sub(1))));
    }
    if let Some(disposition) = disposition {
        response.insert_header((header::CONTENT_DISPOSITION, disposition));
    }
    Ok(response.body(actix_web::body::SizedStream::new(end - start, Box::pin(body))))
}

/// Bytes read per piece of a response body.
const PIECE: u64 = 64 * 1024;

/// One byte range of `len`: `Ok(None)` for a header this ignores (several ranges, another
/// unit: the whole file is sent), `Err` for a range outside the file.
fn parse_range(header: &str, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.trim().strip_prefix("bytes=") else { return Ok(None) };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.split_once('-') else { return Ok(None) };
    let number = |text: &str| text.trim().parse::<u64>().map_err(|_| ());
    let (start, end) = match (first.trim(), last.trim()) {
        ("", "") => return Ok(None),
        ("", suffix) => {
            let suffix = number(suffix)?;
            if suffix == 0 {
                return Err(());
            }
            (len.saturating_sub(suffix), len)
        }
        (start, "") => (number(start)?, len),
        (start, end) => (number(start)?, number(end)?.saturating_add(1).min(len)),
    };
    if start >= len || start >= end {
        return Err(());
    }
    Ok(Some((start, end)))
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(parse_range("bytes=0-9", 100), Ok(Some((0, 10))));
        assert_eq!(parse_range("bytes=90-", 100), Ok(Some((90, 100))));
        assert_eq!(parse_range("bytes=-10", 100), Ok(Some((90, 100))));
        assert_eq!(parse_range("bytes=95-200", 100), Ok(Some((95, 100))));
        assert_eq!(parse_range("bytes=100-", 100), Err(()));
        assert_eq!(parse_range("bytes=5-2", 100), Err(()));
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(parse_range("items=0-1", 100), Ok(None));
        assert_eq!(parse_range("bytes=x-1", 100), Err(()));
    }
}
