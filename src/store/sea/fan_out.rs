//! Fan-out and fan-in of a coordinator's run: setting its batch count, deferring it, and
//! recording batch outcomes so that each counts once and the one that completes the count
//! closes the parent exactly once.
//!
//! Outcomes of one parent are written together: the parent row is locked first (its
//! compare-and-set names the run), new outcomes are inserted under the `job_batch` primary
//! key in one statement (a redelivered one is a no-op), and the counter moves once by their
//! number. Every outcome of one parent waits for that lock, from every worker process, so
//! what is done while it is held is kept to a few round trips.
//!
//! Child jobs (rows with `parent_job_id`) count towards their parent in the transaction of
//! their own ending, with the parent row locked; a coordinator that is itself a child counts
//! towards its parent the same way when it closes.

use crate::store::clock;
use std::collections::{BTreeMap, HashSet};
use std::panic::AssertUnwindSafe;

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, IdenStatic, QueryFilter,
    QueryOrder, QuerySelect, QueryTrait, UpdateMany, Value,
};
use serde_json::json;
use uuid::Uuid;

use super::fan_in;
use super::insert_sql::MultiInsert;
use super::run_sql::finish_in;
use super::{append_event, SeaStore, INSERT_CHUNK};
use crate::domain::{BatchOutcome, BatchResult, EventLevel, EventName, FanOutForm, Job, JobStatus, NewEvent};
use crate::store::entity::{job, job_batch};
use crate::store::{BatchRecorded, BatchRows, Completion, Reduce, RunRef, StoreError};

/// Error class of a parent whose batch or child job failed.
pub const CHILD_FAILED: &str = "ChildFailed";
/// Error class of a parent one of whose batch outputs its operation refused to store.
pub const INVALID_BATCH_OUTPUT: &str = "InvalidBatchOutput";
/// Error class of a parent whose operation's `reduce` panicked.
pub const REDUCE_PANICKED: &str = "ReducePanicked";

pub(super) type NoTime = Option<chrono::DateTime<Utc>>;

impl SeaStore {
    /// A change to this RUNNING run that keeps its status, with its event.
    pub(super) async fn update_running(
        &self,
        run: RunRef,
        set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
        event: NewEvent,
    ) -> Result<Option<Job>, StoreError> {
        let txn = self.write_txn().await?;
        let Some(row) = set(running(run)).exec_with_returning(&txn).await?.pop() else {
            return Ok(None);
        };
        append_event(&txn, run.id, &event).await?;
        txn.commit().await?;
        Ok(Some(row))
    }

    /// Records outcomes of batches of one parent run inside `txn`, answering each in order.
    pub(super) async fn record_batches_in(
        &self,
        txn: &DatabaseTransaction,
        parent: RunRef,
        outcomes: &[&BatchOutcome],
        reduce: &dyn Reduce,
    ) -> Result<Vec<BatchRecorded>, StoreError> {
        let Some(locked) = lock_parent(txn, parent).await? else {
            return Ok(outcomes.iter().map(|_| BatchRecorded::ParentGone).collect());
        };
        let now = clock::now();
        // Each outcome as it is recorded, and the rows its operation writes with it.
        let mut results: Vec<_> =
            outcomes.iter().map(|outcome| batch_rows(reduce, &locked.operation, parent, &outcome.result)).collect();
        let mut answers = Vec::with_capacity(outcomes.len());
        let (mut succeeded, mut failure) = (Vec::new(), None);
        let mut at = 0;
        while at < outcomes.len() && failure.is_none() {
            // Up to the next failure, in one statement: the parent holds still meanwhile, so
            // its lock is held for a round trip, not one per outcome.
            let failed = |(result, _): &(BatchResult, _)| matches!(result, BatchResult::Failed { .. });
            let end = results[at..].iter().position(failed).map_or(outcomes.len(), |next| at + next + 1);
            let mut fresh = insert_new(txn, &outcomes[at..end], &results[at..end], now).await?;
            for (outcome, (result, rows)) in outcomes[at..end].iter().zip(&mut results[at..end]) {
                // The first of two outcomes of one batch is the one inserted.
                if !fresh.remove(&outcome.index) {
                    answers.push(BatchRecorded::Duplicate);
                    continue;
                }
                if let Some(rows) = rows.take() {
                    txn.execute(&rows).await?;
                }
                match result {
                    BatchResult::Succeeded { .. } => succeeded.push(outcome.index),
                    BatchResult::Failed { error_code, message } => {
                        failure = Some((outcome.index, std::mem::take(error_code), std::mem::take(message)))
                    }
                }
                answers.push(BatchRecorded::Counted { closed: None });
            }
            at = end;
        }
        // The parent failed on an earlier outcome of this group.
        answers.extend((answers.len()..outcomes.len()).map(|_| BatchRecorded::ParentGone));
        // Successes count beside a failure too, so that the parent's count says what ran;
        // a failed batch keeps the count short of the total, so only the failure closes it.
        let advanced = match succeeded.is_empty() {
            true => None,
            false => self.advance_parent(txn, parent, &locked, &succeeded, reduce).await?,
        };
        let closed = match failure {
            Some((index, error_code, message)) => {
                let batch = json!({ "batch": index });
                fail_parent(txn, parent, batch, &format!("batch {index}"), &error_code, &message).await?
            }
            None => advanced,
        };
        // The outcome that closed the parent is the last one counted.
        if let Some(last) = answers.iter_mut().rev().find(|answer| matches!(answer, BatchRecorded::Counted { .. })) {
            *last = BatchRecorded::Counted { closed };
        }
        Ok(answers)
    }

    /// Moves the counter of `parent` (`locked` by [`lock_parent`]) by the new successes; the
    /// move that reaches the total closes the parent SUCCEEDED in the same transaction, its
    /// result the reduced batch outputs. On SQLite the counter is the one beside the row
    /// ([`fan_in`]), which the close folds into it.
    async fn advance_parent(
        &self,
        txn: &DatabaseTransaction,
        parent: RunRef,
        locked: &Counters,
        batches: &[i64],
        reduce: &dyn Reduce,
    ) -> Result<Option<JobStatus>, StoreError> {
        let count = batches.len() as i64;
        let row = match fan_in::beside(txn) {
            true => Counters {
                progress_current: fan_in::count(txn, parent, locked.progress_current, count).await?,
                operation: locked.operation.clone(),
                ..*locked
            },
            false => {
                let moved = running(parent)
                    .col_expr(job::Column::ProgressCurrent, Expr::col(job::Column::ProgressCurrent).add(count));
                let Some(row) = counters(txn, moved).await? else { return Ok(None) };
                row
            }
        };
        let fields = json!({ "batches": batches, "_progress_current": row.progress_current });
        append_event(txn, parent.id, &NewEvent::new(EventName::BATCHES_SUCCEEDED).fields(fields)).await?;
        let total = row.progress_total.unwrap_or(i64::MAX);
        // Batches may all finish before their coordinator has even returned: the count
        // alone decides, and the coordinator's own writes then find the run closed.
        if row.progress_current < total {
            return Ok(None);
        }
        let outputs = job_batch::Entity::find()
            .select_only()
            .column(job_batch::Column::Output)
            .filter(job_batch::Column::ParentJobId.eq(parent.id))
            .filter(job_batch::Column::Attempt.eq(parent.attempt))
            .order_by_asc(job_batch::Column::Batch)
            .into_tuple::<Option<serde_json::Value>>()
            .all(txn)
            .await?;
        let outputs = outputs.into_iter().map(Option::unwrap_or_default).collect();
        // `reduce` is the operation's code: a panic fails the parent, not this writer.
        match std::panic::catch_unwind(AssertUnwindSafe(|| reduce.reduce(&row.operation, outputs))) {
            Ok(result) => close_succeeded(txn, parent, result).await,
            Err(_) => {
                let message = "the operation's reduce panicked";
                fail_parent(txn, parent, json!({}), "reduce", REDUCE_PANICKED, message).await
            }
        }
    }
}

/// Child jobs that just ended inside `txn` (their terminal transition committed with this):
/// each one's parent, if it fanned out into children, counts it with its row locked, so
/// concurrent endings queue up and exactly one reaches the total. SUCCEEDED once every child
/// succeeded; FAILED, naming the child, once one failed or was cancelled. Parents in id
/// order, so concurrent transactions lock them in the same order.
pub(super) async fn children_ended<'a>(
    txn: &DatabaseTransaction,
    children: impl IntoIterator<Item = &'a job::Model>,
) -> Result<(), StoreError> {
    let mut by_parent: BTreeMap<Uuid, Vec<&job::Model>> = BTreeMap::new();
    for child in children {
        if let Some(parent) = child.parent_job_id {
            by_parent.entry(parent).or_default().push(child);
        }
    }
    for (parent, ended) in by_parent {
        let succeeded = ended.iter().filter(|child| child.status == JobStatus::Succeeded).count() as i64;
        let locked = job::Entity::update_many()
            .col_expr(job::Column::ProgressCurrent, Expr::col(job::Column::ProgressCurrent).add(succeeded))
            .filter(job::Column::Id.eq(parent))
            .filter(job::Column::Status.eq(JobStatus::Running))
            .filter(job::Column::FanOut.eq(FanOutForm::Children.as_str()));
        let Some(row) = counters(txn, locked).await? else { continue };
        let run = RunRef { id: parent, attempt: row.attempts };
        if let Some(child) = ended.iter().find(|child| child.status != JobStatus::Succeeded) {
            let error_code = child.error_code.clone().unwrap_or_else(|| child.status.to_string());
            let message = child.error_message.clone().unwrap_or_else(|| format!("child was {}", child.status));
            let which = json!({ "child_job_id": child.id });
            Box::pin(fail_parent(txn, run, which, &format!("child {}", child.id), &error_code, &message)).await?;
            continue;
        }
        let ids: Vec<Uuid> = ended.iter().map(|child| child.id).collect();
        let fields = json!({ "children": ids, "_progress_current": row.progress_current });
        append_event(txn, parent, &NewEvent::new(EventName::CHILDREN_SUCCEEDED).fields(fields)).await?;
        let total = row.progress_total.unwrap_or(i64::MAX);
        if row.progress_current >= total {
            Box::pin(close_succeeded(txn, run, json!({ "children": total }))).await?;
        }
    }
    Ok(())
}

/// Closes a coordinator's run SUCCEEDED with `result`, exactly once (as any finish: a
/// coordinator that is itself a child then counts towards its parent).
pub(super) async fn close_succeeded(
    txn: &DatabaseTransaction,
    run: RunRef,
    result: serde_json::Value,
) -> Result<Option<JobStatus>, StoreError> {
    let closed = Box::pin(finish_in(txn, run, &Completion::Succeeded { result })).await?;
    Ok(closed.map(|job| job.status))
}

/// A batch or child failed for good: the parent fails, `child.failed` naming it. Callers
/// hold the parent's row locked as this run's, so its compare-and-set cannot miss.
async fn fail_parent(
    txn: &DatabaseTransaction,
    run: RunRef,
    which: serde_json::Value,
    name: &str,
    error_code: &str,
    message: &str,
) -> Result<Option<JobStatus>, StoreError> {
    let mut fields = which;
    fields["error_code"] = json!(error_code);
    let child_failed = NewEvent::new(EventName::CHILD_FAILED).message(message).fields(fields).level(EventLevel::Error);
    append_event(txn, run.id, &child_failed).await?;
    let failed = Completion::Failed {
        error_code: CHILD_FAILED.to_owned(),
        message: format!("{name} failed: {error_code}: {message}"),
    };
    match Box::pin(finish_in(txn, run, &failed)).await? {
        Some(job) => Ok(Some(job.status)),
        None => Err(StoreError::Corrupt(format!("locked parent {} was not its run's", run.id))),
    }
}

/// What the fan-in path reads back from a parent it updates: not the whole row, whose
/// payload can be megabytes (a coordinator's inputs) and would be read and parsed again for
/// every batch counted.
struct Counters {
    operation: String,
    attempts: i32,
    progress_current: i64,
    progress_total: Option<i64>,
}

/// The counters of `parent` if it is its job's RUNNING run fanned out in batches, held until
/// the commit so that outcomes of one parent queue up here. On PostgreSQL a no-op update
/// locks the row. On SQLite the transaction already holds the one writer's lock, and an
/// update would rewrite the whole row, the coordinator's payload of megabytes with it (the
/// record is rebuilt and compared page by page): a read is enough there, of the count beside
/// the row ([`fan_in::running_count`]), since the row's own counters are stored after the
/// payload; of the row only for a count started before migration 34.
async fn lock_parent(txn: &DatabaseTransaction, parent: RunRef) -> Result<Option<Counters>, DbErr> {
    if txn.get_database_backend() == DbBackend::Sqlite {
        if let Some((operation, done, total)) = fan_in::running_count(txn, parent).await? {
            return Ok(Some(Counters {
                operation,
                attempts: parent.attempt,
                progress_current: done,
                progress_total: Some(total),
            }));
        }
        let row = job::Entity::find()
            .select_only()
            .columns([
                job::Column::Operation,
                job::Column::Attempts,
                job::Column::ProgressCurrent,
                job::Column::ProgressTotal,
            ])
            .filter(job::Column::Id.eq(parent.id))
            .filter(job::Column::Attempts.eq(parent.attempt))
            .filter(job::Column::Status.eq(JobStatus::Running))
            .filter(job::Column::FanOut.eq(FanOutForm::Batches.as_str()))
            .into_tuple::<(String, i32, i64, Option<i64>)>()
            .one(txn)
            .await?;
        return Ok(row.map(|(operation, attempts, progress_current, progress_total)| Counters {
            operation,
            attempts,
            progress_current,
            progress_total,
        }));
    }
    let locked = running(parent)
        .filter(job::Column::FanOut.eq(FanOutForm::Batches.as_str()))
        .col_expr(job::Column::ProgressCurrent, Expr::col(job::Column::ProgressCurrent));
    counters(txn, locked).await
}

/// Runs `update` (a compare-and-set on one job row), returning the row's [`Counters`] if it
/// matched.
async fn counters(txn: &DatabaseTransaction, update: UpdateMany<job::Entity>) -> Result<Option<Counters>, DbErr> {
    let mut statement = update.into_query();
    statement.returning(Query::returning().columns([
        job::Column::Operation,
        job::Column::Attempts,
        job::Column::ProgressCurrent,
        job::Column::ProgressTotal,
    ]));
    let Some(row) = txn.query_one(&statement).await? else { return Ok(None) };
    Ok(Some(Counters {
        operation: row.try_get("", job::Column::Operation.as_str())?,
        attempts: row.try_get("", job::Column::Attempts.as_str())?,
        progress_current: row.try_get("", job::Column::ProgressCurrent.as_str())?,
        progress_total: row.try_get("", job::Column::ProgressTotal.as_str())?,
    }))
}

/// `UPDATE job … WHERE` this run is the job's RUNNING one.
pub(super) fn running(run: RunRef) -> UpdateMany<job::Entity> {
    job::Entity::update_many()
        .filter(job::Column::Id.eq(run.id))
        .filter(job::Column::Attempts.eq(run.attempt))
        .filter(job::Column::Status.eq(JobStatus::Running))
}

/// A batch's result as it is recorded, and the rows its coordinator's operation writes
/// with it ([`Reduce::batch_rows`]); a panic or a refusal there fails the batch instead.
fn batch_rows(
    reduce: &dyn Reduce,
    operation: &str,
    parent: RunRef,
    result: &BatchResult,
) -> (BatchResult, Option<sea_orm::sea_query::InsertStatement>) {
    let BatchResult::Succeeded { output } = result else { return (result.clone(), None) };
    let refused = |message: String| BatchResult::Failed { error_code: INVALID_BATCH_OUTPUT.into(), message };
    match std::panic::catch_unwind(AssertUnwindSafe(|| reduce.batch_rows(operation, parent, output))) {
        Ok(Ok(BatchRows { kept, insert })) => (BatchResult::Succeeded { output: kept }, insert),
        Ok(Err(message)) => (refused(message), None),
        Err(_) => (refused("the operation's batch_rows panicked".into()), None),
    }
}

/// Inserts the outcomes not recorded before (the `job_batch` key makes a redelivered one a
/// no-op), in multi-row statements: the batch numbers inserted.
async fn insert_new(
    txn: &DatabaseTransaction,
    outcomes: &[&BatchOutcome],
    results: &[(BatchResult, Option<sea_orm::sea_query::InsertStatement>)],
    now: chrono::DateTime<Utc>,
) -> Result<HashSet<i64>, DbErr> {
    let backend = txn.get_database_backend();
    let columns =
        ["parent_job_id", "attempt", "batch", "status", "output", "error_code", "error_message", "finished_at"];
    let mut inserted = HashSet::with_capacity(outcomes.len());
    for (outcomes, results) in outcomes.chunks(INSERT_CHUNK).zip(results.chunks(INSERT_CHUNK)) {
        let mut insert = MultiInsert::new(backend, "job_batch", columns);
        for (outcome, (result, _)) in outcomes.iter().zip(results) {
            insert.row(batch_row(outcome, result, now));
        }
        let mut statement = insert.into_statement();
        statement.sql.push_str(r#" ON CONFLICT ("parent_job_id", "attempt", "batch") DO NOTHING RETURNING "batch""#);
        for row in txn.query_all_raw(statement).await? {
            inserted.insert(row.try_get::<i64>("", "batch")?);
        }
    }
    Ok(inserted)
}

/// A `job_batch` row's values, in [`insert_new`]'s column order.
fn batch_row(outcome: &BatchOutcome, result: &BatchResult, now: chrono::DateTime<Utc>) -> [Value; 8] {
    let (status, output, error_code, error_message) = match result {
        BatchResult::Succeeded { output } => ("succeeded", Some(output.clone()), None, None),
        BatchResult::Failed { error_code, message } => {
            ("failed", None, Some(error_code.clone()), Some(message.clone()))
        }
    };
    [
        outcome.parent_job_id.into(),
        outcome.attempt.into(),
        outcome.index.into(),
        status.into(),
        output.into(),
        error_code.into(),
        error_message.into(),
        now.into(),
    ]
}
