//! `JobStore` over SeaORM: the same SQL on SQLite and PostgreSQL.
//!
//! Write transactions start with their compare-and-set `UPDATE … RETURNING`, so SQLite takes
//! its write lock first (`BEGIN IMMEDIATE`) and never fails on a lock upgrade. This file holds
//! submission, reads, cancel and manual retry; `runs.rs` what workers write about a run;
//! `maintenance.rs` what the reaper and the dispatch sweep read and write.

mod fan_out;
mod group_commit;
mod listing;
mod maintenance;
mod postgres_batch;
mod retention;
mod rows;
mod runs;
mod tasks;
mod write_gate;

use crate::store::clock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use sea_orm::sea_query::{Expr, IntoCondition};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait,
    IntoActiveModel, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, SqlErr, UpdateMany,
};
use serde_json::{json, Value};
use uuid::Uuid;

use self::rows::{new_row, to_event, to_job};
use self::write_gate::{WriteGate, WriteTxn};
use super::entity::{job, job_event};
use super::{
    BatchRecorded, Cancellation, Completion, Dispatch, DispatchBook, ExpiredLease, JobCommands, JobFilter, JobReads,
    Maintenance, Page, Pruned, Reduce, Requeue, RunRef, RunWrites, StoreError, Submission,
};
use crate::domain::{
    BatchOutcome, EventName, FanOutForm, InvalidTransition, Job, JobEvent, JobStatus, NewEvent, NewJob,
};

/// The SQL store. Cheap to clone: it holds a connection pool.
#[derive(Clone)]
pub struct SeaStore {
    db: DatabaseConnection,
    /// Write transactions in turn, shared with the group-commit writer.
    gate: WriteGate,
    /// When set, claims and outcomes go through the group-commit writer.
    writer: Option<group_commit::Writer>,
}

impl SeaStore {
    pub fn new(db: DatabaseConnection) -> Self {
        let gate = WriteGate::for_backend(db.get_database_backend());
        SeaStore { db, gate, writer: None }
    }

    /// Writes claims and outcomes of concurrent jobs in shared transactions of up to
    /// `max_batch`: one commit (one fsync) for many jobs. Needs a tokio runtime.
    pub fn with_group_commit(self, max_batch: usize) -> Self {
        let db = self.db.clone();
        self.with_group_commit_on(max_batch, db)
    }

    /// As [`Self::with_group_commit`], the writer committing through `writer_db`: a pool of
    /// its own (one connection is enough: it commits one batch at a time) keeps its
    /// connection's page and statement caches warm and never waits behind readers.
    pub fn with_group_commit_on(mut self, max_batch: usize, writer_db: DatabaseConnection) -> Self {
        if max_batch > 1 {
            let writer_store = SeaStore { db: writer_db, gate: self.gate.clone(), writer: None };
            self.writer = Some(group_commit::Writer::start(writer_store, max_batch));
        }
        self
    }

    async fn write_txn(&self) -> Result<WriteTxn, DbErr> {
        self.gate.begin(&self.db).await
    }

    async fn find(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        job::Entity::find_by_id(id).one(&self.db).await?.map(to_job).transpose()
    }

    /// The job holding an idempotency key in a room (keys are per room: one tenant's key
    /// never answers with, or conflicts with, another's job).
    async fn find_by_key(&self, room: &str, key: &str) -> Result<Option<Job>, StoreError> {
        let keyed = job::Column::IdempotencyKey.eq(key);
        let row = job::Entity::find().filter(job::Column::Room.eq(room)).filter(keyed).one(&self.db).await?;
        row.map(to_job).transpose()
    }

    /// Runs one transition: the compare-and-set, then its event, in one transaction.
    /// `None` when the job was not in any of `from` (nothing is written).
    async fn transition(
        &self,
        id: Uuid,
        from: &[JobStatus],
        to: JobStatus,
        set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
        event: NewEvent,
    ) -> Result<Option<Job>, StoreError> {
        self.transition_in(None, id, from, to, set, event).await
    }

    /// As [`Self::transition`], inside `shared` when given (a group commit: the caller
    /// commits), else in a transaction of its own.
    async fn transition_in(
        &self,
        shared: Option<&DatabaseTransaction>,
        id: Uuid,
        from: &[JobStatus],
        to: JobStatus,
        set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
        event: NewEvent,
    ) -> Result<Option<Job>, StoreError> {
        if let Some(txn) = shared {
            return apply_transition(txn, id, from, to, set, &event).await;
        }
        let txn = self.write_txn().await?;
        let job = apply_transition(&txn, id, from, to, set, &event).await?;
        if job.is_some() {
            txn.commit().await?;
        }
        Ok(job)
    }

    /// Events of the jobs `which` picks, in the order written, after event id `after`.
    async fn events_where(
        &self,
        which: sea_orm::sea_query::SimpleExpr,
        after: Option<i64>,
        limit: u64,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let rows = job_event::Entity::find()
            .filter(which)
            .filter(job_event::Column::Id.gt(after.unwrap_or(0)))
            .order_by_asc(job_event::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_event).collect()
    }

    async fn cancel_once(&self, id: Uuid) -> Result<Option<Cancellation>, StoreError> {
        let txn = self.write_txn().await?;
        let now = clock::now();
        let from = [JobStatus::Queued, JobStatus::Running];
        let set = |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::FinishedAt, Expr::value(now))
                .col_expr(job::Column::LeasedUntil, Expr::value(None::<chrono::DateTime<Utc>>))
        };
        let Some(row) = compare_and_set(&txn, id, &from, JobStatus::Cancelled, set).await? else {
            return Ok(None);
        };
        append_event(&txn, id, &NewEvent::new(EventName::CANCELLED).message("cancelled by request")).await?;
        let children = cancel_children(&txn, id).await?;
        fan_out::children_ended(&txn, std::slice::from_ref(&row)).await?;
        txn.commit().await?;
        Ok(Some(Cancellation { job: to_job(row)?, changed: true, descendants: children }))
    }
}

#[async_trait]
impl JobReads for SeaStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.db.ping().await.map_err(StoreError::from)
    }

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.find(id).await
    }

    async fn list(&self, filter: &JobFilter) -> Result<Page, StoreError> {
        self.list_summaries(filter).await
    }

    async fn events(&self, id: Uuid, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.events_where(job_event::Column::JobId.eq(id), after, limit).await
    }

    async fn room_events(&self, room: &str, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        let jobs = sea_orm::sea_query::Query::select()
            .column(job::Column::Id)
            .from(job::Entity)
            .and_where(job::Column::Room.eq(room))
            .to_owned();
        self.events_where(job_event::Column::JobId.in_subquery(jobs), after, limit).await
    }

    async fn queue_position(&self, job: &Job) -> Result<Option<i64>, StoreError> {
        self.find_queue_position(job).await
    }
}

#[async_trait]
impl JobCommands for SeaStore {
    async fn submit(&self, new: NewJob) -> Result<Submission, StoreError> {
        // A keyless submission cannot conflict, so it can share a group commit; a keyed one
        // may hit the unique index, which would abort a shared PostgreSQL transaction.
        if let (Some(writer), None) = (&self.writer, &new.idempotency_key) {
            let job = writer.write(group_commit::Write::Submit { new }).await?.into_job()?;
            return Ok(Submission { job, created: true });
        }
        let row = new_row(&new);
        let txn = self.write_txn().await?;
        let inserted = job::Entity::insert(row.clone().into_active_model()).exec_without_returning(&txn).await;
        match (inserted, &new.idempotency_key) {
            (Ok(_), _) => {}
            (Err(err), Some(key)) if matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) => {
                drop(txn);
                return self.resolve_duplicate(&new, key).await;
            }
            (Err(err), _) => return Err(err.into()),
        }
        append_event(&txn, row.id, &queued_event(&new)).await?;
        txn.commit().await?;
        Ok(Submission { job: to_job(row)?, created: true })
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        // Keys are looked up inside the write transaction; on PostgreSQL a concurrent
        // submission can still take one first, and the unique index then aborts this
        // attempt, so it tries again and finds that job.
        let mut attempt = 0;
        loop {
            match self.submit_many_once(&jobs).await {
                Err(StoreError::Database(err))
                    if attempt < 3 && matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) =>
                {
                    attempt += 1
                }
                outcome => return outcome,
            }
        }
    }

    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError> {
        // A failed compare-and-set means the job was terminal; re-read it. Should a manual
        // retry have re-queued it in between, the loop tries again. So does a deadlock with
        // a finishing child (it locks itself, then this parent): the transaction rolled
        // back, and a cancel that did commit is found terminal on the next try.
        for attempt in 1..=3 {
            match self.cancel_once(id).await {
                Ok(Some(cancellation)) => return Ok(cancellation),
                Ok(None) => {}
                Err(StoreError::Database(err)) if attempt < 3 => {
                    tracing::warn!(job_id = %id, error = %err, "cancel failed; trying again");
                    continue;
                }
                Err(err) => return Err(err),
            }
            let job = self.find(id).await?.ok_or(StoreError::NotFound(id))?;
            if job.status.is_terminal() {
                return Ok(Cancellation { job, changed: false, descendants: Vec::new() });
            }
        }
        Err(StoreError::Corrupt(format!("job {id} kept changing state during cancel")))
    }

    async fn note_queued(&self, id: Uuid, event: NewEvent) -> Result<bool, StoreError> {
        let txn = self.write_txn().await?;
        // The row is locked (a no-op update) so the event cannot land after a claim.
        let still = job::Entity::update_many()
            .col_expr(job::Column::Status, Expr::col(job::Column::Status).into())
            .filter(job::Column::Id.eq(id))
            .filter(job::Column::Status.eq(JobStatus::Queued.as_str()))
            .exec(&txn)
            .await?
            .rows_affected;
        if still == 0 {
            return Ok(false);
        }
        append_event(&txn, id, &event).await?;
        txn.commit().await?;
        Ok(true)
    }

    async fn retry(&self, id: Uuid) -> Result<Job, StoreError> {
        let event = NewEvent::new(EventName::RETRIED).message("re-queued by request");
        let from = [JobStatus::Failed, JobStatus::Cancelled];
        let backend = self.db.get_database_backend();
        if let Some(job) =
            // A job whose files the cleaner removed has nothing left to run.
            self
                .transition(
                    id,
                    &from,
                    JobStatus::Queued,
                    |update| retried(backend, update).filter(job::Column::CleanedAt.is_null()),
                    event,
                )
                .await?
        {
            return Ok(job);
        }
        let job = self.find(id).await?.ok_or(StoreError::NotFound(id))?;
        Err(InvalidTransition { from: job.status, to: JobStatus::Queued }.into())
    }
}

#[async_trait]
impl RunWrites for SeaStore {
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        match &self.writer {
            Some(writer) => writer
                .write(group_commit::Write::Claim { id, owner: owner.to_owned(), lease })
                .await?
                .into_optional_job(),
            None => self.claim_run(None, id, owner, lease).await,
        }
    }

    async fn claim_next(&self, operations: &[String], owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        self.claim_next_task(operations, owner, lease).await
    }

    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError> {
        match &self.writer {
            Some(writer) => writer
                .write(group_commit::Write::Finish { run, completion: completion.clone() })
                .await?
                .into_optional_job(),
            None => self.finish_run(None, run, completion).await,
        }
    }

    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        self.requeue_run(run, requeue).await
    }

    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        match &self.writer {
            Some(writer) => Ok(writer.write(group_commit::Write::ExtendLease { run, lease }).await?.into_count()? == 1),
            None => self.extend_run_lease(run, lease).await,
        }
    }

    async fn fan_out(&self, run: RunRef, total: i64, form: FanOutForm) -> Result<Option<Job>, StoreError> {
        self.begin_fan_out(run, total, form).await
    }

    async fn rerun_children(&self, run: RunRef) -> Result<Vec<Job>, StoreError> {
        self.rerun_children_of(run).await
    }

    async fn run_is_current(&self, run: RunRef) -> Result<bool, StoreError> {
        let current = job::Entity::find()
            .filter(job::Column::Id.eq(run.id))
            .filter(job::Column::Attempts.eq(run.attempt))
            .filter(job::Column::Status.eq(JobStatus::Running.as_str()))
            .count(&self.db)
            .await?;
        Ok(current == 1)
    }

    async fn defer(&self, run: RunRef) -> Result<Option<Job>, StoreError> {
        self.defer_run(run).await
    }

    async fn record_batch(&self, outcome: BatchOutcome, reduce: Arc<dyn Reduce>) -> Result<BatchRecorded, StoreError> {
        if let Some(writer) = &self.writer {
            return writer.write(group_commit::Write::Batch { outcome, reduce }).await?.into_batch();
        }
        let parent = RunRef { id: outcome.parent_job_id, attempt: outcome.attempt };
        let txn = self.write_txn().await?;
        let recorded = self.record_batches_in(&txn, parent, &[&outcome], reduce.as_ref()).await?;
        txn.commit().await?;
        recorded.into_iter().next().ok_or_else(|| StoreError::Corrupt("a batch outcome went unanswered".into()))
    }

    async fn record_event(&self, run: RunRef, event: NewEvent) -> Result<bool, StoreError> {
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
            .filter(job::Column::Status.eq(JobStatus::Running.as_str()))
            .exec(&txn)
            .await?
            .rows_affected;
        if moved == 0 {
            return Ok(false);
        }
        append_event(&txn, run.id, &event).await?;
        txn.commit().await?;
        Ok(true)
    }
}

#[async_trait]
impl Maintenance for SeaStore {
    async fn expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError> {
        self.find_expired_leases(limit).await
    }

    async fn stalled_runs(&self, timeout: Duration, stall: Duration, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.find_stalled_runs(timeout, stall, limit).await
    }

    async fn overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        self.find_overdue_queued(timeout, limit).await
    }

    async fn fail_queued(&self, id: Uuid, error_code: &str, message: &str) -> Result<Option<Job>, StoreError> {
        self.fail_queued_job(id, error_code, message).await
    }

    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.find_batch_fan_outs(limit).await
    }

    async fn runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.find_runs_owned_by(owner, limit).await
    }

    async fn mark_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.mark_files_cleaned(id).await
    }

    async fn prune(&self, status: JobStatus, older_than: Duration, limit: u64) -> Result<Pruned, StoreError> {
        self.prune_finished(status, older_than, limit).await
    }
}

#[async_trait]
impl DispatchBook for SeaStore {
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError> {
        match &self.writer {
            Some(writer) => {
                writer.write(group_commit::Write::MarkPublished { jobs: jobs.to_vec() }).await?.into_count()
            }
            None => self.record_publications(&self.db, jobs).await,
        }
    }

    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.find_due_for_dispatch(grace, limit).await
    }

    async fn forget_publication(&self, job: &Dispatch) -> Result<bool, StoreError> {
        self.clear_publication(job).await
    }

    async fn forget_publications(&self) -> Result<u64, StoreError> {
        self.clear_publications().await
    }
}

/// How one submission of a batch is answered.
enum Answer {
    /// By a job an earlier request created under its key.
    Existing(Box<Job>),
    /// By the row it inserts (index into the inserted rows).
    Inserted(usize),
    /// By the row an earlier submission of this batch with the same key inserts.
    Repeat(usize),
}

impl SeaStore {
    async fn submit_many_once(&self, jobs: &[NewJob]) -> Result<Vec<Submission>, StoreError> {
        let txn = self.write_txn().await?;
        let keys: Vec<&str> = jobs.iter().filter_map(|new| new.idempotency_key.as_deref()).collect();
        // Keyed by (room, key): keys are per room. Rows of other rooms read here are ignored.
        let mut known: HashMap<(String, String), Job> = HashMap::new();
        for chunk in keys.chunks(INSERT_CHUNK) {
            let rows =
                job::Entity::find().filter(job::Column::IdempotencyKey.is_in(chunk.iter().copied())).all(&txn).await?;
            for row in rows {
                let job = to_job(row)?;
                known.insert((job.room.clone(), job.idempotency_key.clone().unwrap_or_default()), job);
            }
        }
        // Which submissions insert a row; the others name the job that answers them.
        let mut fresh: Vec<&NewJob> = Vec::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(jobs.len());
        let mut first_with_key: HashMap<(&str, &str), usize> = HashMap::new();
        for new in jobs {
            let Some(key) = new.idempotency_key.as_deref() else {
                answers.push(Answer::Inserted(fresh.len()));
                fresh.push(new);
                continue;
            };
            if let Some(job) = known.get(&(new.room.as_str().to_owned(), key.to_owned())) {
                if !new.matches(job) {
                    return Err(StoreError::IdempotencyConflict(key.to_owned()));
                }
                answers.push(Answer::Existing(Box::new(job.clone())));
            } else if let Some(&first) = first_with_key.get(&(new.room.as_str(), key)) {
                if !new.matches_new(fresh[first]) {
                    return Err(StoreError::IdempotencyConflict(key.to_owned()));
                }
                answers.push(Answer::Repeat(first));
            } else {
                first_with_key.insert((new.room.as_str(), key), fresh.len());
                answers.push(Answer::Inserted(fresh.len()));
                fresh.push(new);
            }
        }
        let inserted = insert_new(&txn, &fresh).await?;
        txn.commit().await?;
        let inserted = inserted.into_iter().map(to_job).collect::<Result<Vec<_>, _>>()?;
        Ok(answers
            .into_iter()
            .map(|answer| match answer {
                Answer::Existing(job) => Submission { job: *job, created: false },
                Answer::Inserted(at) => Submission { job: inserted[at].clone(), created: true },
                Answer::Repeat(at) => Submission { job: inserted[at].clone(), created: false },
            })
            .collect())
    }

    /// An idempotency key seen before: the same submission gets the same job back; a
    /// different one under the same key is a conflict, never a silent overwrite.
    async fn resolve_duplicate(&self, new: &NewJob, key: &str) -> Result<Submission, StoreError> {
        match self.find_by_key(new.room.as_str(), key).await? {
            Some(job) if new.matches(&job) => Ok(Submission { job, created: false }),
            Some(_) => Err(StoreError::IdempotencyConflict(key.to_owned())),
            // The holder of the key was deleted between the insert and this read.
            None => Err(StoreError::IdempotencyConflict(key.to_owned())),
        }
    }
}

/// What a retry (by hand, or by a coordinator's re-run) clears: the last run's outcome,
/// times, owner and fan-out form, and the retry budget, which starts afresh.
/// `run_after` is the database's own "now" (on PostgreSQL the transaction's start), so a
/// claim, which compares it with the same clock, never finds the job not yet due and drops
/// its message.
fn retried(backend: sea_orm::DbBackend, update: UpdateMany<job::Entity>) -> UpdateMany<job::Entity> {
    let no_time = None::<chrono::DateTime<Utc>>;
    let update = update
        .col_expr(job::Column::Result, Expr::value(None::<Value>))
        .col_expr(job::Column::ErrorCode, Expr::value(None::<String>))
        .col_expr(job::Column::ErrorMessage, Expr::value(None::<String>))
        .col_expr(job::Column::StartedAt, Expr::value(no_time))
        .col_expr(job::Column::FinishedAt, Expr::value(no_time))
        .col_expr(job::Column::LeasedUntil, Expr::value(no_time))
        .col_expr(job::Column::Owner, Expr::value(None::<String>))
        .col_expr(job::Column::RunAfter, rows::db_now(backend))
        .col_expr(job::Column::PublishedAt, Expr::value(no_time))
        .col_expr(job::Column::Failures, Expr::value(0));
    runs::forget_fan_out(update)
}

/// The compare-and-set and its event, inside `txn`; `None` (nothing written) on a miss. A
/// child job that ends settles its parent in the same transaction.
async fn apply_transition(
    txn: &DatabaseTransaction,
    id: Uuid,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
    event: &NewEvent,
) -> Result<Option<Job>, StoreError> {
    let Some(row) = compare_and_set(txn, id, from, to, set).await? else {
        return Ok(None);
    };
    append_event(txn, id, event).await?;
    if to.is_terminal() {
        fan_out::children_ended(txn, std::slice::from_ref(&row)).await?;
    }
    to_job(row).map(Some)
}

/// `UPDATE job SET status = to, … WHERE id = ? AND status IN (from) RETURNING *`.
/// Every `from → to` must be a legal move of the state machine.
async fn compare_and_set(
    txn: &DatabaseTransaction,
    id: Uuid,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
) -> Result<Option<job::Model>, DbErr> {
    let mut rows = compare_and_set_many(txn, job::Column::Id.eq(id), from, to, set).await?;
    Ok(rows.pop())
}

/// The compare-and-set of every row `rows` selects, in one statement: each row is judged
/// by its own current status. Returns the rows that moved.
async fn compare_and_set_many(
    txn: &DatabaseTransaction,
    rows: impl IntoCondition,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
) -> Result<Vec<job::Model>, DbErr> {
    debug_assert!(from.iter().all(|status| status.can_transition_to(to)), "{from:?} -> {to}");
    let update = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(to.as_str()))
        .filter(rows)
        .filter(job::Column::Status.is_in(from.iter().map(|status| status.as_str())));
    set(update).exec_with_returning(txn).await
}

/// Cancels a parent's QUEUED and RUNNING descendants inside the parent's cancel
/// transaction, each with its event; a running one's heartbeat then finds its run gone and
/// stops its work. Returns how many were cancelled.
/// Cancels the QUEUED and RUNNING descendants of `parent`; their ids.
async fn cancel_children(txn: &DatabaseTransaction, parent: Uuid) -> Result<Vec<Uuid>, DbErr> {
    let now = clock::now();
    let from = [JobStatus::Queued.as_str(), JobStatus::Running.as_str()];
    let event = NewEvent::new(EventName::CANCELLED).message("parent was cancelled");
    let (mut parents, mut cancelled) = (vec![parent], Vec::new());
    while let Some(parent) = parents.pop() {
        let children = job::Entity::update_many()
            .col_expr(job::Column::Status, Expr::value(JobStatus::Cancelled.as_str()))
            .col_expr(job::Column::FinishedAt, Expr::value(now))
            .col_expr(job::Column::LeasedUntil, Expr::value(None::<chrono::DateTime<Utc>>))
            .filter(job::Column::ParentJobId.eq(parent))
            .filter(job::Column::Status.is_in(from))
            .exec_with_returning(txn)
            .await?;
        append_events(txn, children.iter().map(|child| event_row(child.id, &event)).collect()).await?;
        cancelled.extend(children.iter().map(|child| child.id));
        parents.extend(children.into_iter().map(|child| child.id));
    }
    Ok(cancelled)
}

async fn append_event<C: ConnectionTrait>(db: &C, job_id: Uuid, event: &NewEvent) -> Result<(), DbErr> {
    job_event::Entity::insert(event_row(job_id, event)).exec_without_returning(db).await?;
    Ok(())
}

/// Rows per multi-row `INSERT`: keeps the bind parameters far below SQLite's and
/// PostgreSQL's limits (32,766 and 65,535) for the widest row (the job's 26 columns).
const INSERT_CHUNK: usize = 1000;

/// Appends many events in multi-row inserts, in order.
async fn append_events(txn: &DatabaseTransaction, events: Vec<job_event::ActiveModel>) -> Result<(), DbErr> {
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        let chunk: Vec<_> = events.by_ref().take(INSERT_CHUNK).collect();
        job_event::Entity::insert_many(chunk).exec_without_returning(txn).await?;
    }
    Ok(())
}

fn event_row(job_id: Uuid, event: &NewEvent) -> job_event::ActiveModel {
    job_event::ActiveModel {
        job_id: Set(job_id),
        ts: Set(clock::now()),
        event: Set(event.event.clone()),
        message: Set(event.message.clone()),
        fields: Set(event.fields.clone()),
        level: Set(event.level.as_str().to_owned()),
        ..Default::default()
    }
}

/// The `job.queued` event of a submission.
fn queued_event(new: &NewJob) -> NewEvent {
    NewEvent::new(EventName::QUEUED).fields(json!({ "queue": new.queue.as_str(), "operation": new.operation }))
}

/// Inserts keyless submissions and their `job.queued` events with multi-row inserts.
async fn insert_new(txn: &DatabaseTransaction, new: &[&NewJob]) -> Result<Vec<job::Model>, DbErr> {
    let rows: Vec<job::Model> = new.iter().map(|new| new_row(new)).collect();
    for chunk in rows.chunks(INSERT_CHUNK) {
        let models = chunk.iter().cloned().map(IntoActiveModel::into_active_model);
        job::Entity::insert_many(models).exec_without_returning(txn).await?;
    }
    append_events(txn, rows.iter().zip(new).map(|(row, new)| event_row(row.id, &queued_event(new))).collect()).await?;
    Ok(rows)
}
