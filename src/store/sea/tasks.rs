//! What remote workers' claims and clients' queue positions read: the oldest runnable jobs
//! of registered types, a queued job's place in its line, and the runs one owner holds.

use sea_orm::sea_query::{Expr, ExprTrait};
use std::time::Duration;

use sea_orm::sea_query::{LockBehavior, LockType};
use sea_orm::{ColumnTrait, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::rows::db_now;
use super::SeaStore;
use crate::domain::{Job, JobStatus, QueueName};
use crate::store::entity::job;
use crate::store::{RunRef, RunWrites, StoreError};

/// Runnable jobs a SQLite claim tries per round, and its rounds (others may take them all).
const CANDIDATES: u64 = 32;
const ROUNDS: usize = 4;

/// Runnable QUEUED jobs of these registered types, oldest first.
fn claimable(backend: DbBackend, operations: &[String]) -> sea_orm::Select<job::Entity> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        // Literals, so both engines use the partial index on claimable tasks.
        .filter(Expr::cust("status = 'queued' AND queue = '@remote'"))
        .filter(job::Column::Operation.is_in(operations.iter().map(String::as_str)))
        .filter(Expr::col(job::Column::RunAfter).is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend))))
        .order_by_asc(job::Column::Id)
}

impl SeaStore {
    /// See [`crate::store::RunWrites::claim_next`].
    pub(super) async fn claim_next_task(
        &self,
        operations: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Job>, StoreError> {
        if operations.is_empty() {
            return Ok(None);
        }
        if self.db.get_database_backend() == DbBackend::Postgres {
            let txn = self.write_txn().await?;
            let next = claimable(DbBackend::Postgres, operations)
                .limit(1)
                .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
                .into_tuple::<Uuid>()
                .one(&txn)
                .await?;
            let Some(id) = next else { return Ok(None) };
            let job = self.claim_run(Some(&txn), id, owner, lease).await?;
            txn.commit().await?;
            return Ok(job);
        }
        for _ in 0..ROUNDS {
            let candidates =
                claimable(DbBackend::Sqlite, operations).limit(CANDIDATES).into_tuple::<Uuid>().all(&self.db).await?;
            if candidates.is_empty() {
                return Ok(None);
            }
            for id in candidates {
                if let Some(job) = self.claim(id, owner, lease).await? {
                    return Ok(Some(job));
                }
            }
        }
        Ok(None)
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
        if of.queue == QueueName::SCRIPTS {
            ahead = ahead.filter(job::Column::Service.eq(of.service.as_deref()));
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
