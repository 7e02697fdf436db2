//! What clients ask of jobs: submissions (one, or a batch in one transaction), a cancel
//! with the job's unfinished descendants, a manual retry, and a note on a waiting job.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::Utc;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, Set, SqlErr, UpdateMany,
};
use serde_json::json;
use uuid::Uuid;

use super::fan_in;
use super::rows::{insert_statement, new_row};
use super::write_gate::WriteTxn;
use super::{
    append_event, append_events, compare_and_set, dependencies, event_row, fan_out, group_commit, limits,
    owned_event_row, retried, unique, SeaStore, INSERT_CHUNK,
};
use crate::domain::{EventName, InvalidTransition, Job, JobStatus, NewEvent, NewJob};
use crate::store::entity::{job, job_event};
use crate::store::{clock, Call, Cancellation, Change, JobCommands, StoreError, Submission};

/// The statuses a cancel moves a job from.
const CANCELLABLE: &[JobStatus] = &[JobStatus::Queued, JobStatus::Running];

#[async_trait]
impl JobCommands for SeaStore {
    async fn submit(&self, new: NewJob) -> Result<Submission, StoreError> {
        // A job under a limit when keyed (admission and the key's lookup in one transaction)
        // or with no group commit (whose writer admits the others), a unique one (its earlier
        // job looked up where it would be inserted), and one with dependencies (checked and
        // linked where it is inserted).
        let admitted_here = new.idempotency_key.is_some() || self.writer.is_none();
        if (new.limit.is_some() && admitted_here) || new.unique.is_some() || !new.depends_on.is_empty() {
            let mut submitted = self.submit_many(vec![new]).await?;
            return submitted.pop().ok_or_else(|| StoreError::Corrupt("a submission made nothing".into()));
        }
        self.before(Call::Submit).await?;
        // A keyless submission cannot conflict, so it can share a group commit; a keyed one
        // may hit the unique index, which would abort a shared PostgreSQL transaction.
        if let (Some(writer), None) = (&self.writer, &new.idempotency_key) {
            let job = writer.write(group_commit::Write::Submit { new: Box::new(new) }).await?.into_job()?;
            self.announce(Call::Submit, &[Change::Moved { job: &job, was: &[], event: EventName::QUEUED }]).await?;
            return Ok(Submission { job, created: true });
        }
        let row = new_row(&new);
        let txn = self.write_txn().await?;
        let inserted = insert_chunks(&txn, std::slice::from_ref(&row)).await;
        match (inserted, &new.idempotency_key) {
            (Ok(_), _) => {}
            (Err(err), Some(key)) if matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) => {
                drop(txn);
                return self.resolve_duplicate(&new, key).await;
            }
            (Err(err), _) => return Err(err.into()),
        }
        super::dispatch_book::write_outbox(&txn, std::slice::from_ref(&row), &[&new]).await?;
        append_event(&txn, row.id, &queued_event(&new)).await?;
        txn.commit().await?;
        let job = row;
        self.announce(Call::Submit, &[Change::Moved { job: &job, was: &[], event: EventName::QUEUED }]).await?;
        Ok(Submission { job, created: true })
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        self.before(Call::Submit).await?;
        // Keys are looked up inside the write transaction; on PostgreSQL a concurrent
        // submission can still take one first, and the unique index then aborts this
        // attempt, so it tries again and finds that job.
        let mut attempt = 0;
        loop {
            match self.submit_many_once(&jobs).await {
                // And a deadlock: the rows a submission locks (its dependencies, a limit's
                // key) may be locked in another order by an ending; the database aborted this
                // attempt, which is tried again.
                Err(StoreError::Database(err))
                    if attempt < 3
                        && (matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
                            || deadlocked(&err)) =>
                {
                    attempt += 1
                }
                Ok(submissions) => {
                    let created = submissions.iter().filter(|submission| submission.created);
                    let changes: Vec<Change> =
                        created.map(|s| Change::Moved { job: &s.job, was: &[], event: EventName::QUEUED }).collect();
                    self.announce(Call::Submit, &changes).await?;
                    return Ok(submissions);
                }
                outcome => return outcome,
            }
        }
    }

    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError> {
        self.before(Call::Cancel(id)).await?;
        // A failed compare-and-set means the job was terminal; re-read it. Should a manual
        // retry have re-queued it in between, the loop tries again. So does a deadlock with
        // a finishing child (it locks itself, then this parent): the transaction rolled
        // back, and a cancel that did commit is found terminal on the next try.
        for attempt in 1..=3 {
            match self.cancel_once(id).await {
                Ok(Some((cancellation, descendants))) => {
                    let cancelled = std::iter::once(&cancellation.job).chain(&descendants);
                    let changes: Vec<Change> = cancelled
                        .map(|job| Change::Moved { job, was: CANCELLABLE, event: EventName::CANCELLED })
                        .collect();
                    self.announce(Call::Cancel(id), &changes).await?;
                    return Ok(cancellation);
                }
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
        self.before(Call::NoteQueued(id)).await?;
        let txn = self.write_txn().await?;
        // The row is locked (a no-op update) so the event cannot land after a claim.
        let still = job::Entity::update_many()
            .col_expr(job::Column::Status, Expr::col(job::Column::Status))
            .filter(job::Column::Id.eq(id))
            .filter(job::Column::Status.eq(JobStatus::Queued))
            .exec(&txn)
            .await?
            .rows_affected;
        if still == 0 {
            return Ok(false);
        }
        append_event(&txn, id, &event).await?;
        txn.commit().await?;
        self.announce(Call::NoteQueued(id), &[Change::Noted { id }]).await?;
        Ok(true)
    }

    async fn retry(&self, id: Uuid) -> Result<Job, StoreError> {
        self.before(Call::Retry(id)).await?;
        let event = NewEvent::new(EventName::RETRIED).message("re-queued by request");
        const FROM: &[JobStatus] = &[JobStatus::Failed, JobStatus::Cancelled];
        let from = FROM;
        let backend = self.db.get_database_backend();
        if let Some(job) =
            // A job whose files the cleaner removed has nothing left to run.
            self
                .transition(
                    id,
                    from,
                    JobStatus::Queued,
                    |update| retried(backend, update).filter(job::Column::CleanedAt.is_null()),
                    event,
                )
                .await?
        {
            let changes = [Change::Moved { job: &job, was: FROM, event: EventName::RETRIED }];
            self.announce(Call::Retry(id), &changes).await?;
            return Ok(job);
        }
        let job = self.find(id).await?.ok_or(StoreError::NotFound(id))?;
        Err(InvalidTransition { from: job.status, to: JobStatus::Queued }.into())
    }
}

/// Whether PostgreSQL aborted the transaction to break a deadlock (SQLSTATE 40P01).
fn deadlocked(err: &DbErr) -> bool {
    let code = |err: &sea_orm::sqlx::Error| match err {
        sea_orm::sqlx::Error::Database(db) => db.code().is_some_and(|code| code == "40P01"),
        _ => false,
    };
    match err {
        DbErr::Exec(sea_orm::RuntimeErr::SqlxError(err)) | DbErr::Query(sea_orm::RuntimeErr::SqlxError(err)) => {
            code(err)
        }
        _ => false,
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
            let mut rows =
                job::Entity::find().filter(job::Column::IdempotencyKey.is_in(chunk.iter().copied())).all(&txn).await?;
            fan_in::apply(&txn, &mut rows).await?;
            for row in rows {
                let job = row;
                known.insert((job.room.clone(), job.idempotency_key.clone().unwrap_or_default()), job);
            }
        }
        // Which submissions insert a row; the others name the job that answers them: an
        // earlier one of the same idempotency key, or of the same unique key in its window.
        let mut fresh: Vec<&NewJob> = Vec::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(jobs.len());
        let mut first_with_key: HashMap<(&str, &str), usize> = HashMap::new();
        let mut first_with_unique: HashMap<(&str, &str), usize> = HashMap::new();
        for new in jobs {
            let room = new.room.as_str();
            if let Some(key) = new.idempotency_key.as_deref() {
                if let Some(job) = known.get(&(room.to_owned(), key.to_owned())) {
                    if !new.matches(job) {
                        return Err(StoreError::IdempotencyConflict(key.to_owned()));
                    }
                    answers.push(Answer::Existing(Box::new(job.clone())));
                    continue;
                }
                if let Some(&first) = first_with_key.get(&(room, key)) {
                    if !new.matches_new(fresh[first]) {
                        return Err(StoreError::IdempotencyConflict(key.to_owned()));
                    }
                    answers.push(Answer::Repeat(first));
                    continue;
                }
            }
            if let Some(unique) = &new.unique {
                if let Some(&first) = first_with_unique.get(&(room, unique.key.as_str())) {
                    answers.push(Answer::Repeat(first));
                    continue;
                }
                if let Some(job) = unique::earlier(&txn, room, unique).await? {
                    answers.push(Answer::Existing(Box::new(job)));
                    continue;
                }
                first_with_unique.insert((room, unique.key.as_str()), fresh.len());
            }
            if let Some(key) = new.idempotency_key.as_deref() {
                first_with_key.insert((room, key), fresh.len());
            }
            answers.push(Answer::Inserted(fresh.len()));
            fresh.push(new);
        }
        // A dependency on an earlier item of the batch names the id it was given; when an
        // earlier job answers that item, the dependency is on that job.
        let mut answered: HashMap<Uuid, Uuid> = HashMap::new();
        for (new, answer) in jobs.iter().zip(&answers) {
            let (Some(given), Answer::Existing(job)) = (new.id, answer) else { continue };
            answered.insert(given, job.id);
        }
        for (new, answer) in jobs.iter().zip(&answers) {
            let (Some(given), Answer::Repeat(first)) = (new.id, answer) else { continue };
            answered.extend(fresh[*first].id.map(|first| (given, first)));
        }
        let redirected: Vec<NewJob> = match answered.is_empty() {
            true => Vec::new(),
            false => fresh
                .iter()
                .map(|new| {
                    let mut new = (*new).clone();
                    for dependency in &mut new.depends_on {
                        *dependency = answered.get(dependency).copied().unwrap_or(*dependency);
                    }
                    new
                })
                .collect(),
        };
        let fresh: Vec<&NewJob> = match answered.is_empty() {
            true => fresh,
            false => redirected.iter().collect(),
        };
        let mut rows: Vec<job::Model> = fresh.iter().map(|new| new_row(new)).collect();
        let waiting = match fresh.iter().any(|new| !new.depends_on.is_empty()) {
            true => dependencies::link(&txn, &mut rows, &fresh).await?,
            false => Vec::new(),
        };
        let inserted = insert_rows(&txn, rows, &fresh, waiting).await?;
        txn.commit().await?;
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

    /// The job holding an idempotency key in a room (keys are per room: one tenant's key
    /// never answers with, or conflicts with, another's job).
    async fn find_by_key(&self, room: &str, key: &str) -> Result<Option<Job>, StoreError> {
        let keyed = job::Column::IdempotencyKey.eq(key);
        let mut job: Vec<Job> = job::Entity::find()
            .filter(job::Column::Room.eq(room))
            .filter(keyed)
            .one(&self.db)
            .await?
            .into_iter()
            .collect();
        fan_in::apply(&self.db, &mut job).await?;
        Ok(job.pop())
    }

    async fn cancel_once(&self, id: Uuid) -> Result<Option<(Cancellation, Vec<Job>)>, StoreError> {
        let txn = self.write_txn().await?;
        let now = clock::now();
        let from = [JobStatus::Queued, JobStatus::Running];
        let set = |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::FinishedAt, Expr::value(now))
                .col_expr(job::Column::LeasedUntil, Expr::value(None::<chrono::DateTime<Utc>>))
                .col_expr(job::Column::WaitingSince, Expr::value(None::<chrono::DateTime<Utc>>))
        };
        let Some(row) = compare_and_set(&txn, id, &from, JobStatus::Cancelled, set).await? else {
            return Ok(None);
        };
        append_event(&txn, id, &NewEvent::new(EventName::CANCELLED).message("cancelled by request")).await?;
        let children = cancel_children(&txn, id).await?;
        fan_out::children_ended(&txn, std::slice::from_ref(&row)).await?;
        txn.commit().await?;
        let descendants = children;
        let ids = descendants.iter().map(|job| job.id).collect();
        Ok(Some((Cancellation { job: row, changed: true, descendants: ids }, descendants)))
    }
}

/// Cancels a parent's QUEUED and RUNNING descendants inside the parent's cancel
/// transaction, each with its event; a running one's heartbeat then finds its run gone and
/// stops its work. Returns their rows.
async fn cancel_children(txn: &DatabaseTransaction, parent: Uuid) -> Result<Vec<job::Model>, DbErr> {
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
        parents.extend(children.iter().map(|child| child.id));
        cancelled.extend(children);
    }
    Ok(cancelled)
}

/// The `job.queued` event of a submission; a job that waits for its time says until when
/// (`run_after`).
fn queued_event(new: &NewJob) -> NewEvent {
    let mut fields = json!({ "queue": new.queue.as_str(), "operation": new.operation });
    if let Some(at) = new.run_after {
        fields["run_after"] = json!(at);
    }
    NewEvent::new(EventName::QUEUED).fields(fields)
}

/// Inserts keyless submissions and their `job.queued` events with multi-row inserts.
/// Jobs under a limit are admitted or held first (`limits::admit`): a held one is written
/// unsent, with its `job.held` event after its `job.queued`.
pub(super) async fn insert_new(txn: &WriteTxn, new: &[&NewJob]) -> Result<Vec<job::Model>, DbErr> {
    let rows: Vec<job::Model> = new.iter().map(|new| new_row(new)).collect();
    insert_rows(txn, rows, new, Vec::new()).await
}

/// Inserts job rows, a statement per [`INSERT_CHUNK`]; on SQLite each where its queue and
/// level's run puts it ([`super::placement`]).
async fn insert_chunks(txn: &WriteTxn, rows: &[job::Model]) -> Result<(), DbErr> {
    for chunk in rows.chunks(INSERT_CHUNK) {
        match txn.placement() {
            Some(placement) => placement.insert(txn, chunk).await?,
            None => {
                txn.execute_raw(insert_statement(txn.get_database_backend(), chunk, None)).await?;
            }
        }
    }
    Ok(())
}

/// [`insert_new`] of rows already made (`new[i]` made `rows[i]`), with more events to
/// write after their `job.queued` ones. A job waiting for its dependencies is not
/// admitted by its limit yet: it stays held.
async fn insert_rows(
    txn: &WriteTxn,
    mut rows: Vec<job::Model>,
    new: &[&NewJob],
    more: Vec<job_event::ActiveModel>,
) -> Result<Vec<job::Model>, DbErr> {
    let limits: Vec<_> =
        new.iter().zip(&rows).map(|(new, row)| new.limit.as_ref().filter(|_| row.waiting_since.is_none())).collect();
    let held = match limits.iter().any(Option::is_some) {
        true => limits::admit(txn, &mut rows, &limits).await?,
        false => Vec::new(),
    };
    insert_chunks(txn, &rows).await?;
    super::dispatch_book::write_outbox(txn, &rows, new).await?;
    let mut events: Vec<_> =
        rows.iter().zip(new).map(|(row, new)| owned_event_row(row.id, queued_event(new))).collect();
    events.extend(more);
    events.extend(held);
    // One moment for the submission's events, so their times read in their order (a
    // `job.held` or `job.waiting` was made before the `job.queued` written ahead of it).
    let now = clock::now();
    for event in &mut events {
        event.ts = Set(now);
    }
    append_events(txn, events).await?;
    Ok(rows)
}
