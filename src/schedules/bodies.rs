//! The bodies, queries and views of `/schedules`: what a client sends (a new schedule, a
//! change, the queries of the lists) and what it is answered (a schedule, a tick, a page).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::entity::{schedule, schedule_tick};
use super::spec::{CatchUp, Overlap, SpecError};
use crate::domain::Job;
use crate::http::{ApiError, Code};
use crate::jobs::SubmitRequest;

/// Longest schedule name.
const MAX_NAME: usize = 128;
/// Most ticks a catch-up of `all` fires.
pub const MAX_CATCH_UP: u32 = 1000;
/// Default of `max_catch_up`.
pub(super) const DEFAULT_MAX_CATCH_UP: u32 = 10;

/// Body of `POST /schedules`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "nightly", "cron": "0 2 * * *", "timezone": "Europe/Madrid",
    "job": {"operation": "sleep", "payload": {"seconds": 1}}}))]
pub struct CreateSchedule {
    /// Unique in its room: 1-128 characters, no control characters.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$")]
    pub name: String,
    /// Its room, and its jobs'; default: the caller's first room. `@global`: admins.
    #[serde(default)]
    #[schema(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 (seconds
    /// first) or an alias (`@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`,
    /// `@yearly`). Not with `every_seconds`.
    #[serde(default)]
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub cron: Option<String>,
    /// A period, at least 1 second, aligned to the epoch (60 fires on every whole minute).
    /// Not with `cron`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31622400)]
    pub every_seconds: Option<f64>,
    /// The IANA time zone a cron expression is read in; default `UTC`. A local time a
    /// daylight-saving change skips fires at the first instant after it, one it repeats
    /// fires once.
    #[serde(default)]
    #[schema(max_length = 64, pattern = r"^[^\u0000]*$")]
    pub timezone: Option<String>,
    /// The job each tick submits: a `POST /jobs` body without `room` (the schedule's),
    /// `idempotency_key` (each tick's is `schedule:{id}:{tick}`), `parent_job_id`, `run_at`,
    /// `delay_seconds` or `expires_at` (give `queue_timeout_seconds`).
    #[schema(value_type = SubmitRequest)]
    pub job: Value,
    /// While the last tick's job is unfinished: `skip` the tick (default), `allow` another
    /// run, or `cancel_previous` and submit.
    #[serde(default)]
    pub overlap: Option<Overlap>,
    /// After ticks passed with no scheduler running: fire the `last` one (default), `all`
    /// (up to `max_catch_up`, the latest), or `none` (only a tick at most
    /// `scheduler.misfire_grace_ms` late fires).
    #[serde(default)]
    pub catch_up: Option<CatchUp>,
    /// Most ticks a catch-up of `all` fires; default 10.
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_catch_up: Option<u32>,
    /// Made paused: no tick fires until it is resumed.
    #[serde(default)]
    pub paused: Option<bool>,
    /// The first tick is the first at or after this time; default now. One in the past
    /// (up to a year) makes its ticks since then due at once, as after downtime: the
    /// catch-up policy says which fire.
    #[serde(default)]
    pub start_at: Option<DateTime<Utc>>,
}

/// Body of `PATCH /schedules/{id}`: the fields to change. Giving `cron` drops
/// `every_seconds`, and the reverse; new times or a resume move the next tick to the first
/// after now.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"paused": true}))]
pub struct PatchSchedule {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$")]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub cron: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 31622400)]
    pub every_seconds: Option<f64>,
    #[serde(default)]
    #[schema(max_length = 64, pattern = r"^[^\u0000]*$")]
    pub timezone: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<SubmitRequest>)]
    pub job: Option<Value>,
    #[serde(default)]
    pub overlap: Option<Overlap>,
    #[serde(default)]
    pub catch_up: Option<CatchUp>,
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_catch_up: Option<u32>,
    #[serde(default)]
    pub paused: Option<bool>,
}

/// A schedule.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    pub id: Uuid,
    pub room: String,
    pub name: String,
    pub cron: Option<String>,
    pub every_seconds: Option<f64>,
    pub timezone: String,
    #[schema(value_type = Object)]
    pub job: Value,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub max_catch_up: u32,
    pub paused: bool,
    /// When the next tick fires; null while paused.
    pub next_fire_at: Option<DateTime<Utc>>,
    pub last_tick_at: Option<DateTime<Utc>>,
    /// The job of the last tick that fired.
    pub last_job_id: Option<Uuid>,
    /// `api`, or `config` for one declared under `[schedules.NAME]` (start-up sets it again).
    pub source: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<schedule::Model> for ScheduleView {
    fn from(s: schedule::Model) -> Self {
        ScheduleView {
            next_fire_at: (!s.paused).then_some(s.next_fire_at),
            overlap: Overlap::parse(&s.overlap).unwrap_or_default(),
            catch_up: CatchUp::parse(&s.catch_up).unwrap_or_default(),
            max_catch_up: s.max_catch_up.max(1) as u32,
            id: s.id,
            room: s.room,
            name: s.name,
            cron: s.cron,
            every_seconds: s.every_seconds,
            timezone: s.timezone,
            job: s.job,
            paused: s.paused,
            last_tick_at: s.last_tick_at,
            last_job_id: s.last_job_id,
            source: s.source,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SchedulePage {
    pub schedules: Vec<ScheduleView>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<Uuid>,
}

/// A decided tick: `firing` (its job being submitted), `fired`, `skipped` (overlap),
/// `missed` (catch-up; `missed` counts the ticks from this one on), `failed` (the job was
/// refused: `detail` says why) or `run_now`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TickView {
    pub tick_at: DateTime<Utc>,
    pub outcome: String,
    pub job_id: Option<Uuid>,
    pub missed: i64,
    pub detail: Option<String>,
    pub recorded_at: DateTime<Utc>,
}

impl From<schedule_tick::Model> for TickView {
    fn from(tick: schedule_tick::Model) -> Self {
        TickView {
            tick_at: tick.tick_at,
            outcome: tick.outcome,
            job_id: tick.job_id,
            missed: tick.missed,
            detail: tick.detail,
            recorded_at: tick.recorded_at,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TickPage {
    pub ticks: Vec<TickView>,
    /// Pass as `before` for the next page; null on the last.
    pub next_before: Option<DateTime<Utc>>,
}

/// A job of a schedule, with the tick that made it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TickJob {
    pub tick_at: DateTime<Utc>,
    /// `fired` or `run_now`.
    pub outcome: String,
    /// Null once the job was removed by retention.
    pub job: Option<Job>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TickJobPage {
    pub jobs: Vec<TickJob>,
    pub next_before: Option<DateTime<Utc>>,
}

/// Query of `GET /schedules`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this room's; default: every room the caller can see.
    #[param(pattern = r"^(@global|@internal|[^@:\u0000-\u001f\u007f-\u009f]{1,64})$")]
    pub room: Option<String>,
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// Query of a schedule's ticks and jobs.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Only ticks before this time (`next_before` of the previous page).
    pub before: Option<DateTime<Utc>>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
}

/// A body read as `T`, which must be a JSON object (serde would take an array for a struct).
pub(super) fn object<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    if !body.is_object() {
        return Err(ApiError::new(Code::InvalidRequest, "the body must be a JSON object"));
    }
    serde_json::from_value(body).map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()))
}

/// A page's `limit`: `default` when not given, refused outside 1-`max`.
pub(super) fn limit_of(asked: Option<u64>, default: u64, max: u64) -> Result<u64, ApiError> {
    match asked {
        None => Ok(default),
        Some(limit) if (1..=max).contains(&limit) => Ok(limit),
        Some(_) => Err(ApiError::new(Code::InvalidQuery, format!("limit must be between 1 and {max}"))),
    }
}

pub(super) fn invalid(err: SpecError) -> ApiError {
    ApiError::new(Code::InvalidSchedule, err.detail).at(err.pointer)
}

pub(super) fn check_name(name: &str) -> Result<(), ApiError> {
    if name.contains('\0') {
        return Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at("/name"));
    }
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        let detail = format!("name must be 1-{MAX_NAME} characters without control characters");
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/name"));
    }
    Ok(())
}

pub(super) fn check_max_catch_up(max: Option<u32>) -> Result<u32, ApiError> {
    let max = max.unwrap_or(DEFAULT_MAX_CATCH_UP);
    if !(1..=MAX_CATCH_UP).contains(&max) {
        let detail = format!("max_catch_up must be between 1 and {MAX_CATCH_UP}");
        return Err(ApiError::new(Code::InvalidRequest, detail).at("/max_catch_up"));
    }
    Ok(max)
}

pub(super) fn nul_in(texts: &[(&str, Option<&str>)]) -> Result<(), ApiError> {
    match texts.iter().find(|(_, text)| text.is_some_and(|text| text.contains('\0'))) {
        Some((pointer, _)) => {
            Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(*pointer))
        }
        None => Ok(()),
    }
}
