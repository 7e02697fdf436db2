//! `Schedules`, the capability's state in every process: the book of schedules, what a
//! tick's job is checked against (the submission rules of `POST /jobs`), the dispatcher
//! that commits and publishes it, and the bell that wakes this process's scheduler when a
//! schedule changes.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::book::ScheduleBook;
use super::entity::schedule;
use super::settings::SchedulerSettings;
use super::spec::{CatchUp, Policy, Spec};
use crate::dispatch::Dispatcher;
use crate::domain::{NewJob, RoomId};
use crate::http::{ApiError, Code};
use crate::jobs::settings::JobsSettings;
use crate::jobs::{admit_type, validate_submission, Submissions, SubmitRequest};
use crate::ops::OperationRegistry;
use crate::remote::Remote;
use crate::store::JobStore;

/// Fields of `POST /jobs` a schedule's job may not have: a tick sets its own key and time.
const NOT_IN_A_SCHEDULE: [(&str, &str); 6] = [
    ("idempotency_key", "each tick's job is keyed by its schedule and tick time"),
    ("parent_job_id", "a schedule's jobs have no parent"),
    ("run_at", "a tick's job runs at its tick"),
    ("delay_seconds", "a tick's job runs at its tick"),
    ("expires_at", "give queue_timeout_seconds: a fixed time would pass after the first tick"),
    ("room", "a schedule's jobs go to the schedule's room: set room on the schedule"),
];

pub struct Schedules {
    pub book: ScheduleBook,
    pub(super) dispatcher: Dispatcher,
    pub(super) store: Arc<dyn JobStore>,
    registry: Arc<OperationRegistry>,
    job_queues: BTreeSet<String>,
    jobs: JobsSettings,
    remote: Arc<Remote>,
    pub settings: SchedulerSettings,
    /// Rung when a schedule is made, changed or resumed here: the scheduler learns its time.
    pub bell: Arc<Notify>,
}

/// What `Schedules` is built from.
pub struct Parts {
    pub db: sea_orm::DatabaseConnection,
    /// The store's write gate: the schedules' writes take turns with the store's.
    pub gate: crate::store::WriteGate,
    pub dispatcher: Dispatcher,
    pub store: Arc<dyn JobStore>,
    pub registry: Arc<OperationRegistry>,
    pub job_queues: BTreeSet<String>,
    pub jobs: JobsSettings,
    pub remote: Arc<Remote>,
    pub settings: SchedulerSettings,
}

impl Schedules {
    pub fn new(parts: Parts) -> Self {
        Schedules {
            book: ScheduleBook::new(parts.db, parts.gate),
            dispatcher: parts.dispatcher,
            store: parts.store,
            registry: parts.registry,
            job_queues: parts.job_queues,
            jobs: parts.jobs,
            remote: parts.remote,
            settings: parts.settings,
            bell: Arc::new(Notify::new()),
        }
    }

    fn rules(&self) -> Submissions<'_> {
        Submissions { registry: &self.registry, job_queues: &self.job_queues, jobs: &self.jobs }
    }

    /// A schedule's job as `POST /jobs` would take it in `room`, without the fields a tick
    /// sets itself; problems point into `/job`.
    pub fn check_job(&self, job: &Value, room: &RoomId) -> Result<NewJob, ApiError> {
        let Value::Object(fields) = job else {
            return Err(ApiError::new(Code::InvalidRequest, "job must be an object: a POST /jobs body").at("/job"));
        };
        if let Some((field, why)) = NOT_IN_A_SCHEDULE.iter().find(|(field, _)| fields.contains_key(*field)) {
            let detail = format!("a schedule's job takes no {field}: {why}");
            return Err(ApiError::new(Code::InvalidRequest, detail).at(format!("/job/{field}")));
        }
        let request: SubmitRequest = serde_json::from_value(job.clone())
            .map_err(|err| ApiError::new(Code::InvalidRequest, err.to_string()).at("/job"))?;
        validate_submission(&self.rules(), request, None, room).map_err(|err| err.at("/job"))
    }

    /// The job of a tick, keyed by `key`, checked and admitted as a submission is (a
    /// registered type's schema and workers as they are now).
    pub async fn tick_job(&self, name: &str, job: &Value, room: &RoomId, key: String) -> Result<NewJob, ApiError> {
        let mut new = self.check_job(job, room)?;
        new.idempotency_key = Some(key);
        new.submitted_by = Some(format!("schedule:{name}"));
        let wait_for_worker = job.get("wait_for_worker").and_then(Value::as_bool);
        admit_type(&self.remote, &mut new, wait_for_worker).await?;
        Ok(new)
    }

    /// A registered type's job is admitted at creation as if it may wait for a worker: a
    /// tick, not the creation, finds whether one serves it.
    pub async fn admit_at_creation(&self, new: &mut NewJob) -> Result<(), ApiError> {
        admit_type(&self.remote, new, Some(true)).await.map_err(|err| err.at("/job"))
    }

    /// Submits `s`'s job now, outside its ticks (no overlap rule asked), as its last job.
    pub async fn run_now(&self, s: &schedule::Model) -> Result<crate::domain::Job, ApiError> {
        let room = RoomId::parse(&s.room).map_err(|err| ApiError::new(Code::Internal, err))?;
        let at = crate::store::clock::now();
        let key = format!("schedule:{}:run:{}", s.id, uuid::Uuid::now_v7());
        let new = self.tick_job(&s.name, &s.job, &room, key).await?;
        let submission = self.dispatcher.submit(new).await?;
        self.book.ran_now(s.id, at, submission.job.id).await.map_err(crate::store::StoreError::from)?;
        Ok(submission.job)
    }

    /// Pauses or resumes `s` (a resume fires from the first tick after now); the schedule
    /// as written, or `None` when it changed meanwhile.
    pub async fn set_paused(&self, s: &schedule::Model, paused: bool) -> Result<Option<schedule::Model>, ApiError> {
        let mut changed = s.clone();
        if s.paused && !paused {
            let spec = spec_of(s).map_err(|err| ApiError::new(Code::InvalidSchedule, err.detail))?;
            changed.next_fire_at = spec
                .next_after(crate::store::clock::now())
                .ok_or_else(|| ApiError::new(Code::InvalidSchedule, "this schedule never fires again"))?;
        }
        changed.paused = paused;
        let written = self.book.update(changed).await.map_err(crate::store::StoreError::from)?;
        if written.is_some() {
            self.bell.notify_one();
        }
        Ok(written)
    }

    /// The catch-up rules of `s`.
    pub fn policy(&self, s: &schedule::Model) -> Policy {
        Policy {
            catch_up: CatchUp::parse(&s.catch_up).unwrap_or_default(),
            max_catch_up: s.max_catch_up.max(1) as u32,
            misfire_grace: chrono::TimeDelta::milliseconds(self.settings.misfire_grace_ms as i64),
        }
    }
}

/// The times of a stored schedule (written only after they parsed).
pub fn spec_of(s: &schedule::Model) -> Result<Spec, super::spec::SpecError> {
    Spec::parse(s.cron.as_deref(), s.every_seconds, Some(&s.timezone))
}

/// The idempotency key of the job of `schedule`'s tick at `tick_at`: one job per tick, in
/// the store, however many schedulers fire it.
pub fn tick_key(schedule: uuid::Uuid, tick_at: chrono::DateTime<chrono::Utc>) -> String {
    format!("schedule:{schedule}:{}", tick_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
