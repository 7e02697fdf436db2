//! The times of a submission: when a job may start (`run_at`, `delay_seconds`), when a job
//! not started expires (`expires_at`, `queue_timeout_seconds`), and numbers of seconds read
//! and bounded, each refused with the field that is wrong.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::http::{ApiError, Code};
use crate::store::clock;

/// A number of seconds a submission gave, read: finite, above 0, at most `most`.
pub(super) fn seconds(value: f64, most: f64, pointer: &str) -> Result<Duration, ApiError> {
    match value.is_finite() && value > 0.0 && value <= most {
        true => Ok(Duration::from_secs_f64(value)),
        false => {
            let detail = format!("must be a number of seconds above 0 and at most {most}");
            Err(ApiError::new(Code::InvalidRequest, detail).at(pointer))
        }
    }
}

/// When a job not started expires: `expires_at`, or `queue_timeout_seconds` after it may
/// start (`start`, else now). Both, or a time at or before the start, is refused.
pub(super) fn expiry(
    expires_at: Option<DateTime<Utc>>,
    queue_timeout: Option<f64>,
    start: Option<DateTime<Utc>>,
    horizon: Duration,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    let from = start.unwrap_or_else(clock::now);
    let at = match (expires_at, queue_timeout) {
        (Some(_), Some(_)) => {
            let detail = "give expires_at or queue_timeout_seconds, not both";
            return Err(ApiError::new(Code::InvalidRequest, detail).at("/queue_timeout_seconds"));
        }
        (None, None) => return Ok(None),
        (Some(at), None) => at,
        (None, Some(wait)) => from + to_chrono(seconds(wait, horizon.as_secs_f64(), "/queue_timeout_seconds")?),
    };
    if at <= from {
        let detail = match start {
            Some(_) => "must come after the job's run_at",
            None => "must be in the future",
        };
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/expires_at"));
    }
    Ok(Some(at))
}

fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

/// When a job may start: `run_at`, or `delay_seconds` from now; `None` for at once (a time
/// already past included, as in every peer). Both, or a start past `horizon`, is refused.
pub(super) fn start_after(
    run_at: Option<DateTime<Utc>>,
    delay_seconds: Option<f64>,
    horizon: Duration,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    let now = clock::now();
    let latest = now + to_chrono(horizon);
    let too_far = |pointer: &str| {
        let days = horizon.as_secs() / 86_400;
        let detail = format!("a job may start at most {days} days ahead (jobs.max_delay_days)");
        Err(ApiError::new(Code::InvalidRequest, detail).at(pointer))
    };
    let start = match (run_at, delay_seconds) {
        (Some(_), Some(_)) => {
            let detail = "give run_at or delay_seconds, not both";
            return Err(ApiError::new(Code::InvalidRequest, detail).at("/delay_seconds"));
        }
        (None, None) => return Ok(None),
        (Some(at), None) if at > latest => return too_far("/run_at"),
        (Some(at), None) => at,
        (None, Some(delay)) if !delay.is_finite() || delay < 0.0 => {
            let detail = "must be a number of seconds, 0 or more";
            return Err(ApiError::new(Code::InvalidRequest, detail).at("/delay_seconds"));
        }
        (None, Some(delay)) if delay > horizon.as_secs_f64() => return too_far("/delay_seconds"),
        (None, Some(delay)) => now + chrono::Duration::milliseconds((delay * 1000.0).round() as i64),
    };
    Ok((start > now).then_some(start))
}
