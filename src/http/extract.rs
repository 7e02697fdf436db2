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
        JsonPayloadError::OverflowKnownLength { length, limit } => ApiError::new(
            Code::PayloadTooLarge,
            format!("the body ({length} bytes) is larger than server.max_body_bytes allows ({limit} bytes)"),
        ),
        JsonPayloadError::Overflow { limit } => ApiError::new(
            Code::PayloadTooLarge,
            format!("the body is larger than server.max_body_bytes allows ({limit} bytes)"),
        ),
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

/// A room id from a request, or 400 `invalid_room_id`.
pub fn room_id(text: &str) -> Result<crate::domain::RoomId, ApiError> {
    crate::domain::RoomId::parse(text).map_err(|err| ApiError::new(Code::InvalidRoomId, err))
}

/// Reads an optional whole number written either way JSON allows (`7` or `7.0`: JSON Schema
/// counts both as integers), refusing fractions and anything out of `T`'s range.
pub fn whole_number<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::{Deserialize as _, Error as _};
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else { return Ok(None) };
    let whole = match (number.as_i64(), number.as_f64()) {
        (Some(whole), _) => whole,
        (None, Some(float)) if float.fract() == 0.0 && float.abs() < 9.0e15 => float as i64,
        _ => return Err(D::Error::custom(format!("{number} is not a whole number in range"))),
    };
    T::try_from(whole).map(Some).map_err(|_| D::Error::custom(format!("{whole} is out of range")))
}

/// A required whole number, read as [`whole_number`] reads one; `null` is refused.
pub fn required_whole_number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error as _;
    whole_number(deserializer)?.ok_or_else(|| D::Error::custom("a whole number is required, not null"))
}

/// The page size a list takes when its request names none.
pub const DEFAULT_PAGE: u64 = 50;

/// A list's `limit`: [`DEFAULT_PAGE`] (or `max`, if smaller) when absent, else 1 to `max`.
pub fn page_size(requested: Option<u64>, max: u64) -> Result<u64, ApiError> {
    match requested {
        None => Ok(DEFAULT_PAGE.min(max)),
        Some(limit) if (1..=max).contains(&limit) => Ok(limit),
        Some(_) => Err(ApiError::new(Code::InvalidQuery, format!("limit must be between 1 and {max}"))),
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct Limit {
        #[serde(default, deserialize_with = "super::whole_number")]
        limit: Option<u16>,
    }

    #[test]
    fn whole_numbers_are_read_either_way_and_fractions_refused() {
        let read = |json: &str| serde_json::from_str::<Limit>(json).map(|limit| limit.limit);
        assert_eq!(read(r#"{"limit": 7}"#).unwrap(), Some(7));
        assert_eq!(read(r#"{"limit": 7900.0}"#).unwrap(), Some(7900));
        assert_eq!(read(r#"{"limit": null}"#).unwrap(), None);
        assert_eq!(read("{}").unwrap(), None);
        for bad in
            [r#"{"limit": 7.5}"#, r#"{"limit": -1}"#, r#"{"limit": 70000}"#, r#"{"limit": "7"}"#, r#"{"limit": 1e300}"#]
        {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
