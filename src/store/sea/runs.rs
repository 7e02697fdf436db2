//! What a worker writes about its run, local or remote: the claim, the outcome, a requeue, a
//! lease renewal, its events and progress, and a coordinator's fan-out, re-run, deferral and
//! batch outcomes. Every write after the claim names the run (`attempts`), so a run that was
//! taken away (reaper, shutdown) cannot touch a later run of the same job. The SQL the
//! group-commit writer shares is in `run_sql.rs` and `fan_out.rs`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType};
use sea_orm::{ColumnTrait, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, UpdateMany};
use serde_json::json;
use uuid::Uuid;

use super::fan_in;
use super::fan_out::{close_succeeded, running, NoTime};
use super::rows::{db_now, db_now_plus, millis, startable, to_chrono};
use super::run_sql::forget_fan_out;
use super::{append_event, append_events, compare_and_set_many, event_row, group_commit, retried, SeaStore};
use crate::domain::{BatchOutcome, EventLevel, EventName, FanOutForm, Job, JobStatus, NewEvent};
use crate::store::entity::job;
use crate::store::{clock, BatchRecorded, Call, Change, Completion, Reduce, Requeue, RunRef, RunWrites, StoreError};

const QUEUED: &[JobStatus] = &[JobStatus::Queued];
const RUNNING: &[JobStatus] = &[JobStatus::Running];

/// Runnable jobs a SQLite claim of a registered type tries per round, and its rounds
/// (others may take them all).
const CANDIDATES: u64 = 32;
const ROUNDS: usize = 4;

#[async_trait]
impl RunWrites for SeaStore {
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        self.before(Call::Claim(id)).await?;
        let job = match &self.writer {
            Some(writer) => writer
                .write(group_commit::Write::Claim { id, owner: owner.to_owned(), lease })
                .await?
                .into_optional_job()?,
            None => self.claim_run(None, id, owner, lease).await?,
        };
        if let Some(job) = &job {
            self.announce(Call::Claim(id), &[Change::Moved { job, was: QUEUED, event: EventName::STARTED }]).await?;
        }
        Ok(job)
    }

    async fn claim_next(
        &self,
        operations: &[String],
        owner: &str,
        lease: Duration,
        most: usize,
    ) -> Result<Vec<Job>, StoreError> {
        self.before(Call::ClaimNext).await?;
        if operations.is_empty() || most == 0 {
            return Ok(Vec::new());
        }
        if self.db.get_database_backend() == DbBackend::Postgres {
            let txn = self.write_txn().await?;
            let next = claimable(DbBackend::Postgres, operations)
                .limit(most as u64)
                .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
                .into_tuple::<Uuid>()
                .all(&txn)
                .await?;
            if next.is_empty() {
                return Ok(Vec::new());
            }
            // One statement claims them all and writes their events, as a group commit does
            // (one is cheaper claimed on its own).
            let mut jobs = match next[..] {
                [id] => self.claim_run(Some(&txn), id, owner, lease).await?.into_iter().collect(),
                _ => super::postgres_batch::claim(&txn, &next, owner, lease).await?,
            };
            txn.commit().await?;
            jobs.sort_by_key(|job| (job.effective_priority, job.id));
            let changes: Vec<Change> =
                jobs.iter().map(|job| Change::Moved { job, was: QUEUED, event: EventName::STARTED }).collect();
            self.announce(Call::ClaimNext, &changes).await?;
            return Ok(jobs);
        }
        // SQLite: the oldest few, tried together (one group commit); another claimer may
        // have taken some, so the rest come from a fresh look.
        let mut jobs = Vec::with_capacity(most);
        for _ in 0..ROUNDS {
            let look = Ord::max(CANDIDATES, most as u64);
            let candidates =
                claimable(DbBackend::Sqlite, operations).limit(look).into_tuple::<Uuid>().all(&self.db).await?;
            let found = candidates.len() as u64;
            let mut rest = candidates.as_slice();
            while !rest.is_empty() {
                let (tried, after) = rest.split_at((most - jobs.len()).min(rest.len()));
                rest = after;
                let claims = tried.iter().map(|id| self.claim(*id, owner, lease));
                for claimed in futures_util::future::join_all(claims).await {
                    jobs.extend(claimed?);
                }
                if jobs.len() == most {
                    return Ok(jobs);
                }
            }
            if found < look {
                break;
            }
        }
        Ok(jobs)
    }

    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError> {
        self.before(Call::Finish(run, completion)).await?;
        let job = match &self.writer {
            Some(writer) => writer
                .write(group_commit::Write::Finish { run, completion: completion.clone() })
                .await?
                .into_optional_job()?,
            None => self.finish_run(None, run, completion).await?,
        };
        if let Some(job) = &job {
            let changes = [Change::Moved { job, was: RUNNING, event: completion.event() }];
            self.announce(Call::Finish(run, completion), &changes).await?;
        }
        Ok(job)
    }

    /// RUNNING → QUEUED for this run; `published_at` cleared so the dispatch sweep sends it.
    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        self.before(Call::Requeue(run, requeue)).await?;
        let backend = self.db.get_database_backend();
        let now = clock::now();
        let at = |delay: &Duration| now + to_chrono(*delay);
        // `run_after` is when the job may run again: after its delay, or now. It also marks
        // when its wait in the queue began (the queue timeout counts from it).
        let (event, delay, error) = match requeue {
            Requeue::RetryLater { delay, reason } => {
                let fields = json!({ "delay_seconds": delay.as_secs_f64(), "run_after": at(delay) });
                (NewEvent::new(EventName::RETRY_LATER).message(reason.clone()).fields(fields), *delay, None)
            }
            Requeue::RetryAfterFailure { failure, delay, error_code, message } => {
                let fields = json!({
                    "failure": failure, "error_code": error_code,
                    "delay_seconds": delay.as_secs_f64(), "run_after": at(delay),
                });
                let event = NewEvent::new(EventName::RETRY_SCHEDULED)
                    .message(message.clone())
                    .fields(fields)
                    .level(EventLevel::Warning);
                (event, *delay, Some((error_code.clone(), message.clone())))
            }
            Requeue::Shutdown => {
                let event =
                    NewEvent::new(EventName::REQUEUED_ON_SHUTDOWN).message("worker shut down before the job finished");
                (event, Duration::ZERO, None)
            }
            Requeue::BatchesLost => {
                let message = "its batches lived in the memory of a process that stopped; run again";
                (NewEvent::new(EventName::REQUEUED_BATCHES_LOST).message(message), Duration::ZERO, None)
            }
            Requeue::LeaseExpired => {
                let event = NewEvent::new(EventName::LEASE_EXPIRED_REQUEUE)
                    .message("lease expired; re-queued")
                    .level(EventLevel::Warning);
                (event, Duration::ZERO, None)
            }
        };
        let lease_must_be_expired = matches!(requeue, Requeue::LeaseExpired);
        let set = move |update: UpdateMany<job::Entity>| {
            let mut update = update
                .col_expr(job::Column::RunAfter, db_now_plus(backend, millis(delay)))
                .col_expr(job::Column::PublishedAt, Expr::value(NoTime::None))
                .col_expr(job::Column::StartedAt, Expr::value(NoTime::None))
                .col_expr(job::Column::LeasedUntil, Expr::value(NoTime::None))
                .col_expr(job::Column::Owner, Expr::value(None::<String>))
                .filter(job::Column::Attempts.eq(run.attempt));
            update = forget_fan_out(update);
            if let Some((code, message)) = error {
                update = update
                    .col_expr(job::Column::Failures, Expr::col(job::Column::Failures).add(1))
                    .col_expr(job::Column::ErrorCode, Expr::value(code))
                    .col_expr(job::Column::ErrorMessage, Expr::value(message));
            }
            if lease_must_be_expired {
                update = update.filter(Expr::col(job::Column::LeasedUntil).lt(db_now(backend)));
            }
            update
        };
        let job = self.transition(run.id, RUNNING, JobStatus::Queued, set, event).await?;
        if let Some(job) = &job {
            let changes = [Change::Moved { job, was: RUNNING, event: requeue.event() }];
            self.announce(Call::Requeue(run, requeue), &changes).await?;
        }
        Ok(job)
    }

    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        self.before(Call::ExtendLease(run)).await?;
        match &self.writer {
            Some(writer) => Ok(writer.write(group_commit::Write::ExtendLease { run, lease }).await?.into_count()? == 1),
            None => self.extend_run_lease(run, lease).await,
        }
    }

    /// Sets the run's form and count (`fan_out`, `progress_total`, `progress_current`) with
    /// `job.fanned_out`, before any batch or child is sent. Batches of an earlier run never
    /// count (their outcomes name that run); children are the same rows for every run, so
    /// those that already succeeded count from the start.
    async fn fan_out(&self, run: RunRef, total: i64, form: FanOutForm) -> Result<Option<Job>, StoreError> {
        self.before(Call::FanOut(run)).await?;
        let txn = self.write_txn().await?;
        let done = match form {
            FanOutForm::Batches => 0,
            FanOutForm::Children => {
                let children = job::Entity::find().filter(job::Column::ParentJobId.eq(run.id));
                children.filter(job::Column::Status.eq(JobStatus::Succeeded)).count(&txn).await? as i64
            }
        };
        let moved = running(run)
            .col_expr(job::Column::FanOut, Expr::value(form.as_str()))
            .col_expr(job::Column::ProgressTotal, Expr::value(total))
            .col_expr(job::Column::ProgressCurrent, Expr::value(done))
            .exec_with_returning(&txn)
            .await?;
        let Some(row) = moved.into_iter().next() else { return Ok(None) };
        if fan_in::beside(&txn) {
            fan_in::start(&txn, run, form, total).await?;
        }
        let fields = json!({ "form": form.as_str(), "total": total, "done": done });
        append_event(&txn, run.id, &NewEvent::new(EventName::FANNED_OUT).fields(fields)).await?;
        txn.commit().await?;
        let job = row;
        self.announce(Call::FanOut(run), &[Change::Moved { job: &job, was: RUNNING, event: EventName::FANNED_OUT }])
            .await?;
        Ok(Some(job))
    }

    async fn rerun_children(&self, run: RunRef) -> Result<Vec<Job>, StoreError> {
        self.before(Call::RerunChildren(run)).await?;
        let txn = self.write_txn().await?;
        // Locks the parent as this run's; children ending meanwhile queue up behind it.
        let locked = running(run)
            .filter(job::Column::FanOut.eq(FanOutForm::Children.as_str()))
            .col_expr(job::Column::ProgressCurrent, Expr::col(job::Column::ProgressCurrent))
            .exec_with_returning(&txn)
            .await?;
        let Some(parent) = locked.into_iter().next() else { return Ok(Vec::new()) };
        const ENDED: &[JobStatus] = &[JobStatus::Failed, JobStatus::Cancelled];
        let ended = ENDED;
        let children = job::Column::ParentJobId.eq(run.id);
        let backend = self.db.get_database_backend();
        let requeued =
            compare_and_set_many(&txn, children, ended, JobStatus::Queued, |update| retried(backend, update)).await?;
        let event = NewEvent::new(EventName::RETRIED).message("re-queued by its coordinator's re-run");
        append_events(&txn, requeued.iter().map(|child| event_row(child.id, &event)).collect()).await?;
        let succeeded = job::Entity::find()
            .filter(job::Column::ParentJobId.eq(run.id))
            .filter(job::Column::Status.eq(JobStatus::Succeeded))
            .count(&txn)
            .await? as i64;
        running(run).col_expr(job::Column::ProgressCurrent, Expr::value(succeeded)).exec(&txn).await?;
        let total = parent.progress_total.unwrap_or(i64::MAX);
        if requeued.is_empty() && succeeded >= total {
            close_succeeded(&txn, run, json!({ "children": total })).await?;
        }
        txn.commit().await?;
        let children = requeued;
        let mut changes: Vec<Change> =
            children.iter().map(|job| Change::Moved { job, was: ENDED, event: EventName::RETRIED }).collect();
        changes.push(Change::Noted { id: run.id });
        self.announce(Call::RerunChildren(run), &changes).await?;
        Ok(children)
    }

    async fn run_is_current(&self, run: RunRef) -> Result<bool, StoreError> {
        self.before(Call::Read("run_is_current", Some(run.id))).await?;
        let current = job::Entity::find()
            .filter(job::Column::Id.eq(run.id))
            .filter(job::Column::Attempts.eq(run.attempt))
            .filter(job::Column::Status.eq(JobStatus::Running))
            .count(&self.db)
            .await?;
        Ok(current == 1)
    }

    /// The coordinator returned with its batches sent: it gives up its lease, and its
    /// batches' outcomes (and the reaper's stall check) take over.
    async fn defer(&self, run: RunRef) -> Result<Option<Job>, StoreError> {
        self.before(Call::Defer(run)).await?;
        let now = clock::now();
        let event = NewEvent::new(EventName::DEFERRED).message("waiting for its batches");
        let set = move |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::DeferredAt, Expr::value(now))
                .col_expr(job::Column::LeasedUntil, Expr::value(NoTime::None))
        };
        let job = self.update_running(run, set, event).await?;
        if let Some(job) = &job {
            self.announce(Call::Defer(run), &[Change::Moved { job, was: RUNNING, event: EventName::DEFERRED }]).await?;
        }
        Ok(job)
    }

    async fn record_batch(&self, outcome: BatchOutcome, reduce: Arc<dyn Reduce>) -> Result<BatchRecorded, StoreError> {
        self.before(Call::RecordBatch(outcome.parent_job_id)).await?;
        let parent = RunRef { id: outcome.parent_job_id, attempt: outcome.attempt };
        let recorded = match &self.writer {
            Some(writer) => writer.write(group_commit::Write::Batch { outcome, reduce }).await?.into_batch()?,
            None => {
                let txn = self.write_txn().await?;
                let recorded = self.record_batches_in(&txn, parent, &[&outcome], reduce.as_ref()).await?;
                txn.commit().await?;
                recorded
                    .into_iter()
                    .next()
                    .ok_or_else(|| StoreError::Corrupt("a batch outcome went unanswered".into()))?
            }
        };
        match recorded {
            // This outcome closed its coordinator: announced with the row as it closed. A
            // failed read only costs the announcement of the ending, never the write.
            BatchRecorded::Counted { closed: Some(status) } => match self.find(parent.id).await {
                Ok(Some(job)) => {
                    let event = if status == JobStatus::Succeeded { EventName::SUCCEEDED } else { EventName::FAILED };
                    let changes = [Change::Moved { job: &job, was: RUNNING, event }];
                    self.announce(Call::RecordBatch(parent.id), &changes).await?;
                }
                Ok(None) => {}
                Err(err) => tracing::warn!(job_id = %parent.id, error = %err, "closed coordinator not announced"),
            },
            BatchRecorded::Counted { closed: None } => {
                self.announce(Call::RecordBatch(parent.id), &[Change::Noted { id: parent.id }]).await?
            }
            BatchRecorded::Duplicate | BatchRecorded::ParentGone => {}
        }
        Ok(recorded)
    }

    async fn record_event(&self, run: RunRef, event: NewEvent) -> Result<bool, StoreError> {
        self.before(Call::RecordEvent(run, &event)).await?;
        let txn = self.write_txn().await?;
        let (current, total) = event.progress();
        // The run's row is locked and checked even when no counter moves, so a stale run
        // writes nothing and an event never lands after the run ended. A coordinator's
        // counters count its batches or children; reports (from a batch, say) leave them.
        let counted = |column: job::Column, value: Option<i64>| match value {
            Some(value) => Expr::case(job::Column::FanOut.is_null(), value).finally(Expr::col(column)).into(),
            None => Expr::col(column),
        };
        let moved = job::Entity::update_many()
            .col_expr(job::Column::ProgressCurrent, counted(job::Column::ProgressCurrent, current))
            .col_expr(job::Column::ProgressTotal, counted(job::Column::ProgressTotal, total))
            .filter(job::Column::Id.eq(run.id))
            .filter(job::Column::Attempts.eq(run.attempt))
            .filter(job::Column::Status.eq(JobStatus::Running))
            .exec(&txn)
            .await?
            .rows_affected;
        if moved == 0 {
            return Ok(false);
        }
        append_event(&txn, run.id, &event).await?;
        txn.commit().await?;
        self.announce(Call::RecordEvent(run, &event), &[Change::Noted { id: run.id }]).await?;
        Ok(true)
    }
}

/// Runnable QUEUED jobs of these registered types, by level (0 first), then oldest first.
fn claimable(backend: DbBackend, operations: &[String]) -> sea_orm::Select<job::Entity> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        // Literals, so both engines use the partial index on claimable tasks.
        .filter(Expr::cust("status = 'queued' AND queue = '@remote'"))
        .filter(job::Column::Operation.is_in(operations.iter().map(String::as_str)))
        .filter(startable(backend))
        .order_by_asc(job::Column::EffectivePriority)
        .order_by_asc(job::Column::Id)
}
