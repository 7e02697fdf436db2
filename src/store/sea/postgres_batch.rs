//! PostgreSQL's group-commit claims and outcomes, each one statement of fixed text: the
//! batch travels as one `jsonb` parameter, the compare-and-set `UPDATE` and the `INSERT` of
//! the moved rows' events are one data-modifying `WITH`. A fixed text is parsed once per
//! connection (the driver's statement cache), the rows are matched by a join instead of a
//! `CASE` per column, and the events take no round trip of their own.
//!
//! Each row is still judged by its own status (and run, for outcomes), exactly as
//! [`super::compare_and_set_many`] judges it, and only a row that moved gets its event.
//!
//! The rows are found by `id = ANY(ARRAY(…))`, a primary-key lookup whatever the table's
//! statistics say, and the status is compared inside `coalesce(…)`, which no index can
//! serve. Statistics go stale after a burst of submissions (autovacuum analyses a table
//! after a tenth of it changed): the planner then took the status index for nearly empty
//! of QUEUED rows and scanned all of them for every batch of claims, quadratic in the
//! backlog (240 µs of PostgreSQL CPU per claim at 20,000 queued jobs; 50,000 beside
//! 1,000,000 finished drained at 0.18× the empty-table rate).

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, FromQueryResult as _, Statement, Value as SqlValue};
use serde_json::{json, Value};
use uuid::Uuid;

use super::decode::JobRow;
use super::rows::millis;
use super::run_sql::Outcome;
use crate::domain::{EventName, JobStatus};
use crate::store::clock;
use crate::store::entity::job;
use crate::store::{Completion, RunRef};

/// QUEUED → RUNNING for every id of `$1` (a JSON array) still QUEUED, due, not expired and
/// not of a paused queue nor held by its limit (as `startable`), leased until
/// database-now + `$3` ms, each with its `job.started` event.
const CLAIM: &str = "\
WITH moved AS (
    UPDATE job SET status = 'running', started_at = $2, attempts = attempts + 1,
        leased_until = CURRENT_TIMESTAMP + make_interval(secs => $3::float8 / 1000), owner = $4,
        fan_out = NULL, deferred_at = NULL
    WHERE id = ANY(ARRAY(SELECT value::uuid FROM jsonb_array_elements_text($1::jsonb)))
        AND coalesce(status = 'queued', false) AND (run_after IS NULL OR run_after <= CURRENT_TIMESTAMP)
        AND (expires_at IS NULL OR expires_at > CURRENT_TIMESTAMP)
        AND NOT EXISTS (SELECT 1 FROM queue_state WHERE queue_state.name = job.queue AND queue_state.paused_at IS NOT NULL)
        AND held_since IS NULL
    RETURNING job.*
), started AS (
    INSERT INTO job_event (job_id, ts, event, message, fields, level)
    SELECT id, $2, 'job.started', NULL, jsonb_build_object('owner', owner), 'info' FROM moved
)
SELECT * FROM moved";

/// RUNNING → `$2` for every run of `$1` (a JSON array of `{id, attempts, result,
/// error_code, error_message, event, message, fields, level}`) still RUNNING, each with
/// its event; `failures` grows by `$4`. A child of a parent (`parent_job_id`) moves only
/// when `$5`: its parent's counter must move in the same transaction. A result comes wrapped in a one-element array, so a
/// JSON `null` result stays jsonb `null` (as every other path stores it), not SQL NULL.
const FINISH: &str = "\
WITH runs AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS runs(id uuid, attempts int, result jsonb,
        error_code text, error_message text, event text, message text, fields jsonb, level text)
), moved AS (
    UPDATE job SET status = $2, finished_at = $3, leased_until = NULL, result = runs.result -> 0,
        error_code = runs.error_code, error_message = runs.error_message,
        failures = job.failures + $4
    FROM runs
    WHERE job.id = ANY(ARRAY(SELECT id FROM runs)) AND job.id = runs.id AND job.attempts = runs.attempts
        AND coalesce(job.status = 'running', false) AND ($5 OR job.parent_job_id IS NULL)
    RETURNING job.*
), ended AS (
    INSERT INTO job_event (job_id, ts, event, message, fields, level)
    SELECT moved.id, $3, runs.event, runs.message, runs.fields, runs.level
    FROM moved JOIN runs ON runs.id = moved.id
)
SELECT * FROM moved";

/// Claims by one owner, events written: the rows that moved to RUNNING.
pub(super) async fn claim(
    txn: &impl ConnectionTrait,
    ids: &[Uuid],
    owner: &str,
    lease: Duration,
) -> Result<Vec<job::Model>, DbErr> {
    debug_assert_eq!(EventName::STARTED, "job.started");
    let values: Vec<SqlValue> = vec![json!(ids).into(), clock::now().into(), millis(lease).into(), owner.into()];
    let rows =
        JobRow::find_by_statement(Statement::from_sql_and_values(DbBackend::Postgres, CLAIM, values)).all(txn).await?;
    Ok(rows.into_iter().map(|JobRow(row)| row).collect())
}

/// Plain outcomes of one status, each for its own run, events written: the rows that moved.
/// A child moves only `with_children` (see [`FINISH`]).
pub(super) async fn finish(
    txn: &impl ConnectionTrait,
    to: JobStatus,
    runs: &[(RunRef, &Completion)],
    with_children: bool,
) -> Result<Vec<job::Model>, DbErr> {
    let rows: Vec<Value> = runs
        .iter()
        .map(|(run, completion)| {
            let Outcome { event, result, error_code, error_message } = Outcome::of(completion);
            json!({
                "id": run.id, "attempts": run.attempt, "result": result.map(|result| [result]),
                "error_code": error_code, "error_message": error_message,
                "event": event.event, "message": event.message, "fields": event.fields,
                "level": event.level.as_str(),
            })
        })
        .collect();
    let failures = i32::from(to == JobStatus::Failed);
    let values: Vec<SqlValue> =
        vec![Value::Array(rows).into(), to.as_str().into(), clock::now().into(), failures.into(), with_children.into()];
    let rows =
        JobRow::find_by_statement(Statement::from_sql_and_values(DbBackend::Postgres, FINISH, values)).all(txn).await?;
    Ok(rows.into_iter().map(|JobRow(row)| row).collect())
}
