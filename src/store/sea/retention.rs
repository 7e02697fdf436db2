//! What the cleaner writes: an uploaded job's files marked removed, and the history of long
//! finished jobs deleted in bounded batches, each a compare-and-set on rows that cannot
//! move under it.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait, LockType};
use sea_orm::{ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde_json::json;
use uuid::Uuid;

use super::rows::{db_now, db_now_plus, millis, to_job};
use super::{append_event, SeaStore};
use crate::domain::{EventLevel, Job, JobStatus, NewEvent};
use crate::store::entity::{job, job_batch, job_event};
use crate::store::{Pruned, StoreError};

/// Ids per `IN (...)` list (far below both engines' bind limits).
const CHUNK: usize = 500;

impl SeaStore {
    pub(super) async fn mark_files_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let backend = self.db.get_database_backend();
        let txn = self.write_txn().await?;
        let finished = [JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled].map(JobStatus::as_str);
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
        let event = NewEvent::new("job.cleaned")
            .message("its files were removed after the service's retention period; the job's history stays")
            .fields(json!({}))
            .level(EventLevel::Info);
        append_event(&txn, id, &event).await?;
        let job = job::Entity::find_by_id(id).one(&txn).await?;
        txn.commit().await?;
        job.map(to_job).transpose()
    }

    pub(super) async fn prune_finished(
        &self,
        status: JobStatus,
        older_than: Duration,
        limit: u64,
    ) -> Result<Pruned, StoreError> {
        let backend = self.db.get_database_backend();
        let cutoff = db_now_plus(backend, -millis(older_than));
        let due = || {
            job::Entity::find()
                .select_only()
                .column(job::Column::Id)
                // Literals, so both engines use the partial index on finished history.
                .filter(Expr::cust(format!(
                    "parent_job_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled') AND status = '{}'",
                    status.as_str()
                )))
                .filter(Expr::col(job::Column::FinishedAt).lt(cutoff.clone()))
                .order_by_asc(job::Column::FinishedAt)
                .limit(limit)
        };
        // Read outside the write transaction: most passes find nothing to do.
        if due().into_tuple::<Uuid>().one(&self.db).await?.is_none() {
            return Ok(Pruned::default());
        }
        let txn = self.write_txn().await?;
        let turn = std::time::Instant::now();
        // Locked on PostgreSQL (SQLite's write transaction is exclusive): a manual retry
        // waits for this delete, or comes first and takes its job out of it.
        let mut roots = due();
        if backend == DbBackend::Postgres {
            roots = roots.lock(LockType::Update);
        }
        let roots: Vec<Uuid> = roots.into_tuple().all(&txn).await?;
        let mut kept: HashSet<Uuid> = HashSet::new();
        let mut family: Vec<(Uuid, Uuid)> = Vec::new();
        let mut level: Vec<Uuid> = roots.clone();
        let mut root_of: std::collections::HashMap<Uuid, Uuid> = roots.iter().map(|id| (*id, *id)).collect();
        // Children, and theirs, level by level: a root with one unfinished is kept whole.
        while !level.is_empty() {
            let mut next = Vec::new();
            for chunk in level.chunks(CHUNK) {
                let rows: Vec<(Uuid, Uuid, String)> = job::Entity::find()
                    .select_only()
                    .column(job::Column::Id)
                    .column(job::Column::ParentJobId)
                    .column(job::Column::Status)
                    .filter(job::Column::ParentJobId.is_in(chunk.iter().copied()))
                    .into_tuple()
                    .all(&txn)
                    .await?;
                for (child, parent, child_status) in rows {
                    let root = root_of[&parent];
                    root_of.insert(child, root);
                    if matches!(child_status.as_str(), "queued" | "running") {
                        kept.insert(root);
                    }
                    family.push((child, root));
                    next.push(child);
                }
            }
            level = next;
        }
        let roots: Vec<Uuid> = roots.into_iter().filter(|root| !kept.contains(root)).collect();
        let children: Vec<Uuid> =
            family.into_iter().filter(|(_, root)| !kept.contains(root)).map(|(child, _)| child).collect();
        let mut pruned = Pruned { jobs: roots.len() as u64, children: children.len() as u64, ..Pruned::default() };
        for chunk in roots.chunks(CHUNK).chain(children.chunks(CHUNK)) {
            let ids = chunk.iter().copied();
            pruned.events += job_event::Entity::delete_many()
                .filter(job_event::Column::JobId.is_in(ids.clone()))
                .exec(&txn)
                .await?
                .rows_affected;
            job_batch::Entity::delete_many().filter(job_batch::Column::ParentJobId.is_in(ids)).exec(&txn).await?;
        }
        // Children first, deepest last found first, so no row ever names a deleted parent.
        for chunk in children.rchunks(CHUNK).chain(roots.chunks(CHUNK)) {
            job::Entity::delete_many().filter(job::Column::Id.is_in(chunk.iter().copied())).exec(&txn).await?;
        }
        txn.commit().await?;
        pruned.held = turn.elapsed();
        Ok(pruned)
    }
}
