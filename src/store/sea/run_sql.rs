//! The SQL of a run's claim, outcome and lease renewal, one job at a time or many in one
//! statement: shared by the `RunWrites` methods (`runs.rs`) and the group-commit writer.

use crate::store::clock;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter, UpdateMany,
};
use serde_json::{json, Value};
use uuid::Uuid;

use super::rows::{db_now, db_now_plus, millis, startable};
use super::{apply_transition, compare_and_set_many, SeaStore};
use crate::domain::{EventLevel, EventName, Job, JobStatus, NewEvent};
use crate::store::entity::job;
use crate::store::{Completion, RunRef, StoreError};

type NoTime = Option<chrono::DateTime<Utc>>;

impl SeaStore {
    /// Session 1: QUEUED → RUNNING, leased until database-now + `lease`.
    pub(super) async fn claim_run(
        &self,
        shared: Option<&DatabaseTransaction>,
        id: Uuid,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Job>, StoreError> {
        let set = claim_update(self.db.get_database_backend(), owner, lease);
        self.transition_in(shared, id, &[JobStatus::Queued], JobStatus::Running, set, claim_event(owner)).await
    }

    /// Session 2: RUNNING → the completion's state, for this run only.
    pub(super) async fn finish_run(
        &self,
        shared: Option<&DatabaseTransaction>,
        run: RunRef,
        completion: &Completion,
    ) -> Result<Option<Job>, StoreError> {
        if let Some(txn) = shared {
            return finish_in(txn, run, completion).await;
        }
        let txn = self.write_txn().await?;
        let job = finish_in(&txn, run, completion).await?;
        if job.is_some() {
            txn.commit().await?;
        }
        Ok(job)
    }

    /// Many claims by one owner in one statement (a group commit). Returns the rows that
    /// moved to RUNNING, each with its `job.started` event to write.
    pub(super) async fn claim_runs(
        &self,
        txn: &DatabaseTransaction,
        ids: &[Uuid],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<(job::Model, NewEvent)>, DbErr> {
        let set = claim_update(self.db.get_database_backend(), owner, lease);
        let rows = ids.iter().copied();
        let claimed =
            compare_and_set_many(txn, job::Column::Id.is_in(rows), &[JobStatus::Queued], JobStatus::Running, set)
                .await?;
        Ok(claimed.into_iter().map(|row| (row, claim_event(owner))).collect())
    }

    /// Many outcomes of one status, each for its own run, in one statement (a group
    /// commit): the per-job columns are `CASE` expressions keyed by id. Only plain
    /// successes and failures: the other completions carry extra conditions. Returns the
    /// rows that moved, each with its event to write.
    pub(super) async fn finish_runs(
        &self,
        txn: &DatabaseTransaction,
        to: JobStatus,
        runs: &[(RunRef, &Completion)],
    ) -> Result<Vec<(job::Model, NewEvent)>, DbErr> {
        debug_assert!(runs.iter().all(|(_, completion)| completion.status() == to && Outcome::batchable(completion)));
        let now = clock::now();
        let mut events: HashMap<Uuid, NewEvent> = HashMap::new();
        let (mut result, mut error_code, mut error_message) = (Case::new(), Case::new(), Case::new());
        for (run, completion) in runs {
            let outcome = Outcome::of(completion);
            // A `CASE` without an arm for a row gives it NULL: arms only for values.
            result = result.when(run.id, outcome.result);
            error_code = error_code.when(run.id, outcome.error_code);
            error_message = error_message.when(run.id, outcome.error_message);
            events.insert(run.id, outcome.event);
        }
        let this_run = this_run(&runs.iter().map(|(run, _)| *run).collect::<Vec<_>>());
        let set = move |update: UpdateMany<job::Entity>| {
            let update = update
                .col_expr(job::Column::FinishedAt, Expr::value(now))
                .col_expr(job::Column::LeasedUntil, Expr::value(NoTime::None))
                .col_expr(job::Column::Result, result.end())
                .col_expr(job::Column::ErrorCode, error_code.end())
                .col_expr(job::Column::ErrorMessage, error_message.end());
            match to {
                JobStatus::Failed => update.col_expr(job::Column::Failures, Expr::col(job::Column::Failures).add(1)),
                _ => update,
            }
        };
        let finished = compare_and_set_many(txn, this_run, &[JobStatus::Running], to, set).await?;
        Ok(finished.into_iter().filter_map(|row| events.remove(&row.id).map(|event| (row, event))).collect())
    }

    /// Many lease renewals of one length in one statement (a group commit). Returns the jobs
    /// whose run was still current.
    pub(super) async fn extend_run_leases(
        &self,
        txn: &impl ConnectionTrait,
        runs: &[RunRef],
        lease: Duration,
    ) -> Result<HashSet<Uuid>, DbErr> {
        let backend = self.db.get_database_backend();
        let renewed = job::Entity::update_many()
            .col_expr(job::Column::LeasedUntil, db_now_plus(backend, millis(lease)))
            .filter(this_run(runs))
            .filter(job::Column::Status.eq(JobStatus::Running))
            // A deferred run holds no lease; a renewal sent before it deferred gives none.
            .filter(job::Column::DeferredAt.is_null())
            .exec_with_returning(txn)
            .await?;
        Ok(renewed.into_iter().map(|row| row.id).collect())
    }

    /// Lease renewal: a conditional update, no event (heartbeats are not progress).
    pub(super) async fn extend_run_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        let backend = self.db.get_database_backend();
        let result = job::Entity::update_many()
            .col_expr(job::Column::LeasedUntil, db_now_plus(backend, millis(lease)))
            .filter(job::Column::Id.eq(run.id))
            .filter(job::Column::Status.eq(JobStatus::Running))
            .filter(job::Column::Attempts.eq(run.attempt))
            .filter(job::Column::DeferredAt.is_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }
}

/// Session 2's write inside `txn`: RUNNING → the completion's state, for this run only,
/// with its event (and, for a child, its parent's count).
pub(super) async fn finish_in(
    txn: &DatabaseTransaction,
    run: RunRef,
    completion: &Completion,
) -> Result<Option<Job>, StoreError> {
    let backend = txn.get_database_backend();
    let now = clock::now();
    let counts_failure = completion.status() == JobStatus::Failed;
    let lease_must_be_expired = matches!(completion, Completion::LeaseExpired { .. });
    let Outcome { event, result, error_code, error_message } = Outcome::of(completion);
    let set = move |update: UpdateMany<job::Entity>| {
        let mut update = update
            .col_expr(job::Column::FinishedAt, Expr::value(now))
            .col_expr(job::Column::LeasedUntil, Expr::value(NoTime::None))
            .col_expr(job::Column::Result, Expr::value(result))
            .col_expr(job::Column::ErrorCode, Expr::value(error_code))
            .col_expr(job::Column::ErrorMessage, Expr::value(error_message))
            .filter(job::Column::Attempts.eq(run.attempt));
        if counts_failure {
            update = update.col_expr(job::Column::Failures, Expr::col(job::Column::Failures).add(1));
        }
        if lease_must_be_expired {
            update = update.filter(Expr::col(job::Column::LeasedUntil).lt(db_now(backend)));
        }
        update
    };
    apply_transition(txn, run.id, &[JobStatus::Running], completion.status(), set, &event).await
}

/// Clears what a run's fan-out left (`fan_out`, `deferred_at`): they belong to one run, and
/// the job's next run fans out afresh, if at all.
pub(super) fn forget_fan_out(update: UpdateMany<job::Entity>) -> UpdateMany<job::Entity> {
    update
        .col_expr(job::Column::FanOut, Expr::value(None::<String>))
        .col_expr(job::Column::DeferredAt, Expr::value(NoTime::None))
}

/// `(id, attempts) IN (…)`: the rows of exactly these runs.
fn this_run(runs: &[RunRef]) -> Expr {
    Expr::tuple([Expr::col(job::Column::Id), Expr::col(job::Column::Attempts)])
        .in_tuples(runs.iter().map(|run| (run.id, run.attempt)))
}

/// The claim's `SET` clauses and conditions beyond the status.
fn claim_update(
    backend: DbBackend,
    owner: &str,
    lease: Duration,
) -> impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity> {
    let now = clock::now();
    let owner = owner.to_owned();
    move |update| {
        let update = update
            .col_expr(job::Column::StartedAt, Expr::value(now))
            .col_expr(job::Column::Attempts, Expr::col(job::Column::Attempts).add(1))
            .col_expr(job::Column::LeasedUntil, db_now_plus(backend, millis(lease)))
            .col_expr(job::Column::Owner, Expr::value(owner))
            // A job waiting out a delay is not claimable early, nor one past its expiry,
            // whatever stale message arrives.
            .filter(startable(backend));
        forget_fan_out(update)
    }
}

fn claim_event(owner: &str) -> NewEvent {
    NewEvent::new(EventName::STARTED).fields(json!({ "owner": owner }))
}

/// What a completion writes: its event and the job's result or error columns.
pub(super) struct Outcome {
    pub(super) event: NewEvent,
    pub(super) result: Option<Value>,
    pub(super) error_code: Option<String>,
    pub(super) error_message: Option<String>,
}

impl Outcome {
    pub(super) fn of(completion: &Completion) -> Outcome {
        let failed = |event: &str, code: &str, message: &str| Outcome {
            event: NewEvent::new(event).message(message).fields(json!({ "error_code": code })).level(EventLevel::Error),
            result: None,
            error_code: Some(code.to_owned()),
            error_message: Some(message.to_owned()),
        };
        match completion {
            Completion::Succeeded { result } => Outcome {
                event: NewEvent::new(EventName::SUCCEEDED),
                result: Some(result.clone()),
                error_code: None,
                error_message: None,
            },
            Completion::Failed { error_code, message } => failed(EventName::FAILED, error_code, message),
            Completion::LeaseExpired { message } => failed(EventName::LEASE_EXPIRED, "lease_expired", message),
            Completion::CancelledByParent => Outcome {
                event: NewEvent::new(EventName::CANCELLED_BY_PARENT)
                    .message("parent was cancelled before this job ran"),
                result: None,
                error_code: None,
                error_message: None,
            },
        }
    }

    /// Whether [`SeaStore::finish_runs`] can write this completion with others.
    pub(super) fn batchable(completion: &Completion) -> bool {
        matches!(completion, Completion::Succeeded { .. } | Completion::Failed { .. })
    }
}

/// `CASE WHEN id = … THEN … END`: one column's per-job values in a multi-row update; a row
/// with no arm gets NULL (there is no `ELSE`).
struct Case(Option<CaseStatement>);

impl Case {
    fn new() -> Case {
        Case(None)
    }

    /// An arm for `id` when there is a value; none is NULL already.
    fn when<T: Into<sea_orm::Value>>(self, id: Uuid, value: Option<T>) -> Case {
        let Some(value) = value else {
            return self;
        };
        let condition = job::Column::Id.eq(id);
        let value = Expr::value(value);
        Case(Some(match self.0 {
            None => Expr::case(condition, value),
            Some(case) => case.case(condition, value),
        }))
    }

    /// Without a `WHEN`, `NULL`.
    fn end(self) -> Expr {
        self.0.map_or_else(Expr::null, |case| Expr::Case(Box::new(case)))
    }
}
