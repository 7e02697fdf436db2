//! What the reaper and the dispatch sweep read and write: expired leases, stalled runs,
//! overdue queued jobs, and the publication bookkeeping of QUEUED jobs.

use crate::store::clock;
use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, UpdateMany,
};
use serde_json::json;
use uuid::Uuid;

use super::rows::{db_now, db_now_plus, millis, to_chrono};
use super::SeaStore;
use crate::domain::{EventLevel, EventName, FanOutForm, Job, JobStatus, NewEvent};
use crate::store::entity::{job, job_event};
use crate::store::{Dispatch, ExpiredLease, RunRef, StoreError};

impl SeaStore {
    pub(super) async fn find_expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError> {
        let backend = self.db.get_database_backend();
        let runs = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Attempts)
            // A literal, so both engines can use the partial index on running leases.
            .filter(Expr::cust("status = 'running'"))
            .filter(Expr::col(job::Column::LeasedUntil).lt(db_now(backend)))
            .order_by_asc(job::Column::LeasedUntil)
            .limit(limit)
            .into_tuple::<(Uuid, i32)>()
            .all(&self.db)
            .await?;
        let mut expired = Vec::with_capacity(runs.len());
        for (id, attempt) in runs {
            // A manual retry starts a fresh budget: count only requeues after the last one.
            let since = job_event::Entity::find()
                .select_only()
                .column(job_event::Column::Id)
                .filter(job_event::Column::JobId.eq(id))
                .filter(job_event::Column::Event.eq(EventName::RETRIED))
                .order_by_desc(job_event::Column::Id)
                .into_tuple::<i64>()
                .one(&self.db)
                .await?
                .unwrap_or(0);
            let requeues = job_event::Entity::find()
                .filter(job_event::Column::JobId.eq(id))
                .filter(job_event::Column::Id.gt(since))
                .filter(job_event::Column::Event.eq(EventName::LEASE_EXPIRED_REQUEUE))
                .count(&self.db)
                .await?;
            expired.push(ExpiredLease { run: RunRef { id, attempt }, requeues: requeues as i64 });
        }
        Ok(expired)
    }

    pub(super) async fn find_batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        let runs = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Attempts)
            .filter(job::Column::Status.eq(JobStatus::Running.as_str()))
            .filter(job::Column::FanOut.eq(FanOutForm::Batches.as_str()))
            .order_by_asc(job::Column::StartedAt)
            .limit(limit)
            .into_tuple::<(Uuid, i32)>()
            .all(&self.db)
            .await?;
        Ok(runs.into_iter().map(|(id, attempt)| RunRef { id, attempt }).collect())
    }

    pub(super) async fn find_stalled_runs(
        &self,
        timeout: Duration,
        stall: Duration,
        limit: u64,
    ) -> Result<Vec<RunRef>, StoreError> {
        let backend = self.db.get_database_backend();
        let overdue = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Attempts)
            .filter(Expr::cust("status = 'running'"))
            .filter(Expr::col(job::Column::StartedAt).lt(db_now_plus(backend, -millis(timeout))))
            .order_by_asc(job::Column::StartedAt)
            .limit(limit)
            .into_tuple::<(Uuid, i32)>()
            .all(&self.db)
            .await?;
        // Progress-aware: a run past its timeout that still writes events is alive. Event
        // times and "now" both come from the database's clock.
        let mut stalled = Vec::new();
        for (id, attempt) in overdue {
            let recent = job_event::Entity::find()
                .filter(job_event::Column::JobId.eq(id))
                .filter(Expr::col(job_event::Column::Ts).gte(db_now_plus(backend, -millis(stall))))
                .count(&self.db)
                .await?;
            if recent == 0 {
                stalled.push(RunRef { id, attempt });
            }
        }
        Ok(stalled)
    }

    pub(super) async fn find_overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        let backend = self.db.get_database_backend();
        let since = clock::now() - to_chrono(timeout);
        let ids = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(Expr::cust("status = 'queued'"))
            // Waiting counts from when the job became runnable.
            .filter(
                (job::Column::RunAfter.is_null().and(job::Column::CreatedAt.lt(since)))
                    .or(Expr::col(job::Column::RunAfter).lt(db_now_plus(backend, -millis(timeout)))),
            )
            .limit(limit)
            .into_tuple::<Uuid>()
            .all(&self.db)
            .await?;
        Ok(ids)
    }

    pub(super) async fn fail_queued_job(
        &self,
        id: Uuid,
        error_code: &str,
        message: &str,
    ) -> Result<Option<Job>, StoreError> {
        let now = clock::now();
        let event = NewEvent::new(EventName::FAILED)
            .message(message)
            .fields(json!({ "error_code": error_code }))
            .level(EventLevel::Error);
        let (error_code, message) = (error_code.to_owned(), message.to_owned());
        let set = move |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::FinishedAt, Expr::value(now))
                .col_expr(job::Column::ErrorCode, Expr::value(error_code))
                .col_expr(job::Column::ErrorMessage, Expr::value(message))
        };
        self.transition(id, &[JobStatus::Queued], JobStatus::Failed, set, event).await
    }

    pub(super) async fn record_publications<C: ConnectionTrait>(
        &self,
        db: &C,
        jobs: &[Dispatch],
    ) -> Result<u64, StoreError> {
        let mut by_attempts: BTreeMap<i32, Vec<Uuid>> = BTreeMap::new();
        for job in jobs {
            by_attempts.entry(job.attempts).or_default().push(job.id);
        }
        let now = clock::now();
        let mut marked = 0;
        for (attempts, ids) in by_attempts {
            let result = job::Entity::update_many()
                .col_expr(job::Column::PublishedAt, Expr::value(now))
                .filter(job::Column::Id.is_in(ids))
                .filter(job::Column::Attempts.eq(attempts))
                // Inside `coalesce`, so no partial index on QUEUED rows can serve it: the
                // rows are found by primary key, however stale the statistics.
                .filter(Expr::cust("coalesce(status = 'queued', false)"))
                .filter(job::Column::PublishedAt.is_null())
                .exec(db)
                .await?;
            marked += result.rows_affected;
        }
        Ok(marked)
    }

    pub(super) async fn find_due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        let now = clock::now();
        let rows = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Queue)
            .column(job::Column::Attempts)
            // Literals, so both engines can use the partial index on undispatched jobs.
            .filter(Expr::cust("status = 'queued' AND published_at IS NULL"))
            // Fresh submissions get `grace` for their submitter to publish them; a job
            // waiting out a delay is nobody else's to publish once the delay is over.
            .filter(
                (job::Column::RunAfter.is_null().and(job::Column::CreatedAt.lte(now - to_chrono(grace))))
                    .or(Expr::col(job::Column::RunAfter).lte(db_now(self.db.get_database_backend()))),
            )
            .order_by_asc(job::Column::CreatedAt)
            .limit(limit)
            .into_tuple::<(Uuid, String, i32)>()
            .all(&self.db)
            .await?;
        Ok(rows.into_iter().map(|(id, queue, attempts)| Dispatch { id, queue, attempts }).collect())
    }

    pub(super) async fn clear_publication(&self, dispatch: &Dispatch) -> Result<bool, StoreError> {
        let result = job::Entity::update_many()
            .col_expr(job::Column::PublishedAt, Expr::value(None::<chrono::DateTime<Utc>>))
            .filter(job::Column::Id.eq(dispatch.id))
            .filter(job::Column::Attempts.eq(dispatch.attempts))
            .filter(job::Column::Status.eq(JobStatus::Queued.as_str()))
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    pub(super) async fn clear_publications(&self) -> Result<u64, StoreError> {
        let result = job::Entity::update_many()
            .col_expr(job::Column::PublishedAt, Expr::value(None::<chrono::DateTime<Utc>>))
            .filter(job::Column::Status.eq(JobStatus::Queued.as_str()))
            .filter(job::Column::PublishedAt.is_not_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected)
    }
}
