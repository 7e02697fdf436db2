//! `/schedules`: create, list, read, change (pause and resume too), delete and run now a
//! recurring submission, and read its log and its jobs. Members manage their rooms'
//! schedules, admins also `@global`'s; another room's schedule is answered as a missing one.

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use chrono::TimeDelta;
use serde_json::Value;
use uuid::Uuid;

use super::bodies::{
    check_max_catch_up, check_name, invalid, limit_of, nul_in, object, CreateSchedule, ListQuery, LogQuery,
    PatchSchedule, SchedulePage, ScheduleView, TickJob, TickJobPage, TickPage, TickView,
};
use super::book::NameTaken;
use super::entity::schedule;
use super::service::{spec_of, Schedules};
use super::spec::Spec;
use crate::auth::Caller;
use crate::domain::{Job, RoomId};
use crate::http::{room_id, ApiError, AppState, Code, Problem};
use crate::store::clock;

/// How far back `start_at` may be.
const MAX_START_BACK_DAYS: i64 = 366;

fn not_found(id: &str) -> ApiError {
    ApiError::new(Code::ScheduleNotFound, format!("no schedule with id {id}"))
}

/// A schedule the caller may see; another room's is answered as a missing one.
async fn find(schedules: &Schedules, caller: &Caller, id: &str) -> Result<schedule::Model, ApiError> {
    let parsed =
        Uuid::parse_str(id).map_err(|_| ApiError::new(Code::InvalidScheduleId, format!("{id:?} is not a UUID")))?;
    let found = schedules.book.get(parsed).await.map_err(crate::store::StoreError::from)?;
    found.filter(|s| caller.can_read(&s.room)).ok_or_else(|| not_found(id))
}

async fn find_writable(schedules: &Schedules, caller: &Caller, id: &str) -> Result<schedule::Model, ApiError> {
    let s = find(schedules, caller, id).await?;
    caller.may_write(&s.room)?;
    Ok(s)
}

/// Creates a schedule.
#[utoipa::path(
    post, path = "/schedules", tag = "schedules", operation_id = "create_schedule",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "Created", body = ScheduleView, headers(("Location" = String, description = "The schedule's URL"))),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`schedule_name_taken`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schedule` (cron, timezone, every_seconds), `invalid_request`, `nul_character`, \
            and the problems of `POST /jobs` for `job`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    schedules: web::Data<Schedules>,
    caller: Caller,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let body: CreateSchedule = object(body.into_inner())?;
    nul_in(&[
        ("/name", Some(&body.name)),
        ("/room", body.room.as_deref()),
        ("/cron", body.cron.as_deref()),
        ("/timezone", body.timezone.as_deref()),
    ])?;
    check_name(&body.name)?;
    let room = match body.room.as_deref() {
        Some(room) => room_id(room).map_err(|err| err.at("/room"))?,
        None => caller.default_room(),
    };
    caller.may_write(room.as_str()).map_err(|err| err.at("/room"))?;
    let spec = Spec::parse(body.cron.as_deref(), body.every_seconds, body.timezone.as_deref()).map_err(invalid)?;
    let max_catch_up = check_max_catch_up(body.max_catch_up)?;
    let mut new = schedules.check_job(&body.job, &room)?;
    schedules.admit_at_creation(&mut new).await?;
    let now = clock::now();
    let start = match body.start_at {
        Some(start) if start < now - TimeDelta::days(MAX_START_BACK_DAYS) => {
            let detail = format!("start_at may be at most {MAX_START_BACK_DAYS} days back");
            return Err(ApiError::new(Code::InvalidSchedule, detail).at("/start_at"));
        }
        Some(start) => start,
        None => now,
    };
    let Some(first) = spec.next_after(start - TimeDelta::milliseconds(1)) else {
        return Err(ApiError::new(Code::InvalidSchedule, "this schedule never fires after start_at").at("/cron"));
    };
    let name = body.name.clone();
    let made = schedule::Made {
        room: room.as_str().to_owned(),
        name: body.name,
        cron: body.cron.map(|cron| cron.trim().to_owned()),
        every_seconds: body.every_seconds,
        timezone: spec.zone().name().to_owned(),
        job: body.job,
        overlap: body.overlap.unwrap_or_default(),
        catch_up: body.catch_up.unwrap_or_default(),
        max_catch_up,
        paused: body.paused.unwrap_or(false),
        first,
        source: "api",
    };
    let row = schedule::Model::made(made, now);
    match schedules.book.insert(row).await.map_err(crate::store::StoreError::from)? {
        Ok(row) => {
            schedules.bell.notify_one();
            tracing::info!(schedule = %row.id, name = %row.name, room = %row.room, user = %caller.identity().user, "schedule created");
            let location = format!("/schedules/{}", row.id);
            Ok(HttpResponse::Created().insert_header((header::LOCATION, location)).json(ScheduleView::from(row)))
        }
        Err(NameTaken) => {
            let detail = format!("room {:?} has a schedule named {name:?}", room.as_str());
            Err(ApiError::new(Code::ScheduleNameTaken, detail).at("/name"))
        }
    }
}

/// The schedules the caller can see, oldest first.
#[utoipa::path(
    get, path = "/schedules", tag = "schedules", operation_id = "list_schedules",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of schedules", body = SchedulePage),
        (status = 400, description = "`invalid_query`, `invalid_room_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`: the token has no grant for `room`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    schedules: web::Data<Schedules>,
    caller: Caller,
    query: web::Query<ListQuery>,
) -> Result<web::Json<SchedulePage>, ApiError> {
    let query = query.into_inner();
    let limit = limit_of(query.limit, 50, 200)?;
    let rooms = match query.room.as_deref() {
        Some(room) => {
            let room = room_id(room)?;
            if !caller.can_read(room.as_str()) {
                let detail = format!("room {:?}: this token has no grant for it", room.as_str());
                return Err(ApiError::new(Code::RoomForbidden, detail).at("/room"));
            }
            Some(vec![room.as_str().to_owned()])
        }
        None => caller.visible_rooms(),
    };
    let mut page =
        schedules.book.list(rooms.as_deref(), query.cursor, limit + 1).await.map_err(crate::store::StoreError::from)?;
    let more = page.len() as u64 > limit;
    page.truncate(limit as usize);
    let next_cursor = more.then(|| page.last().map(|s| s.id)).flatten();
    Ok(web::Json(SchedulePage { schedules: page.into_iter().map(ScheduleView::from).collect(), next_cursor }))
}

/// A schedule.
#[utoipa::path(
    get, path = "/schedules/{id}", tag = "schedules", operation_id = "get_schedule",
    params(("id" = Uuid, Path, description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 400, description = "`invalid_schedule_id`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    schedules: web::Data<Schedules>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<web::Json<ScheduleView>, ApiError> {
    Ok(web::Json(find(&schedules, &caller, &id).await?.into()))
}

/// Changes a schedule: its times, job, policies, name, or `paused`.
#[utoipa::path(
    patch, path = "/schedules/{id}", tag = "schedules", operation_id = "update_schedule",
    params(("id" = Uuid, Path, description = "The schedule's id")),
    request_body = PatchSchedule,
    responses(
        (status = 200, description = "The schedule as changed", body = ScheduleView),
        (status = 400, description = "`invalid_schedule_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`schedule_name_taken`, `schedule_changed`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_schedule`, `invalid_request`, `nul_character`, and the problems of `POST /jobs` for `job`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update(
    schedules: web::Data<Schedules>,
    caller: Caller,
    id: web::Path<String>,
    body: web::Json<Value>,
) -> Result<web::Json<ScheduleView>, ApiError> {
    let patch: PatchSchedule = object(body.into_inner())?;
    nul_in(&[
        ("/name", patch.name.as_deref()),
        ("/cron", patch.cron.as_deref()),
        ("/timezone", patch.timezone.as_deref()),
    ])?;
    if let Some(name) = &patch.name {
        check_name(name)?;
    }
    if patch.cron.is_some() && patch.every_seconds.is_some() {
        return Err(ApiError::new(Code::InvalidSchedule, "give cron or every_seconds, not both").at("/every_seconds"));
    }
    // A change made meanwhile is read again and the patch applied to it, a few times.
    for _ in 0..3 {
        let s = find_writable(&schedules, &caller, &id).await?;
        let changed = patched(&schedules, s.clone(), &patch)?;
        let renamed = changed.name != s.name;
        let written = schedules.book.update(changed).await;
        match written {
            Ok(Some(row)) => {
                schedules.bell.notify_one();
                tracing::info!(schedule = %row.id, user = %caller.identity().user, paused = row.paused, "schedule changed");
                return Ok(web::Json(row.into()));
            }
            Ok(None) => continue,
            Err(_)
                if renamed
                    && schedules
                        .book
                        .find(&s.room, patch.name.as_deref().unwrap_or_default())
                        .await
                        .ok()
                        .flatten()
                        .is_some() =>
            {
                let detail =
                    format!("room {:?} has a schedule named {:?}", s.room, patch.name.as_deref().unwrap_or_default());
                return Err(ApiError::new(Code::ScheduleNameTaken, detail).at("/name"));
            }
            Err(err) => return Err(crate::store::StoreError::from(err).into()),
        }
    }
    Err(ApiError::new(Code::ScheduleChanged, format!("schedule {} kept changing; read it and try again", id.as_str())))
}

/// `s` with `patch` applied; new times or a resume move the next tick to the first after now.
fn patched(schedules: &Schedules, mut s: schedule::Model, patch: &PatchSchedule) -> Result<schedule::Model, ApiError> {
    let was_paused = s.paused;
    let times = patch.cron.is_some() || patch.every_seconds.is_some() || patch.timezone.is_some();
    if let Some(cron) = &patch.cron {
        s.cron = Some(cron.trim().to_owned());
        s.every_seconds = None;
    }
    if let Some(every) = patch.every_seconds {
        s.every_seconds = Some(every);
        s.cron = None;
    }
    if let Some(timezone) = &patch.timezone {
        s.timezone = timezone.clone();
    }
    let spec = spec_of(&s).map_err(invalid)?;
    s.timezone = spec.zone().name().to_owned();
    if let Some(job) = &patch.job {
        let room = RoomId::parse(&s.room).map_err(|err| ApiError::new(Code::Internal, err))?;
        schedules.check_job(job, &room)?;
        s.job = job.clone();
    }
    if let Some(name) = &patch.name {
        s.name = name.clone();
    }
    if let Some(overlap) = patch.overlap {
        s.overlap = overlap.as_str().to_owned();
    }
    if let Some(catch_up) = patch.catch_up {
        s.catch_up = catch_up.as_str().to_owned();
    }
    if patch.max_catch_up.is_some() {
        s.max_catch_up = check_max_catch_up(patch.max_catch_up)? as i32;
    }
    if let Some(paused) = patch.paused {
        s.paused = paused;
    }
    if times || (was_paused && !s.paused) {
        let now = clock::now();
        s.next_fire_at = spec
            .next_after(now)
            .ok_or_else(|| ApiError::new(Code::InvalidSchedule, "this schedule never fires again").at("/cron"))?;
    }
    Ok(s)
}

/// Deletes a schedule and its log (its jobs stay).
#[utoipa::path(
    delete, path = "/schedules/{id}", tag = "schedules", operation_id = "delete_schedule",
    params(("id" = Uuid, Path, description = "The schedule's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_schedule_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete(
    schedules: web::Data<Schedules>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = find_writable(&schedules, &caller, &id).await?;
    if !schedules.book.delete(s.id).await.map_err(crate::store::StoreError::from)? {
        return Err(not_found(&id));
    }
    tracing::info!(schedule = %s.id, name = %s.name, user = %caller.identity().user, "schedule deleted");
    Ok(HttpResponse::NoContent().finish())
}

/// Submits the schedule's job now, outside its ticks (the overlap policy is not asked);
/// it becomes the schedule's last job.
#[utoipa::path(
    post, path = "/schedules/{id}/run", tag = "schedules", operation_id = "run_schedule",
    params(("id" = Uuid, Path, description = "The schedule's id")),
    responses(
        (status = 201, description = "The job submitted", body = Job, headers(("Location" = String, description = "The job's URL"))),
        (status = 400, description = "`invalid_schedule_id`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`room_forbidden`, `read_only_token`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`no_worker`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The problems of `POST /jobs`: the job is no longer valid", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_now(
    schedules: web::Data<Schedules>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let s = find_writable(&schedules, &caller, &id).await?;
    let job = schedules.run_now(&s).await?;
    tracing::info!(schedule = %s.id, job_id = %job.id, user = %caller.identity().user, "schedule run now");
    let location = format!("/jobs/{}", job.id);
    Ok(HttpResponse::Created().insert_header((header::LOCATION, location)).json(job))
}

/// A schedule's log, newest first: every decided tick.
#[utoipa::path(
    get, path = "/schedules/{id}/ticks", tag = "schedules", operation_id = "list_schedule_ticks",
    params(("id" = Uuid, Path, description = "The schedule's id"), LogQuery),
    responses(
        (status = 200, description = "A page of ticks", body = TickPage),
        (status = 400, description = "`invalid_schedule_id`, `invalid_query`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn ticks(
    schedules: web::Data<Schedules>,
    caller: Caller,
    id: web::Path<String>,
    query: web::Query<LogQuery>,
) -> Result<web::Json<TickPage>, ApiError> {
    let s = find(&schedules, &caller, &id).await?;
    let limit = limit_of(query.limit, 50, 100)?;
    let ticks = schedules.book.ticks(s.id, query.before, false, limit).await.map_err(crate::store::StoreError::from)?;
    let next_before = (ticks.len() as u64 == limit).then(|| ticks.last().map(|tick| tick.tick_at)).flatten();
    Ok(web::Json(TickPage { ticks: ticks.into_iter().map(TickView::from).collect(), next_before }))
}

/// The jobs a schedule made, newest tick first.
#[utoipa::path(
    get, path = "/schedules/{id}/jobs", tag = "schedules", operation_id = "list_schedule_jobs",
    params(("id" = Uuid, Path, description = "The schedule's id"), LogQuery),
    responses(
        (status = 200, description = "A page of the schedule's jobs", body = TickJobPage),
        (status = 400, description = "`invalid_schedule_id`, `invalid_query`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`schedule_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn jobs(
    schedules: web::Data<Schedules>,
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
    query: web::Query<LogQuery>,
) -> Result<web::Json<TickJobPage>, ApiError> {
    let s = find(&schedules, &caller, &id).await?;
    let limit = limit_of(query.limit, 20, 100)?;
    let ticks = schedules.book.ticks(s.id, query.before, true, limit).await.map_err(crate::store::StoreError::from)?;
    let next_before = (ticks.len() as u64 == limit).then(|| ticks.last().map(|tick| tick.tick_at)).flatten();
    let mut jobs = Vec::with_capacity(ticks.len());
    for tick in ticks {
        let job = match tick.job_id {
            Some(job_id) => state.store.get(job_id).await?,
            None => None,
        };
        jobs.push(TickJob { tick_at: tick.tick_at, outcome: tick.outcome, job });
    }
    Ok(web::Json(TickJobPage { jobs, next_before }))
}
