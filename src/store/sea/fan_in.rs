//! A running batch parent's count on SQLite, kept beside its row (`job_fan_in`, migration
//! 33). SQLite rebuilds a whole record on update, and a coordinator's row holds its inputs:
//! counting each batch there copied megabytes a batch. The count moves in the batch's own
//! transaction, as on the row before; a trigger folds it into `progress_current` when the run
//! leaves RUNNING, and reads of a running parent take it from here. PostgreSQL counts on the
//! row (a large payload is stored out of line there).

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement};
use uuid::Uuid;

use crate::domain::{FanOutForm, Job, JobStatus, JobSummary};
use crate::store::RunRef;

/// Whether `db` keeps batch counts beside the row.
pub(super) fn beside<C: ConnectionTrait>(db: &C) -> bool {
    db.get_database_backend() == DbBackend::Sqlite
}

/// Moves `parent`'s count by `by`, from `seed` (its row's count) if nothing was counted
/// beside it yet; the count after.
pub(super) async fn count(txn: &DatabaseTransaction, parent: RunRef, seed: i64, by: i64) -> Result<i64, DbErr> {
    let statement = Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "INSERT INTO job_fan_in (job_id, attempt, done) VALUES (?, ?, ?) \
         ON CONFLICT (job_id, attempt) DO UPDATE SET done = done + ? RETURNING done",
        [parent.id.into(), parent.attempt.into(), (seed + by).into(), by.into()],
    );
    let row = txn.query_one_raw(statement).await?.ok_or_else(|| DbErr::RecordNotFound("a fan-in count".into()))?;
    row.try_get_by_index::<i64>(0)
}

/// Starts `run`'s count afresh, beside its row when it fans out in batches (with its
/// `total`): a count is then beside the row for as long as the run lasts, and a running
/// batch parent with none has ended since its row was read.
pub(super) async fn start(txn: &DatabaseTransaction, run: RunRef, form: FanOutForm, total: i64) -> Result<(), DbErr> {
    let forget =
        Statement::from_sql_and_values(DbBackend::Sqlite, "DELETE FROM job_fan_in WHERE job_id = ?", [run.id.into()]);
    txn.execute_raw(forget).await?;
    if form == FanOutForm::Batches {
        let start = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "INSERT INTO job_fan_in (job_id, attempt, done, total) VALUES (?, ?, 0, ?)",
            [run.id.into(), run.attempt.into(), total.into()],
        );
        txn.execute_raw(start).await?;
    }
    Ok(())
}

/// A running batch parent's count as the fan-in path reads it inside a writer's
/// transaction: `(operation, done, total)` of `parent` if its run is RUNNING in batches,
/// read from beside its row and the row's operation (stored before the payload, so no page
/// of a coordinator's inputs is read). `None` when the count has no total beside it: the
/// run has ended, or it fanned out before migration 34; its row says which.
pub(super) async fn running_count(
    txn: &DatabaseTransaction,
    parent: RunRef,
) -> Result<Option<(String, i64, i64)>, DbErr> {
    let statement = Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "SELECT job.operation, job_fan_in.done, job_fan_in.total FROM job_fan_in JOIN job ON job.id = job_fan_in.job_id \
         WHERE job_fan_in.job_id = ? AND job_fan_in.attempt = ? AND job_fan_in.total IS NOT NULL",
        [parent.id.into(), parent.attempt.into()],
    );
    let Some(row) = txn.query_one_raw(statement).await? else { return Ok(None) };
    Ok(Some((row.try_get_by_index(0)?, row.try_get_by_index(1)?, row.try_get_by_index(2)?)))
}

/// The `progress_current` of these jobs' rows, as stored now.
async fn on_rows<C: ConnectionTrait>(db: &C, ids: &[Uuid]) -> Result<HashMap<Uuid, i64>, DbErr> {
    let mut counts = HashMap::new();
    for some in ids.chunks(400) {
        let marks = vec!["?"; some.len()].join(", ");
        let statement = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("SELECT id, progress_current FROM job WHERE id IN ({marks})"),
            some.iter().map(|id| (*id).into()),
        );
        for row in db.query_all_raw(statement).await? {
            counts.insert(row.try_get_by_index::<Uuid>(0)?, row.try_get_by_index::<i64>(1)?);
        }
    }
    Ok(counts)
}

/// Rows a statement took out of RUNNING, with their counts as the trigger folded them:
/// SQLite's `RETURNING` gives a row as it was before its `AFTER` triggers ran.
pub(super) async fn folded(txn: &DatabaseTransaction, rows: &mut [Job]) -> Result<(), DbErr> {
    if !beside(txn) {
        return Ok(());
    }
    let batches = Some(FanOutForm::Batches.as_str());
    let ids: Vec<Uuid> = rows.iter().filter(|row| row.fan_out.as_deref() == batches).map(|row| row.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let counts = on_rows(txn, &ids).await?;
    for row in rows {
        if let Some(done) = counts.get(&row.id) {
            row.progress_current = *done;
        }
    }
    Ok(())
}

/// A job as some read returns it, whose count may be beside its row.
pub(super) trait Counted {
    /// `(id, attempt)` of its run if it is a running batch parent.
    fn batch_run(&self) -> Option<(Uuid, i32)>;
    fn set_count(&mut self, done: i64);
}

/// Whether a job so is a running batch parent.
fn running_batches(status: JobStatus, fan_out: Option<&str>) -> bool {
    status == JobStatus::Running && fan_out == Some(FanOutForm::Batches.as_str())
}

impl Counted for Job {
    fn batch_run(&self) -> Option<(Uuid, i32)> {
        running_batches(self.status, self.fan_out.as_deref()).then_some((self.id, self.attempts))
    }

    fn set_count(&mut self, done: i64) {
        self.progress_current = done;
    }
}

impl Counted for JobSummary {
    fn batch_run(&self) -> Option<(Uuid, i32)> {
        running_batches(self.status, self.fan_out.as_deref()).then_some((self.id, self.attempts))
    }

    fn set_count(&mut self, done: i64) {
        self.progress_current = done;
    }
}

/// `jobs` with the counts of their running batch parents. One with no count beside its row
/// ended after its row was read (or fanned out before migration 33): its row holds the count.
pub(super) async fn apply<C: ConnectionTrait>(db: &C, jobs: &mut [impl Counted]) -> Result<(), DbErr> {
    if !beside(db) {
        return Ok(());
    }
    let runs: Vec<_> = jobs.iter().filter_map(Counted::batch_run).collect();
    if runs.is_empty() {
        return Ok(());
    }
    let mut counts = HashMap::new();
    // Within SQLite's limit of bound parameters.
    for some in runs.chunks(400) {
        let marks = vec!["(?, ?)"; some.len()].join(", ");
        let values = some.iter().flat_map(|(id, attempt)| [(*id).into(), (*attempt).into()]);
        let statement = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("SELECT job_id, attempt, done FROM job_fan_in WHERE (job_id, attempt) IN (VALUES {marks})"),
            values,
        );
        for row in db.query_all_raw(statement).await? {
            let run = (row.try_get_by_index::<Uuid>(0)?, row.try_get_by_index::<i32>(1)?);
            counts.insert(run, row.try_get_by_index::<i64>(2)?);
        }
    }
    let ended: Vec<Uuid> = runs.iter().filter(|run| !counts.contains_key(*run)).map(|(id, _)| *id).collect();
    let folded = match ended.is_empty() {
        true => HashMap::new(),
        false => on_rows(db, &ended).await?,
    };
    for job in jobs {
        let Some(run) = job.batch_run() else { continue };
        if let Some(done) = counts.get(&run).or_else(|| folded.get(&run.0)) {
            job.set_count(*done);
        }
    }
    Ok(())
}
