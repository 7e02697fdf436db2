//! Deciding and firing ticks. A tick is decided once, by whichever scheduler's
//! compare-and-set on the schedule's `next_fire_at` wins (with the tick's row, in one
//! transaction); a tick decided to fire then gets its job, keyed by (schedule, tick time),
//! so a scheduler that dies in between leaves a `firing` row any other finishes with the
//! same job. No leader, no lock held across a submission.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::{info, warn};

use super::book::Decision;
use super::entity::{schedule, schedule_tick};
use super::service::{spec_of, tick_key, Schedules};
use super::spec::{Overlap, Step};
use crate::domain::{JobStatus, RoomId};
use crate::http::Code;
use crate::store::StoreError;

/// Most steps one pass takes for one schedule (a catch-up of `all` fires this many at most
/// per pass; the next pass goes on).
const MAX_STEPS: usize = 1000;

/// What a pass did, counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    pub fired: u64,
    pub skipped: u64,
    pub missed: u64,
    pub failed: u64,
}

impl Fired {
    pub fn add(&mut self, other: Fired) {
        self.fired += other.fired;
        self.skipped += other.skipped;
        self.missed += other.missed;
        self.failed += other.failed;
    }
}

fn count(outcome: &'static str, by: u64) {
    if by > 0 {
        metrics::counter!("yardmaster_schedule_ticks_total", "outcome" => outcome).increment(by);
    }
}

impl Schedules {
    /// Decides every due tick of `s` at `now`, in order, firing those that fire; stops when
    /// the next tick is ahead or another scheduler (or a change) got there first.
    pub async fn advance(&self, mut s: schedule::Model, now: DateTime<Utc>) -> Result<Fired, StoreError> {
        let spec = match spec_of(&s) {
            Ok(spec) => spec,
            Err(err) => {
                warn!(schedule = %s.id, error = %err, "a stored schedule's times do not parse; it is left alone");
                return Ok(Fired::default());
            }
        };
        let policy = self.policy(&s);
        let mut done = Fired::default();
        for _ in 0..MAX_STEPS {
            if s.next_fire_at > now {
                break;
            }
            let due = s.next_fire_at;
            let after = |tick| spec.next_after(tick).unwrap_or(DateTime::<Utc>::MAX_UTC);
            // The last tick's job to cancel for this one, once this pass has won the tick.
            let mut replaced = None;
            let (decision, next) = match spec.step(due, now, &policy) {
                Step::Retire => (Decision::Miss { count: 1 }, DateTime::<Utc>::MAX_UTC),
                Step::Miss { count, resume } => (Decision::Miss { count }, resume),
                Step::Fire(tick) => match self.overlaps(&s).await? {
                    Some(_) if s.overlap == Overlap::Skip.as_str() => (Decision::Skip, after(tick)),
                    Some(previous) if s.overlap == Overlap::CancelPrevious.as_str() => {
                        replaced = Some(previous);
                        (Decision::Fire { request: s.job.clone() }, after(tick))
                    }
                    _ => (Decision::Fire { request: s.job.clone() }, after(tick)),
                },
            };
            // A pass that loses the tick (to another scheduler, a pause, an edit) cancels
            // nothing: the last job is cancelled only for a tick that fires.
            let Some(moved) = self.book.decide(&s, &decision, next).await? else { break };
            if let Some(previous) = replaced {
                // Should this process die right here, the tick's `firing` row is finished by
                // another (finish_stranded) and the last job runs on beside it: an overlap,
                // never a cancel without its replacement.
                self.store.cancel(previous).await?;
                info!(schedule = %s.id, job_id = %previous, "the last tick's job cancelled for the next");
            }
            match decision {
                Decision::Miss { count: missed } => {
                    count("missed", missed);
                    done.add(Fired { missed, ..Fired::default() });
                }
                Decision::Skip => {
                    count("skipped", 1);
                    done.add(Fired { skipped: 1, ..Fired::default() });
                }
                Decision::Fire { request } => {
                    let tick = (s.id, s.name.clone(), s.room.clone(), due);
                    let fired = self.finish(tick, &request).await?;
                    done.add(fired);
                }
            }
            s = moved;
        }
        Ok(done)
    }

    /// The job of the last tick, when the overlap policy looks and it is unfinished.
    async fn overlaps(&self, s: &schedule::Model) -> Result<Option<uuid::Uuid>, StoreError> {
        let Some(last) = s.last_job_id.filter(|_| s.overlap != Overlap::Allow.as_str()) else { return Ok(None) };
        let job = self.store.get(last).await?;
        Ok(job.filter(|job| matches!(job.status, JobStatus::Queued | JobStatus::Running)).map(|job| job.id))
    }

    /// Submits the job of a tick decided to fire and records it: `fired` with the job, or
    /// `failed` with why the job was refused (an operation gone since, a worker missing).
    /// A store that cannot be reached leaves the tick `firing`, for a later pass.
    async fn finish(
        &self,
        (schedule_id, name, room, tick_at): (uuid::Uuid, String, String, DateTime<Utc>),
        request: &Value,
    ) -> Result<Fired, StoreError> {
        let room = RoomId::parse(&room).map_err(StoreError::Corrupt)?;
        let outcome = match self.tick_job(&name, request, &room, tick_key(schedule_id, tick_at)).await {
            Ok(new) => match self.dispatcher.submit(new).await {
                Ok(submission) => Ok(submission.job.id),
                Err(StoreError::IdempotencyConflict(key)) => Err(format!("the key {key} holds another job")),
                Err(err) => return Err(err),
            },
            // Not the job's fault: the tick stays `firing`, for a later pass.
            Err(err) if matches!(err.code, Code::StoreUnavailable | Code::Internal) => {
                return Err(StoreError::Unavailable(err.detail))
            }
            Err(err) => Err(format!("{}: {}", err.code.as_str(), err.detail)),
        };
        let settled = self.book.settle(schedule_id, tick_at, outcome.clone()).await?;
        match (settled, outcome) {
            (false, _) => Ok(Fired::default()),
            (true, Ok(job_id)) => {
                count("fired", 1);
                info!(schedule = %schedule_id, %job_id, tick = %tick_at, "schedule fired");
                Ok(Fired { fired: 1, ..Fired::default() })
            }
            (true, Err(why)) => {
                count("failed", 1);
                warn!(schedule = %schedule_id, tick = %tick_at, %why, "a schedule's job was refused");
                Ok(Fired { failed: 1, ..Fired::default() })
            }
        }
    }

    /// Finishes ticks decided to fire longer than `settle_ms` ago whose job is unrecorded:
    /// the same job their scheduler would have submitted (its key finds it if it did).
    pub async fn finish_stranded(&self, now: DateTime<Utc>) -> Result<Fired, StoreError> {
        let before = now - chrono::TimeDelta::milliseconds(self.settings.settle_ms as i64);
        let stranded = self.book.firing(before, self.settings.batch).await?;
        let mut done = Fired::default();
        for tick in stranded {
            let schedule_tick::Model { schedule_id, tick_at, request, .. } = tick;
            let Some(s) = self.book.get(schedule_id).await? else { continue };
            let request = request.unwrap_or_else(|| s.job.clone());
            done.add(self.finish((schedule_id, s.name, s.room, tick_at), &request).await?);
        }
        Ok(done)
    }
}
