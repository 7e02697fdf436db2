//! RFC 9457 problem+json: one table of stable error codes, and the one mapping from
//! internal errors to HTTP.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use tracing::error;

use crate::ops::Rejection;
use crate::store::StoreError;

/// Every error the API returns. The `code` string is stable: clients may match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidJson,
    InvalidRequest,
    InvalidQuery,
    InvalidJobId,
    UnsupportedMediaType,
    PayloadTooLarge,
    UnknownOperation,
    InvalidPayload,
    InvalidQueue,
    ParentNotFound,
    ParentIsCoordinator,
    JobNotFound,
    NotFound,
    MethodNotAllowed,
    InvalidTransition,
    IdempotencyConflict,
    NotReady,
    Internal,
}

impl Code {
    /// (code, HTTP status, title): the whole table.
    fn describe(self) -> (&'static str, StatusCode, &'static str) {
        use Code::*;
        match self {
            InvalidJson => ("invalid_json", StatusCode::BAD_REQUEST, "Request body is not valid JSON"),
            InvalidRequest => ("invalid_request", StatusCode::UNPROCESSABLE_ENTITY, "Request body has the wrong shape"),
            InvalidQuery => ("invalid_query", StatusCode::BAD_REQUEST, "Query string is invalid"),
            InvalidJobId => ("invalid_job_id", StatusCode::BAD_REQUEST, "Job id is not a UUID"),
            UnsupportedMediaType => {
                ("unsupported_media_type", StatusCode::UNSUPPORTED_MEDIA_TYPE, "Send application/json")
            }
            PayloadTooLarge => ("payload_too_large", StatusCode::PAYLOAD_TOO_LARGE, "Request body is too large"),
            UnknownOperation => ("unknown_operation", StatusCode::UNPROCESSABLE_ENTITY, "Unknown operation"),
            InvalidPayload => {
                ("invalid_payload", StatusCode::UNPROCESSABLE_ENTITY, "Payload is invalid for this operation")
            }
            InvalidQueue => ("invalid_queue", StatusCode::UNPROCESSABLE_ENTITY, "Queue name is invalid"),
            ParentNotFound => ("parent_not_found", StatusCode::UNPROCESSABLE_ENTITY, "Parent job does not exist"),
            ParentIsCoordinator => {
                ("parent_is_coordinator", StatusCode::CONFLICT, "Parent job fanned out and takes no other children")
            }
            JobNotFound => ("job_not_found", StatusCode::NOT_FOUND, "Job not found"),
            NotFound => ("not_found", StatusCode::NOT_FOUND, "No such endpoint"),
            MethodNotAllowed => ("method_not_allowed", StatusCode::METHOD_NOT_ALLOWED, "Method not allowed here"),
            InvalidTransition => ("invalid_transition", StatusCode::CONFLICT, "The job cannot make this transition"),
            IdempotencyConflict => {
                ("idempotency_conflict", StatusCode::CONFLICT, "Idempotency key already used for another job")
            }
            NotReady => ("not_ready", StatusCode::SERVICE_UNAVAILABLE, "A dependency is unavailable"),
            Internal => ("internal", StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.describe().0
    }

    pub fn status(self) -> StatusCode {
        self.describe().1
    }
}

/// An error on its way to the client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {detail}")]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    /// JSON pointer to the part of the request at fault (`/jobs/3` in a batch).
    pub pointer: Option<String>,
}

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        ApiError { code, detail: detail.into(), pointer: None }
    }

    /// The same error, located at `pointer` in the request body.
    pub fn at(self, pointer: String) -> Self {
        ApiError { detail: format!("{pointer}: {}", self.detail), pointer: Some(pointer), ..self }
    }
}

/// The body of every error response.
#[derive(Debug, Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pointer: Option<&'a str>,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let (code, status, title) = self.code.describe();
        let problem = Problem {
            kind: format!("urn:yardmaster:problem:{code}"),
            title,
            status: status.as_u16(),
            detail: &self.detail,
            code,
            pointer: self.pointer.as_deref(),
        };
        HttpResponse::build(status).insert_header((header::CONTENT_TYPE, "application/problem+json")).json(problem)
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(id) => ApiError::new(Code::JobNotFound, format!("no job with id {id}")),
            StoreError::InvalidTransition(err) => ApiError::new(Code::InvalidTransition, err.to_string()),
            StoreError::IdempotencyConflict(_) => ApiError::new(Code::IdempotencyConflict, err.to_string()),
            StoreError::Database(_) | StoreError::Corrupt(_) => {
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
        use Code::*;
        let all = [
            InvalidJson,
            InvalidRequest,
            InvalidQuery,
            InvalidJobId,
            UnsupportedMediaType,
            PayloadTooLarge,
            UnknownOperation,
            InvalidPayload,
            InvalidQueue,
            ParentNotFound,
            ParentIsCoordinator,
            JobNotFound,
            NotFound,
            MethodNotAllowed,
            InvalidTransition,
            IdempotencyConflict,
            NotReady,
            Internal,
        ];
        let names: HashSet<_> = all.iter().map(|code| code.as_str()).collect();
        assert_eq!(names.len(), all.len());
    }
}
