//! A submission's new row and the statement that inserts rows, an event row as the domain's
//! event, and the clock used in SQL.

use crate::store::clock;
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{DbBackend, IdenStatic, Iterable, ModelTrait, Statement, Value};
use uuid::Uuid;

use super::super::entity::{job, job_event};
use super::super::StoreError;
use super::insert_sql::MultiInsert;
use crate::domain::{EventLevel, JobEvent, JobStatus, NewJob};

/// `INSERT INTO job (…every column…) VALUES …`, a row per model; with `rowids` (SQLite's
/// placement, one per row), each at its own. Values are bound as they are: no column of
/// `job` casts its value on the way in (SeaORM's `save_as`, which a native enum column would
/// need); a test below holds that.
pub(super) fn insert_statement(backend: DbBackend, rows: &[job::Model], rowids: Option<&[i64]>) -> Statement {
    let columns = job::Column::iter().map(|column| column.as_str());
    let mut insert = match rowids {
        Some(_) => MultiInsert::new(backend, "job", std::iter::once("rowid").chain(columns)),
        None => MultiInsert::new(backend, "job", columns),
    };
    for (at, row) in rows.iter().enumerate() {
        let rowid = rowids.map(|rowids| Value::from(rowids[at]));
        insert.row(rowid.into_iter().chain(job::Column::iter().map(|column| row.get(column))));
    }
    insert.into_statement()
}

/// "Now" for lease and timeout arithmetic. On PostgreSQL it is the database's clock, so
/// workers on many hosts judge leases by one clock; SQLite is embedded, one host, one clock.
pub(super) fn db_now(backend: DbBackend) -> Expr {
    match backend {
        DbBackend::Postgres => Expr::cust("CURRENT_TIMESTAMP"),
        _ => Expr::value(clock::now()),
    }
}

/// `db_now` shifted by `offset_ms` milliseconds (negative: in the past).
pub(super) fn db_now_plus(backend: DbBackend, offset_ms: i64) -> Expr {
    match backend {
        DbBackend::Postgres => Expr::cust(format!("CURRENT_TIMESTAMP + INTERVAL '{offset_ms} milliseconds'")),
        _ => Expr::value(clock::now() + chrono::Duration::milliseconds(offset_ms)),
    }
}

/// A QUEUED job that may start now: not waiting out a delay or its `run_at`, not past its
/// `expires_at` (the reaper cancels it), not of a paused queue, and not held by its limit
/// (the limit admits it when it allows). Judged by [`db_now`]:
/// the clock the dispatch sweep and the reaper use. Every claim filters with it, whatever
/// stale message arrives, so a pause holds from its commit on, in every process.
pub fn startable(backend: DbBackend) -> sea_orm::sea_query::SimpleExpr {
    let due = Expr::col(job::Column::RunAfter).is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend)));
    let alive = Expr::col(job::Column::ExpiresAt).is_null().or(Expr::col(job::Column::ExpiresAt).gt(db_now(backend)));
    due.and(alive).and(Expr::cust(NOT_PAUSED)).and(Expr::col(job::Column::HeldSince).is_null())
}

/// The term by which a look for QUEUED, FAILED or CANCELLED jobs reads the status indexes
/// (`ix_job_status_id`, `ix_job_room_status_id`), which hold neither succeeded nor running
/// jobs on SQLite (migrations 35 and 37) and no succeeded one on PostgreSQL (migration 32):
/// SQLite reads a partial index only for a query whose condition holds the index's own term
/// as written; PostgreSQL proves its own from the status alone. RUNNING jobs are found
/// through `ix_job_running_lease` on SQLite, by `status = 'running'` alone.
pub const STATUS_INDEXED: &str = "status NOT IN ('succeeded', 'running')";

/// The condition of jobs of `status`, as a literal (of a closed set, so PostgreSQL plans
/// each status on its own) with the term of the index it reads.
pub fn of_status(status: JobStatus) -> String {
    match status {
        JobStatus::Succeeded | JobStatus::Running => format!("status = '{}'", status.as_str()),
        status => format!("status = '{}' AND {STATUS_INDEXED}", status.as_str()),
    }
}

/// `column` as a look at RUNNING jobs filters by it: on SQLite `+column`, which no index
/// serves, so its planner reads `ix_job_running_lease` (the running jobs, which the
/// workers' slots bound) and never walks a room's or a queue's history through an index of
/// that column to find them (migration 37); the column itself otherwise.
pub fn beside_status(backend: DbBackend, status: Option<JobStatus>, column: job::Column) -> Expr {
    match backend == DbBackend::Sqlite && status == Some(JobStatus::Running) {
        true => Expr::cust(format!("+{}", column.as_str())),
        false => Expr::col(column),
    }
}

/// The job's queue is not paused (`queue_state`, migration 19).
pub(super) const NOT_PAUSED: &str =
    "NOT EXISTS (SELECT 1 FROM queue_state WHERE queue_state.name = job.queue AND queue_state.paused_at IS NOT NULL)";

/// Longest delay or timeout the store computes with (a century): keeps date arithmetic far
/// from overflow whatever a configuration or an operation asks for.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

pub(super) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.min(LONGEST).as_millis()).unwrap_or(i64::MAX / 2)
}

pub(super) fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::milliseconds(millis(duration))
}

pub(super) fn new_row(new: &NewJob) -> job::Model {
    // A job with dependencies is written waiting (and so held, unsent); `dependencies::link`
    // lets it go at once if they have all ended already.
    let waiting = (!new.depends_on.is_empty()).then(clock::now);
    job::Model {
        id: new.id.unwrap_or_else(Uuid::now_v7),
        room: new.room.as_str().to_owned(),
        operation: new.operation.clone(),
        queue: new.queue.as_str().to_owned(),
        payload: new.payload.clone(),
        result: None,
        status: JobStatus::Queued,
        parent_job_id: new.parent_job_id,
        progress_current: 0,
        progress_total: None,
        attempts: 0,
        max_retries: new.max_retries,
        error_code: None,
        error_message: None,
        idempotency_key: new.idempotency_key.clone(),
        created_at: clock::now(),
        started_at: None,
        finished_at: None,
        leased_until: None,
        owner: None,
        run_after: new.run_after,
        published_at: (new.announced && new.run_after.is_none() && waiting.is_none()).then(clock::now),
        failures: 0,
        retry_policy: new.retry_policy.clone(),
        fan_out: None,
        deferred_at: None,
        submitted_by: new.submitted_by.clone(),
        service: new.service.clone(),
        cleaned_at: None,
        timeout_seconds: new.timeout_seconds,
        expires_at: new.expires_at,
        priority: i16::from(new.priority),
        effective_priority: i16::from(new.priority),
        ages_at: new.ages_at.filter(|_| new.priority > 0),
        limit_key: new.limit.as_ref().map(|limit| limit.key.clone()),
        rate_key: new.limit.as_ref().filter(|limit| limit.rate.is_some()).map(|limit| limit.key.clone()),
        // Admission decides (`limits::admit`), in the inserting transaction.
        held_since: waiting,
        unique_key: new.unique.as_ref().map(|unique| unique.key.clone()),
        waiting_since: waiting,
        has_dependents: false,
        on_dependency_failure: waiting.map(|_| new.on_dependency_failure.as_str().to_owned()),
    }
}

pub(super) fn to_event(row: job_event::Model) -> Result<JobEvent, StoreError> {
    let level = row.level.parse::<EventLevel>().map_err(StoreError::Corrupt)?;
    Ok(JobEvent {
        id: row.id,
        job_id: row.job_id,
        ts: row.ts,
        event: row.event,
        message: row.message,
        fields: row.fields,
        level,
    })
}

#[cfg(test)]
mod tests {
    use sea_orm::sea_query::Expr;
    use sea_orm::{ColumnTrait, Iterable};

    use super::job;

    #[test]
    fn no_job_column_casts_what_it_saves() {
        for column in job::Column::iter() {
            let value = Expr::val(1);
            assert_eq!(column.save_as(value.clone()), value, "{column:?} casts its value: insert_statement must too");
        }
    }

    /// A look at running jobs on SQLite names every other column as `+column`, which no
    /// index serves (its planner then reads the index of leases); any other look, and every
    /// look on PostgreSQL, names the column itself.
    #[test]
    fn a_look_at_running_jobs_hides_other_columns_from_sqlites_planner() {
        use sea_orm::sea_query::{ExprTrait as _, PostgresQueryBuilder, Query, SqliteQueryBuilder};
        use sea_orm::DbBackend;

        use crate::domain::JobStatus;

        let look = |backend: DbBackend, status: Option<JobStatus>| {
            let room = super::beside_status(backend, status, job::Column::Room);
            let query = Query::select().column(job::Column::Id).from(job::Entity).and_where(room.eq("a")).to_owned();
            match backend {
                DbBackend::Postgres => query.to_string(PostgresQueryBuilder),
                _ => query.to_string(SqliteQueryBuilder),
            }
        };
        let sql = look(DbBackend::Sqlite, Some(JobStatus::Running));
        assert!(sql.contains("WHERE (+room) = 'a'"), "{sql}");
        for (backend, status) in [
            (DbBackend::Sqlite, None),
            (DbBackend::Sqlite, Some(JobStatus::Queued)),
            (DbBackend::Postgres, Some(JobStatus::Running)),
        ] {
            let sql = look(backend, status);
            assert!(sql.contains(r#"WHERE "room" = 'a'"#), "{backend:?} {status:?}: {sql}");
        }
    }
}
