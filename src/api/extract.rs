//! Extractor settings: body limits, and JSON, query and path errors turned into problems.

use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{web, Error, HttpRequest};

use super::body_guard::is_body_timeout;
use super::error::{ApiError, Code};

pub fn json_config(max_body_bytes: usize) -> web::JsonConfig {
    web::JsonConfig::default().limit(max_body_bytes).error_handler(json_error)
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default()
        .error_handler(|err: QueryPayloadError, _req| ApiError::new(Code::InvalidQuery, err.to_string()).into())
}

pub fn path_config() -> web::PathConfig {
    web::PathConfig::default()
        .error_handler(|err: PathError, _req| ApiError::new(Code::InvalidJobId, err.to_string()).into())
}

fn json_error(err: JsonPayloadError, _req: &HttpRequest) -> Error {
    let api_error = match &err {
        JsonPayloadError::OverflowKnownLength { .. } | JsonPayloadError::Overflow { .. } => {
            ApiError::new(Code::PayloadTooLarge, err.to_string())
        }
        JsonPayloadError::Payload(payload) if is_body_timeout(payload) => {
            ApiError::new(Code::RequestTimeout, "the request body did not arrive in time")
        }
        JsonPayloadError::ContentType => {
            ApiError::new(Code::UnsupportedMediaType, "Content-Type must be application/json")
        }
        JsonPayloadError::Deserialize(inner) if inner.is_data() => {
            ApiError::new(Code::InvalidRequest, inner.to_string())
        }
        JsonPayloadError::Deserialize(inner) => ApiError::new(Code::InvalidJson, inner.to_string()),
        _ => ApiError::new(Code::InvalidJson, err.to_string()),
    };
    api_error.into()
}
