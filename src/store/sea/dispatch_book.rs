//! Dispatch bookkeeping: what the transport confirmed (not a transition: `published_at`
//! on rows still QUEUED at the same `attempts`), and which QUEUED jobs must be (re)sent.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use chrono::Utc;

use super::rows::{db_now, to_chrono};
use super::{group_commit, SeaStore};
use crate::domain::JobStatus;
use crate::store::entity::job;
use crate::store::{clock, Call, Change, Dispatch, DispatchBook, StoreError};

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
            .filter(job::Column::Status.eq(JobStatus::Queued))
            .filter(job::Column::PublishedAt.is_not_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected)
    }
}

impl SeaStore {
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
