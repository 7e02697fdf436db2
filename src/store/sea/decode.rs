//! Job rows decoded without an allocation per NULL column, for the statements every job
//! passes through (claims and outcomes, which return the rows they moved).
//!
//! SeaORM decodes an `Option<T>` column by asking for a `T` and turning the "null" error
//! into `None`, and that error is built with `format!` of the column's name: a job row
//! holds twenty-odd NULL columns, so each row decoded cost as many allocations (about 90
//! of a no-op job's 300 in the embedded drain, counted with heaptrack). Here a column is
//! first looked at in the driver's row, and only a value that is there is decoded, by
//! SeaORM's own decoding of its type, so a row reads exactly as the derived decoder reads it.

use sea_orm::sqlx::{Row as _, ValueRef as _};
use sea_orm::{DbErr, FromQueryResult, QueryResult, TryGetable};

use crate::store::entity::job;

/// A job row, decoded as [`job::Model`]'s derived decoder decodes it.
pub(super) struct JobRow(pub(super) job::Model);

/// Whether `column` holds SQL NULL in the driver's row; `false` when it cannot tell (no
/// such column: the decoding below then answers as SeaORM does).
fn is_null(res: &QueryResult, column: &str) -> bool {
    if let Some(row) = res.try_as_pg_row() {
        return row.try_get_raw(column).is_ok_and(|value| value.is_null());
    }
    if let Some(row) = res.try_as_sqlite_row() {
        return row.try_get_raw(column).is_ok_and(|value| value.is_null());
    }
    false
}

/// A nullable column: `None` for NULL with nothing built, else SeaORM's `Option<T>`.
fn nullable<T: TryGetable>(res: &QueryResult, column: &str) -> Result<Option<T>, DbErr> {
    if is_null(res, column) {
        return Ok(None);
    }
    Ok(res.try_get_nullable::<Option<T>>("", column)?)
}

/// A column that is never NULL.
fn value<T: TryGetable>(res: &QueryResult, column: &str) -> Result<T, DbErr> {
    res.try_get::<T>("", column)
}

impl FromQueryResult for JobRow {
    fn from_query_result(res: &QueryResult, pre: &str) -> Result<Self, DbErr> {
        if !pre.is_empty() {
            return job::Model::from_query_result(res, pre).map(JobRow);
        }
        // A struct literal: a column added to the model does not compile until it is here.
        Ok(JobRow(job::Model {
            id: value(res, "id")?,
            room: value(res, "room")?,
            operation: value(res, "operation")?,
            queue: value(res, "queue")?,
            status: value(res, "status")?,
            payload: value(res, "payload")?,
            result: nullable(res, "result")?,
            parent_job_id: nullable(res, "parent_job_id")?,
            progress_current: value(res, "progress_current")?,
            progress_total: nullable(res, "progress_total")?,
            attempts: value(res, "attempts")?,
            max_retries: value(res, "max_retries")?,
            error_code: nullable(res, "error_code")?,
            error_message: nullable(res, "error_message")?,
            idempotency_key: nullable(res, "idempotency_key")?,
            created_at: value(res, "created_at")?,
            started_at: nullable(res, "started_at")?,
            finished_at: nullable(res, "finished_at")?,
            leased_until: nullable(res, "leased_until")?,
            owner: nullable(res, "owner")?,
            run_after: nullable(res, "run_after")?,
            published_at: nullable(res, "published_at")?,
            failures: value(res, "failures")?,
            retry_policy: value(res, "retry_policy")?,
            fan_out: nullable(res, "fan_out")?,
            deferred_at: nullable(res, "deferred_at")?,
            submitted_by: nullable(res, "submitted_by")?,
            service: nullable(res, "service")?,
            cleaned_at: nullable(res, "cleaned_at")?,
            timeout_seconds: nullable(res, "timeout_seconds")?,
            expires_at: nullable(res, "expires_at")?,
            priority: value(res, "priority")?,
            effective_priority: value(res, "effective_priority")?,
            ages_at: nullable(res, "ages_at")?,
            limit_key: nullable(res, "limit_key")?,
            rate_key: nullable(res, "rate_key")?,
            held_since: nullable(res, "held_since")?,
            unique_key: nullable(res, "unique_key")?,
            waiting_since: nullable(res, "waiting_since")?,
            has_dependents: value(res, "has_dependents")?,
            on_dependency_failure: nullable(res, "on_dependency_failure")?,
        }))
    }
}
