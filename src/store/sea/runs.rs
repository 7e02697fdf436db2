//! What a worker writes about its run: the claim, the outcome, a requeue, a lease renewal.
//! Every write after the claim names the run (`attempts`), so a run that was taken away
//! (reaper, shutdown) cannot touch a later run of the same job.

use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter, UpdateMany};
use serde_json::json;
use uuid::Uuid;

use super::rows::{db_now, db_now_plus, millis, to_chrono};
use super::SeaStore;
use crate::domain::{EventLevel, EventName, Job, JobStatus, NewEvent};
use crate::store::entity::job;
use crate::store::{Completion, Requeue, RunRef, StoreError};

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
        let backend = self.db.get_database_backend();
        let now = Utc::now();
        let owner = owner.to_owned();
        let event = NewEvent::new(EventName::STARTED).fields(json!({ "owner": owner }));
        let set = move |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::StartedAt, Expr::value(now))
                .col_expr(job::Column::Attempts, Expr::col(job::Column::Attempts).add(1))
                .col_expr(job::Column::LeasedUntil, db_now_plus(backend, millis(lease)))
                .col_expr(job::Column::Owner, Expr::value(owner))
                // A job waiting out a delay is not claimable early, whatever stale message
                // arrives; judged by the same clock the sweep uses to send it.
                .filter(job::Column::RunAfter.is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend))))
        };
        self.transition_in(shared, id, &[JobStatus::Queued], JobStatus::Running, set, event).await
    }

    /// Session 2: RUNNING → the completion's state, for this run only.
    pub(super) async fn finish_run(
        &self,
        shared: Option<&DatabaseTransaction>,
        run: RunRef,
        completion: &Completion,
    ) -> Result<Option<Job>, StoreError> {
        let backend = self.db.get_database_backend();
        let now = Utc::now();
        let failed = |event: &str, code: &str, message: &str| {
            let event =
                NewEvent::new(event).message(message).fields(json!({ "error_code": code })).level(EventLevel::Error);
            (event, None, Some(code.to_owned()), Some(message.to_owned()))
        };
        let (event, result, error_code, error_message) = match completion {
            Completion::Succeeded { result } => (NewEvent::new(EventName::SUCCEEDED), Some(result.clone()), None, None),
            Completion::Failed { error_code, message } => failed(EventName::FAILED, error_code, message),
            Completion::LeaseExpired { message } => failed(EventName::LEASE_EXPIRED, "lease_expired", message),
            Completion::CancelledByParent => {
                let event =
                    NewEvent::new(EventName::CANCELLED_BY_PARENT).message("parent was cancelled before this job ran");
                (event, None, None, None)
            }
        };
        let counts_failure = completion.status() == JobStatus::Failed;
        let lease_must_be_expired = matches!(completion, Completion::LeaseExpired { .. });
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
        self.transition_in(shared, run.id, &[JobStatus::Running], completion.status(), set, event).await
    }

    /// RUNNING → QUEUED for this run; `published_at` cleared so the dispatch sweep sends it.
    pub(super) async fn requeue_run(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        let backend = self.db.get_database_backend();
        let now = Utc::now();
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
        self.transition(run.id, &[JobStatus::Running], JobStatus::Queued, set, event).await
    }

    /// Lease renewal: a conditional update, no event (heartbeats are not progress).
    pub(super) async fn extend_run_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        let backend = self.db.get_database_backend();
        let result = job::Entity::update_many()
            .col_expr(job::Column::LeasedUntil, db_now_plus(backend, millis(lease)))
            .filter(job::Column::Id.eq(run.id))
            .filter(job::Column::Status.eq(JobStatus::Running.as_str()))
            .filter(job::Column::Attempts.eq(run.attempt))
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }
}
