//! RFC 9457 problem+json: one table of stable error codes, and the one mapping from
//! internal errors to HTTP.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use tracing::error;

use crate::ops::Rejection;
use crate::store::StoreError;

/// Declares [`Code`], its table (code, HTTP status, title) and [`Code::ALL`] from one list,
/// so no code can be missing from the table or from the uniqueness test.
macro_rules! codes {
    ($($variant:ident => ($code:literal, $status:ident, $title:literal),)*) => {
        /// Every error the API returns. The `code` string is stable: clients may match on it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            /// Every code, in declaration order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// (code, HTTP status, title): the whole table.
            fn describe(self) -> (&'static str, StatusCode, &'static str) {
                match self {
                    $(Code::$variant => ($code, StatusCode::$status, $title),)*
                }
            }
        }
    };
}

codes! {
    InvalidJson => ("invalid_json", BAD_REQUEST, "Request body is not valid JSON"),
    InvalidRequest => ("invalid_request", UNPROCESSABLE_ENTITY, "Request body has the wrong shape"),
    InvalidQuery => ("invalid_query", BAD_REQUEST, "Query string is invalid"),
    InvalidJobId => ("invalid_job_id", BAD_REQUEST, "Job id is not a UUID"),
    NulCharacter => ("nul_character", UNPROCESSABLE_ENTITY, "Text may not contain the NUL character"),
    UnsupportedMediaType => ("unsupported_media_type", UNSUPPORTED_MEDIA_TYPE, "Send application/json"),
    UnsupportedEncoding => ("unsupported_encoding", UNSUPPORTED_MEDIA_TYPE, "Send the body without a Content-Encoding"),
    PayloadTooLarge => ("payload_too_large", PAYLOAD_TOO_LARGE, "Request body is too large"),
    RequestTimeout => ("request_timeout", REQUEST_TIMEOUT, "The request body arrived too slowly"),
    UnknownOperation => ("unknown_operation", UNPROCESSABLE_ENTITY, "Unknown operation"),
    InvalidPayload => ("invalid_payload", UNPROCESSABLE_ENTITY, "Payload is invalid for this operation"),
    OperationUnavailable => ("operation_unavailable", UNPROCESSABLE_ENTITY, "This server cannot run this operation"),
    InvalidSetName => ("invalid_set_name", BAD_REQUEST, "Embedding set name is invalid"),
    SetNotFound => ("set_not_found", NOT_FOUND, "Embedding set not found"),
    ItemNotFound => ("item_not_found", NOT_FOUND, "No such item in the embedding set"),
    InvalidLabels => ("invalid_labels", UNPROCESSABLE_ENTITY, "Labels cannot be stored as given"),
    InvalidQueue => ("invalid_queue", UNPROCESSABLE_ENTITY, "Queue name is invalid"),
    UnknownQueue => ("unknown_queue", UNPROCESSABLE_ENTITY, "No job queue of this name"),
    ParentNotFound => ("parent_not_found", UNPROCESSABLE_ENTITY, "Parent job does not exist"),
    ParentIsCoordinator => ("parent_is_coordinator", CONFLICT, "Parent job is a coordinator and takes no other children"),
    JobNotFound => ("job_not_found", NOT_FOUND, "Job not found"),
    Unauthorized => ("unauthorized", UNAUTHORIZED, "A valid bearer token is required"),
    TokenInQuery => ("token_in_query", BAD_REQUEST, "Send the token in the Authorization header, not the URL"),
    Forbidden => ("forbidden", FORBIDDEN, "This token's role may not use this endpoint"),
    ReadOnlyToken => ("read_only_token", FORBIDDEN, "This token is read-only"),
    RoomForbidden => ("room_forbidden", FORBIDDEN, "This token may not write to this room"),
    InvalidRoomId => ("invalid_room_id", BAD_REQUEST, "Room id is invalid"),
    RoomMismatch => ("room_mismatch", UNPROCESSABLE_ENTITY, "A child job belongs to its parent's room"),
    InvalidToken => ("invalid_token_request", UNPROCESSABLE_ENTITY, "The token cannot be made as asked"),
    TokenNotFound => ("token_not_found", NOT_FOUND, "Token not found"),
    InvalidCategory => ("invalid_category", BAD_REQUEST, "This category is not allowed"),
    InvalidTypeName => ("invalid_type_name", UNPROCESSABLE_ENTITY, "Type name is invalid"),
    InvalidSchema => ("invalid_schema", UNPROCESSABLE_ENTITY, "Not a usable JSON Schema (draft 2020-12)"),
    SchemaConflict => ("schema_conflict", CONFLICT, "The type is registered with another schema"),
    UnknownType => ("unknown_type", UNPROCESSABLE_ENTITY, "No active type of this name"),
    NoWorker => ("no_worker", CONFLICT, "No live worker serves this type"),
    WorkerNotFound => ("worker_not_found", NOT_FOUND, "Worker not found"),
    WorkerForbidden => ("worker_forbidden", FORBIDDEN, "This worker was registered by another token"),
    WorkerGone => ("worker_gone", GONE, "This worker is gone; register again"),
    TaskNotFound => ("task_not_found", NOT_FOUND, "Task not found"),
    TaskForbidden => ("task_forbidden", FORBIDDEN, "This task is held by another worker"),
    TaskCancelled => ("task_cancelled", CONFLICT, "The task was cancelled; stop working on it"),
    InvalidMultipart => ("invalid_multipart", BAD_REQUEST, "Not a readable multipart/form-data upload"),
    UnknownService => ("unknown_service", UNPROCESSABLE_ENTITY, "No service of this name takes uploads"),
    InvalidFileName => ("invalid_file_name", BAD_REQUEST, "File name is not allowed"),
    PathTraversal => ("path_traversal", BAD_REQUEST, "File name climbs out of the upload"),
    AbsolutePath => ("absolute_path", BAD_REQUEST, "File name is an absolute path"),
    DuplicateFile => ("duplicate_file", BAD_REQUEST, "Two files of the upload have the same name"),
    TooManyFiles => ("too_many_files", PAYLOAD_TOO_LARGE, "The upload holds more files than its service takes"),
    FileTooLarge => ("file_too_large", PAYLOAD_TOO_LARGE, "A file is larger than its service takes"),
    UploadTooLarge => ("upload_too_large", PAYLOAD_TOO_LARGE, "The upload is larger than its service takes"),
    MissingScript => ("missing_script", UNPROCESSABLE_ENTITY, "The upload has no run.sh"),
    NotAnUpload => ("not_an_upload", CONFLICT, "This job was not made by an upload; it has no files"),
    NoResult => ("no_result", CONFLICT, "This job has no result archive"),
    ResultCleaned => ("result_cleaned", GONE, "This job's files were removed after its retention period"),
    FileNotFound => ("file_not_found", NOT_FOUND, "No such file in the job"),
    RangeNotSatisfiable => ("range_not_satisfiable", RANGE_NOT_SATISFIABLE, "The range is outside the file"),
    InvalidScheduleId => ("invalid_schedule_id", BAD_REQUEST, "Schedule id is not a UUID"),
    ScheduleNotFound => ("schedule_not_found", NOT_FOUND, "Schedule not found"),
    ScheduleNameTaken => ("schedule_name_taken", CONFLICT, "A schedule of this name exists in the room"),
    InvalidSchedule => ("invalid_schedule", UNPROCESSABLE_ENTITY, "The schedule's times cannot be used"),
    ScheduleChanged => ("schedule_changed", CONFLICT, "The schedule changed meanwhile; read it and try again"),
    QueueNotFound => ("queue_not_found", NOT_FOUND, "No queue of this name"),
    InvalidConcurrencyKey => ("invalid_concurrency_key", UNPROCESSABLE_ENTITY, "The job's concurrency key cannot be read"),
    InvalidDependency => ("invalid_dependency", UNPROCESSABLE_ENTITY, "The job's dependencies cannot be used"),
    DependencyNotFound => ("dependency_not_found", NOT_FOUND, "A dependency is not a job of this room"),
    DependencyFailed => ("dependency_failed", CONFLICT, "A dependency has already failed"),
    InvalidPriority => ("invalid_priority", UNPROCESSABLE_ENTITY, "Priority must be 0 (first) to 9 (last)"),
    MetricsUnavailable => ("metrics_unavailable", SERVICE_UNAVAILABLE, "This process records no metrics"),
    NotFound => ("not_found", NOT_FOUND, "No such endpoint"),
    MethodNotAllowed => ("method_not_allowed", METHOD_NOT_ALLOWED, "Method not allowed here"),
    InvalidTransition => ("invalid_transition", CONFLICT, "The job cannot make this transition"),
    IdempotencyConflict => ("idempotency_conflict", CONFLICT, "Idempotency key already used for another job"),
    NotReady => ("not_ready", SERVICE_UNAVAILABLE, "A dependency is unavailable"),
    StoreUnavailable => ("store_unavailable", SERVICE_UNAVAILABLE, "The database cannot be reached; try again shortly"),
    Internal => ("internal", INTERNAL_SERVER_ERROR, "Internal error"),
}

impl Code {
    pub fn as_str(self) -> &'static str {
        self.describe().0
    }

    pub fn status(self) -> StatusCode {
        self.describe().1
    }

    pub fn title(self) -> &'static str {
        self.describe().2
    }
}

/// `Retry-After` of a 503 for an unreachable store.
pub const STORE_RETRY_AFTER_SECONDS: u32 = 2;

/// Longest `detail` sent back: an error about a huge input must not echo it.
const MAX_DETAIL: usize = 1024;

/// `detail` cut to [`MAX_DETAIL`] bytes on a character boundary, marked when cut.
fn capped(mut detail: String) -> String {
    if detail.len() > MAX_DETAIL {
        let mut end = MAX_DETAIL;
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
        detail.push_str("… (truncated)");
    }
    detail
}

/// Marks a response that found the store unreachable, for [`super::outage`].
#[derive(Debug, Clone, Copy)]
pub struct StoreWentAway;

/// An error on its way to the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {detail}")]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    /// JSON pointer to the part of the request at fault (`/jobs/3` in a batch).
    pub pointer: Option<String>,
    /// The methods the resource takes, for a 405's `Allow` header.
    pub allow: Option<&'static str>,
    /// Seconds before trying again, for a 503's `Retry-After` header.
    pub retry_after: Option<u32>,
    /// A 401's `WWW-Authenticate` challenge.
    pub challenge: Option<&'static str>,
}

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        ApiError { code, detail: capped(detail.into()), pointer: None, allow: None, retry_after: None, challenge: None }
    }

    /// The same error, located at `prefix` in the request body (before any pointer it had:
    /// `/jobs/3` then `/payload/a` gives `/jobs/3/payload/a`).
    pub fn at(self, prefix: impl Into<String>) -> Self {
        let pointer = format!("{}{}", prefix.into(), self.pointer.as_deref().unwrap_or(""));
        let detail = match &self.pointer {
            Some(inner) => self.detail.strip_prefix(&format!("{inner}: ")).unwrap_or(&self.detail).to_owned(),
            None => self.detail.clone(),
        };
        ApiError { detail: capped(format!("{pointer}: {detail}")), pointer: Some(pointer), ..self }
    }

    /// A 401 for a request without a token (RFC 6750 §3: no error code).
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        ApiError { challenge: Some(r#"Bearer realm="yardmaster""#), ..ApiError::new(Code::Unauthorized, detail) }
    }

    /// A 401 for a token that is malformed, unknown or revoked.
    pub fn invalid_token(detail: impl Into<String>) -> Self {
        let challenge = r#"Bearer realm="yardmaster", error="invalid_token""#;
        ApiError { challenge: Some(challenge), ..ApiError::new(Code::Unauthorized, detail) }
    }

    /// The body this error answers with; also what a batch answers for one item.
    pub fn problem(&self) -> Problem<'_> {
        let (code, status, title) = self.code.describe();
        Problem {
            kind: format!("urn:yardmaster:problem:{code}"),
            title,
            status: status.as_u16(),
            detail: &self.detail,
            code,
            pointer: self.pointer.as_deref(),
        }
    }

    /// A 405 naming the methods the resource takes.
    pub fn method_not_allowed(allow: &'static str) -> Self {
        ApiError { allow: Some(allow), ..ApiError::new(Code::MethodNotAllowed, format!("this endpoint takes {allow}")) }
    }
}

/// The body of every error response (RFC 9457).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem<'a> {
    /// `urn:yardmaster:problem:CODE`.
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    /// Stable: clients may match on it.
    code: &'a str,
    /// A JSON pointer to the part of the request at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pointer: Option<&'a str>,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let problem = self.problem();
        let mut response = HttpResponse::build(self.code.status());
        response.insert_header((header::CONTENT_TYPE, "application/problem+json"));
        if let Some(allow) = self.allow {
            response.insert_header((header::ALLOW, allow));
        }
        if let Some(challenge) = self.challenge {
            response.insert_header((header::WWW_AUTHENTICATE, challenge));
        }
        if let Some(seconds) = self.retry_after {
            response.insert_header((header::RETRY_AFTER, seconds.to_string()));
        }
        let mut response = response.json(problem);
        if self.code == Code::StoreUnavailable {
            response.extensions_mut().insert(StoreWentAway);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(id) => ApiError::new(Code::JobNotFound, format!("no job with id {id}")),
            StoreError::InvalidTransition(err) => ApiError::new(Code::InvalidTransition, err.to_string()),
            StoreError::IdempotencyConflict(_) => ApiError::new(Code::IdempotencyConflict, err.to_string()),
            StoreError::DependencyNotFound(_) => ApiError::new(Code::DependencyNotFound, err.to_string()),
            StoreError::DependencyFailed { .. } => ApiError::new(Code::DependencyFailed, err.to_string()),
            err if err.is_unavailable() => {
                tracing::warn!(error = %err, "store unavailable");
                ApiError {
                    retry_after: Some(STORE_RETRY_AFTER_SECONDS),
                    ..ApiError::new(Code::StoreUnavailable, "the database cannot be reached")
                }
            }
            StoreError::Database(_) | StoreError::Corrupt(_) | StoreError::Unavailable(_) => {
                error!(error = %err, "store error");
                ApiError::new(Code::Internal, "the store failed; the request may be retried")
            }
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> Self {
        let code = match rejection {
            Rejection::UnknownOperation(_) => Code::UnknownOperation,
            Rejection::InvalidPayload { .. } => Code::InvalidPayload,
            Rejection::Unavailable { .. } => Code::OperationUnavailable,
        };
        ApiError::new(code, rejection.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn codes_are_unique() {
        let names: HashSet<_> = Code::ALL.iter().map(|code| code.as_str()).collect();
        assert_eq!(names.len(), Code::ALL.len());
        assert!(Code::ALL.contains(&Code::Internal) && Code::ALL.contains(&Code::InvalidJson));
    }

    #[test]
    fn details_are_capped_and_pointers_nest() {
        let huge = ApiError::new(Code::InvalidPayload, "x".repeat(5_000_000));
        assert!(huge.detail.len() < 2 * MAX_DETAIL, "{}", huge.detail.len());
        let nested = ApiError::new(Code::NulCharacter, "a NUL").at("/payload/a").at("/jobs/3");
        assert_eq!(nested.pointer.as_deref(), Some("/jobs/3/payload/a"));
        assert_eq!(nested.detail, "/jobs/3/payload/a: a NUL");
    }

    #[test]
    fn an_operation_left_out_of_the_build_is_unavailable_not_unknown() {
        let registry = crate::ops::OperationRegistry::builtin().without("compute_embeddings", "built without libtorch");
        let refused = ApiError::from(registry.validate("compute_embeddings", &serde_json::json!({})).unwrap_err());
        assert_eq!((refused.code, refused.code.status().as_u16()), (Code::OperationUnavailable, 422));
        assert!(refused.detail.contains("built without libtorch"), "{}", refused.detail);
        // An operation the registry has is never shadowed by `without`.
        let registry = crate::ops::OperationRegistry::builtin().without("ping", "never");
        assert_eq!(registry.validate("ping", &serde_json::json!({})), Ok(()));
    }
}
