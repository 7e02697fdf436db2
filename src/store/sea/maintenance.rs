//! What the reaper, the start-up recovery and the cleaner read and write: expired leases,
//! stalled runs, overdue queued jobs, lost batches, the runs one owner holds, an uploaded
//! job's files marked removed, and the history of long finished jobs deleted in bounded
//! batches, each a compare-and-set on rows that cannot move under it.

use std::time::Duration;

use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, UpdateMany};
use serde_json::json;
use uuid::Uuid;

use super::rows::{db_now, db_now_plus, millis, of_status, to_chrono};
use super::{append_event, SeaStore};
use crate::domain::{EventLevel, EventName, FanOutForm, Job, JobStatus, NewEvent};
use crate::store::entity::{job, job_event};
use crate::store::{clock, Call, Change, ExpiredLease, Maintenance, Pruned, RunRef, StoreError};

const QUEUED: &[JobStatus] = &[JobStatus::Queued];
const FINISHED: &[JobStatus] = &[JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled];
/// The event of a job whose files the cleaner removed.
const CLEANED: &str = "job.cleaned";

#[async_trait]
impl Maintenance for SeaStore {
    async fn expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError> {
        self.before(Call::Upkeep("expired_leases")).await?;
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

    async fn stalled_runs(&self, timeout: Duration, stall: Duration, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.before(Call::Upkeep("stalled_runs")).await?;
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

    async fn overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        self.before(Call::Upkeep("overdue_queued")).await?;
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

    async fn fail_queued(&self, id: Uuid, error_code: &str, message: &str) -> Result<Option<Job>, StoreError> {
        self.before(Call::Upkeep("fail_queued")).await?;
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
        let job = self.transition(id, QUEUED, JobStatus::Failed, set, event).await?;
        if let Some(job) = &job {
            let changes = [Change::Moved { job, was: QUEUED, event: EventName::FAILED }];
            self.announce(Call::Upkeep("fail_queued"), &changes).await?;
        }
        Ok(job)
    }

    async fn expired_queued(&self, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        self.before(Call::Upkeep("expired_queued")).await?;
        let backend = self.db.get_database_backend();
        let ids = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            // A literal, so both engines read the partial index on expiring jobs.
            .filter(Expr::cust("status = 'queued' AND expires_at IS NOT NULL"))
            .filter(Expr::col(job::Column::ExpiresAt).lte(db_now(backend)))
            .order_by_asc(job::Column::ExpiresAt)
            .limit(limit)
            .into_tuple::<Uuid>()
            .all(&self.db)
            .await?;
        Ok(ids)
    }

    async fn expire(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.before(Call::Upkeep("expire")).await?;
        let backend = self.db.get_database_backend();
        let now = clock::now();
        let event =
            NewEvent::new(EventName::EXPIRED).message("not started by its expires_at").level(EventLevel::Warning);
        let set = move |update: UpdateMany<job::Entity>| {
            update
                .col_expr(job::Column::FinishedAt, Expr::value(now))
                .filter(Expr::col(job::Column::ExpiresAt).lte(db_now(backend)))
        };
        let job = self.transition(id, QUEUED, JobStatus::Cancelled, set, event).await?;
        if let Some(job) = &job {
            let changes = [Change::Moved { job, was: QUEUED, event: EventName::EXPIRED }];
            self.announce(Call::Upkeep("expire"), &changes).await?;
        }
        Ok(job)
    }

    async fn overdue_runs(&self, grace: Duration, limit: u64) -> Result<Vec<Job>, StoreError> {
        self.before(Call::Upkeep("overdue_runs")).await?;
        // RUNNING rows are few (at most every worker's slots): read when each of those with
        // a timeout started, judge them here by the database's clock (the same on both
        // engines), and read in full only the overdue ones.
        let running: Vec<(Uuid, Option<chrono::DateTime<chrono::Utc>>, Option<f64>)> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::StartedAt)
            .column(job::Column::TimeoutSeconds)
            .filter(Expr::cust("status = 'running'"))
            .filter(job::Column::TimeoutSeconds.is_not_null())
            .into_tuple()
            .all(&self.db)
            .await?;
        let now = self.db_clock().await?;
        let overdue = running.into_iter().filter_map(|(id, started, timeout)| {
            let limit = to_chrono(Duration::try_from_secs_f64(timeout?).ok()? + grace);
            (started? + limit < now).then_some(id)
        });
        let ids: Vec<Uuid> = overdue.take(limit as usize).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let jobs = job::Entity::find().filter(job::Column::Id.is_in(ids)).filter(Expr::cust("status = 'running'"));
        Ok(jobs.all(&self.db).await?)
    }

    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.before(Call::Upkeep("batch_fan_outs")).await?;
        let runs = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Attempts)
            // A literal, so both engines read an index of running jobs (a bound status reads
            // the table).
            .filter(Expr::cust(of_status(JobStatus::Running)))
            .filter(job::Column::FanOut.eq(FanOutForm::Batches.as_str()))
            .order_by_asc(job::Column::StartedAt)
            .limit(limit)
            .into_tuple::<(Uuid, i32)>()
            .all(&self.db)
            .await?;
        Ok(runs.into_iter().map(|(id, attempt)| RunRef { id, attempt }).collect())
    }

    async fn runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.before(Call::Upkeep("runs_owned_by")).await?;
        let runs = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::Attempts)
            .filter(Expr::cust("status = 'running'"))
            .filter(job::Column::Owner.eq(owner))
            .order_by_asc(job::Column::Id)
            .limit(limit)
            .into_tuple::<(Uuid, i32)>()
            .all(&self.db)
            .await?;
        Ok(runs.into_iter().map(|(id, attempt)| RunRef { id, attempt }).collect())
    }

    async fn mark_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.before(Call::Upkeep("mark_cleaned")).await?;
        let backend = self.db.get_database_backend();
        let txn = self.write_txn().await?;
        let finished = FINISHED.iter().map(|status| status.as_str());
        let moved = job::Entity::update_many()
            .col_expr(job::Column::CleanedAt, db_now(backend))
            .filter(job::Column::Id.eq(id))
            .filter(job::Column::Status.is_in(finished))
            .filter(job::Column::CleanedAt.is_null())
            .exec(&txn)
            .await?
            .rows_affected;
        if moved == 0 {
            return Ok(None);
        }
        let event = NewEvent::new(CLEANED)
            .message("its files were removed after the service's retention period; the job's history stays")
            .fields(json!({}))
            .level(EventLevel::Info);
        append_event(&txn, id, &event).await?;
        let job = job::Entity::find_by_id(id).one(&txn).await?;
        txn.commit().await?;
        if let Some(job) = &job {
            let changes = [Change::Moved { job, was: FINISHED, event: CLEANED }];
            self.announce(Call::Upkeep("mark_cleaned"), &changes).await?;
        }
        Ok(job)
    }

    async fn prune(&self, status: JobStatus, older_than: Duration, limit: u64) -> Result<Pruned, StoreError> {
        self.before(Call::Upkeep("prune")).await?;
        self.prune_history(status, older_than, limit).await
    }
}
