//! Dispatch bookkeeping: what the transport confirmed (not a transition: `published_at`
//! on rows still QUEUED at the same `attempts`), and which QUEUED jobs must be (re)sent.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};
use uuid::Uuid;

use chrono::Utc;

use super::rows::{db_now, of_status, to_chrono, NOT_PAUSED};
use super::{group_commit, SeaStore};
use crate::domain::{JobStatus, Limit, NewJob};
use crate::store::entity::{dispatch_outbox, job};
use crate::store::types::level;
use crate::store::{clock, Call, Change, Dispatch, DispatchBook, Released, Settled, StoreError};

/// Unpublished QUEUED jobs that wait for a time (`run_after`: a delay, a `run_at`): the
/// predicate of the partial index `ix_job_waiting`, on `run_after`.
const WAITING: &str = "status = 'queued' AND published_at IS NULL AND run_after IS NOT NULL";
/// Unpublished QUEUED jobs that were never delayed: the predicate of `ix_job_undispatched`,
/// on `created_at`.
const FRESH: &str = "status = 'queued' AND published_at IS NULL AND run_after IS NULL";
/// QUEUED jobs whose level rises with waiting: the predicate of `ix_job_aging`, on `ages_at`.
const AGING: &str = "status = 'queued' AND ages_at IS NOT NULL";

#[async_trait]
impl DispatchBook for SeaStore {
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError> {
        self.before(Call::Upkeep("mark_published")).await?;
        let marked = match &self.writer {
            Some(writer) => {
                writer.write(group_commit::Write::MarkPublished { jobs: jobs.to_vec() }).await?.into_count()?
            }
            None => self.record_publications(&self.db, jobs).await?,
        };
        if marked > 0 {
            self.announce(Call::Upkeep("mark_published"), &[Change::Published { jobs }]).await?;
        }
        Ok(marked)
    }

    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.before(Call::Upkeep("due_for_dispatch")).await?;
        let backend = self.db.get_database_backend();
        let pick = || {
            job::Entity::find()
                .select_only()
                .column(job::Column::Id)
                .column(job::Column::Queue)
                .column(job::Column::Attempts)
                .column(job::Column::EffectivePriority)
        };
        // Each half is written as its partial index's predicate (literals), so both engines
        // read only the rows it holds: jobs waiting for a time by that time, fresh ones by age.
        // A job waiting out a delay is nobody else's to publish once the delay is over.
        let waited = pick()
            .filter(Expr::cust(WAITING))
            .filter(Expr::col(job::Column::RunAfter).lte(db_now(backend)))
            .filter(Expr::cust(NOT_PAUSED))
            .filter(job::Column::HeldSince.is_null())
            .order_by_asc(job::Column::RunAfter)
            .limit(limit)
            .into_tuple::<(Uuid, String, i32, i16)>()
            .all(&self.db)
            .await?;
        // Fresh submissions get `grace` for their submitter to publish them.
        let room = limit.saturating_sub(waited.len() as u64);
        let fresh = match room {
            0 => Vec::new(),
            _ => {
                pick()
                    .filter(Expr::cust(FRESH))
                    .filter(job::Column::CreatedAt.lte(clock::now() - to_chrono(grace)))
                    // A paused queue's jobs wait unsent; the sweep after its resume sends them.
                    .filter(Expr::cust(NOT_PAUSED))
                    // A held job is sent when its limit admits it.
                    .filter(job::Column::HeldSince.is_null())
                    .order_by_asc(job::Column::CreatedAt)
                    .limit(room)
                    .into_tuple::<(Uuid, String, i32, i16)>()
                    .all(&self.db)
                    .await?
            }
        };
        let rows = waited.into_iter().chain(fresh);
        Ok(rows
            .map(|(id, queue, attempts, stored)| Dispatch { id, queue, attempts, priority: level(stored) })
            .collect())
    }

    async fn confirm_outbox(&self, outbox: Uuid) -> Result<bool, StoreError> {
        self.before(Call::Upkeep("confirm_outbox")).await?;
        let deleted = match &self.writer {
            Some(writer) => writer.write(group_commit::Write::ConfirmOutbox { outbox }).await?.into_count()?,
            None => confirm_outboxes(&self.db, &[outbox]).await?.len() as u64,
        };
        Ok(deleted == 1)
    }

    async fn reclaim_outbox(&self, grace: Duration, limit: u64) -> Result<u64, StoreError> {
        self.before(Call::Upkeep("reclaim_outbox")).await?;
        self.reclaim_outbox_once(grace, limit).await
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        self.before(Call::Upkeep("next_due")).await?;
        let backend = self.db.get_database_backend();
        let next: Option<Option<chrono::DateTime<Utc>>> = job::Entity::find()
            .select_only()
            .column_as(Expr::cust("MIN(run_after)"), "next")
            .filter(Expr::cust(WAITING))
            .filter(Expr::col(job::Column::RunAfter).gt(db_now(backend)))
            .into_tuple()
            .one(&self.db)
            .await?;
        let Some(next) = next.flatten() else { return Ok(None) };
        // The wait by the clock that judges it.
        Ok(Some((next - self.db_clock().await?).to_std().unwrap_or_default()))
    }

    async fn forget_publication(&self, dispatch: &Dispatch) -> Result<bool, StoreError> {
        self.before(Call::Upkeep("forget_publication")).await?;
        let result = job::Entity::update_many()
            .col_expr(job::Column::PublishedAt, Expr::value(None::<chrono::DateTime<Utc>>))
            .filter(job::Column::Id.eq(dispatch.id))
            .filter(job::Column::Attempts.eq(dispatch.attempts))
            .filter(job::Column::Status.eq(JobStatus::Queued))
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    async fn forget_publications(&self) -> Result<u64, StoreError> {
        self.before(Call::Upkeep("forget_publications")).await?;
        let result = job::Entity::update_many()
            .col_expr(job::Column::PublishedAt, Expr::value(None::<chrono::DateTime<Utc>>))
            // Literals, so both engines read the status index (a bound status reads the table).
            .filter(Expr::cust(of_status(JobStatus::Queued)))
            .filter(job::Column::PublishedAt.is_not_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected)
    }

    async fn release(&self, limit: &Limit) -> Result<Released, StoreError> {
        self.before(Call::Upkeep("release")).await?;
        self.release_once(limit).await
    }

    async fn holding(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.before(Call::Upkeep("holding")).await?;
        self.holding_once().await
    }

    async fn settle_dependents(&self, ended: &[Uuid]) -> Result<Settled, StoreError> {
        self.before(Call::Upkeep("settle_dependents")).await?;
        self.settle_dependents_once(ended).await
    }

    async fn settle_stranded(&self, most: u64) -> Result<Settled, StoreError> {
        self.before(Call::Upkeep("settle_stranded")).await?;
        self.settle_stranded_once(most).await
    }

    async fn raise_waiting(&self, step: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.before(Call::Upkeep("raise_waiting")).await?;
        let backend = self.db.get_database_backend();
        type Due = (Uuid, String, i32, i16, chrono::DateTime<Utc>, Option<chrono::DateTime<Utc>>);
        let due: Vec<Due> = job::Entity::find()
            .select_only()
            .columns([job::Column::Id, job::Column::Queue, job::Column::Attempts])
            .columns([job::Column::EffectivePriority, job::Column::AgesAt, job::Column::PublishedAt])
            // A literal, so both engines read the partial index of aging jobs.
            .filter(Expr::cust(AGING))
            .filter(Expr::col(job::Column::AgesAt).lte(db_now(backend)))
            .order_by_asc(job::Column::AgesAt)
            .limit(limit)
            .into_tuple()
            .all(&self.db)
            .await?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let txn = self.db.begin().await?;
        let mut raised = Vec::new();
        for (id, queue, attempts, stored, ages_at, published_at) in due {
            let priority = level(stored).saturating_sub(1);
            let next = (priority > 0).then(|| ages_at + to_chrono(step));
            let moved = job::Entity::update_many()
                .col_expr(job::Column::EffectivePriority, Expr::value(i16::from(priority)))
                .col_expr(job::Column::AgesAt, Expr::value(next))
                .filter(job::Column::Id.eq(id))
                .filter(Expr::cust("status = 'queued'"))
                .filter(job::Column::AgesAt.eq(ages_at))
                .exec(&txn)
                .await?
                .rows_affected;
            if moved == 1 && published_at.is_some() {
                raised.push(Dispatch { id, queue, attempts, priority });
            }
        }
        txn.commit().await?;
        Ok(raised)
    }
}

/// Deletes submissions' outbox rows (the transport confirmed every message of each) in one
/// statement; returns the ids of those that were there.
pub(super) async fn confirm_outboxes<C: ConnectionTrait>(db: &C, ids: &[Uuid]) -> Result<Vec<Uuid>, DbErr> {
    let deleted = dispatch_outbox::Entity::delete_many()
        .filter(dispatch_outbox::Column::Id.is_in(ids.iter().copied()))
        .exec_with_returning(db)
        .await?;
    Ok(deleted.into_iter().map(|row| row.id).collect())
}

/// Writes, in the submitting transaction, the outbox rows of the jobs written published
/// for a durable transport (`NewJob::outbox`): one per submission, naming its jobs. Jobs
/// written unsent (held, waiting for a time or for dependencies) are not named: the sweep
/// or their release sends them.
pub(super) async fn write_outbox<C: ConnectionTrait>(
    db: &C,
    rows: &[job::Model],
    new: &[&NewJob],
) -> Result<(), DbErr> {
    let mut by_submission: BTreeMap<Uuid, Vec<Uuid>> = BTreeMap::new();
    for (row, new) in rows.iter().zip(new) {
        if let (Some(outbox), Some(_)) = (new.outbox, row.published_at) {
            by_submission.entry(outbox).or_default().push(row.id);
        }
    }
    if by_submission.is_empty() {
        return Ok(());
    }
    let now = clock::now();
    let models = by_submission.into_iter().map(|(id, jobs)| {
        let jobs = jobs.iter().map(Uuid::to_string).collect::<Vec<_>>().join("\n");
        dispatch_outbox::Model { id, created_at: now, jobs }.into_active_model()
    });
    dispatch_outbox::Entity::insert_many(models).exec_without_returning(db).await?;
    Ok(())
}

impl SeaStore {
    /// Hands the jobs of outbox rows older than `grace` back to the sweep: those still
    /// QUEUED and recorded published are marked unpublished (a compare-and-set on both),
    /// and the rows deleted, in one transaction. Returns how many jobs were handed back.
    pub(super) async fn reclaim_outbox_once(&self, grace: Duration, limit: u64) -> Result<u64, StoreError> {
        let stale = dispatch_outbox::Entity::find()
            .filter(dispatch_outbox::Column::CreatedAt.lte(clock::now() - to_chrono(grace)))
            .limit(limit)
            .all(&self.db)
            .await?;
        if stale.is_empty() {
            return Ok(0);
        }
        let jobs: Vec<Uuid> =
            stale.iter().flat_map(|row| row.jobs.lines()).filter_map(|line| Uuid::parse_str(line).ok()).collect();
        let txn = self.write_txn().await?;
        let mut handed_back = 0;
        for chunk in jobs.chunks(super::INSERT_CHUNK) {
            handed_back += job::Entity::update_many()
                .col_expr(job::Column::PublishedAt, Expr::value(None::<chrono::DateTime<Utc>>))
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .filter(Expr::cust("coalesce(status = 'queued', false)"))
                .filter(job::Column::PublishedAt.is_not_null())
                .exec(&*txn)
                .await?
                .rows_affected;
        }
        let ids = stale.iter().map(|row| row.id);
        dispatch_outbox::Entity::delete_many().filter(dispatch_outbox::Column::Id.is_in(ids)).exec(&*txn).await?;
        txn.commit().await?;
        Ok(handed_back)
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
}
