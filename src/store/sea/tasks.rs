//! What remote workers' claims and clients' queue positions read: the oldest runnable jobs
//! of registered types, a queued job's place in its line, and the runs one owner holds.

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::rows::db_now;
use super::SeaStore;
use crate::domain::{Job, JobStatus, QueueName};
use crate::store::entity::job;
use crate::store::{RunRef, StoreError};

impl SeaStore {
    pub(super) async fn find_claimable(&self, operations: &[String], limit: u64) -> Result<Vec<Uuid>, StoreError> {
        if operations.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.db.get_database_backend();
        let ids = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            // Literals, so both engines use the partial index on claimable tasks.
            .filter(Expr::cust("status = 'queued' AND queue = '@remote'"))
            .filter(job::Column::Operation.is_in(operations.iter().map(String::as_str)))
            .filter(
                Expr::col(job::Column::RunAfter).is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend))),
            )
            .order_by_asc(job::Column::Id)
            .limit(limit)
            .into_tuple::<Uuid>()
            .all(&self.db)
            .await?;
        Ok(ids)
    }

    /// 1 + the runnable jobs ahead of `job` in its line: its type's for a registered type
    /// (whatever their room: they wait for the same workers), its queue's otherwise.
    pub(super) async fn find_queue_position(&self, of: &Job) -> Result<Option<i64>, StoreError> {
        if of.status != JobStatus::Queued {
            return Ok(None);
        }
        let backend = self.db.get_database_backend();
        let mut ahead = job::Entity::find()
            .filter(Expr::cust("status = 'queued'"))
            .filter(job::Column::Queue.eq(of.queue.as_str()))
            .filter(job::Column::Id.lt(of.id))
            .filter(
                Expr::col(job::Column::RunAfter).is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend))),
            );
        if of.queue == QueueName::REMOTE {
            ahead = ahead.filter(job::Column::Operation.eq(of.operation.as_str()));
        }
        Ok(Some(ahead.count(&self.db).await? as i64 + 1))
    }

    pub(super) async fn find_runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError> {
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
}
