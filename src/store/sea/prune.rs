//! The history of long finished jobs deleted in bounded batches: a batch takes the oldest
//! due top-level jobs, walks their children (and theirs), keeps a family whole while any
//! of it is still queued or running, and deletes the rest with their events, batch
//! outcomes and dependency edges, in one write transaction.
//!
//! On SQLite a batch is one command to the engine: every statement of it runs on SQLite's
//! worker thread back to back, so the writer's turn costs three hand-offs between threads
//! (begin, the batch, commit) whatever the batch holds. Statement by statement, as on
//! PostgreSQL, the hand-offs alone (about eight a batch, 0.1–0.35 ms each under load)
//! filled the turn's millisecond before a single row was deleted.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use sea_orm::sea_query::{Expr, ExprTrait, LockType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select, Statement,
};
use uuid::Uuid;

use super::rows::{db_now_plus, millis, to_chrono};
use super::SeaStore;
use crate::domain::JobStatus;
use crate::store::entity::{job, job_batch, job_dependency, job_event};
use crate::store::{clock, Pruned, StoreError};

/// Ids per `IN (...)` list (far below both engines' bind limits).
const CHUNK: usize = 500;

/// A root is not due while a child of it is queued or running: it would be kept, and a batch
/// of such roots would end the pass before the jobs behind them. (A family kept for a
/// grandchild is found by the walk, and ends its pass early.)
const NO_LIVE_CHILD: &str = "NOT EXISTS (SELECT 1 FROM job AS child \
     WHERE child.parent_job_id = job.id AND child.status IN ('queued', 'running'))";

/// A batch on SQLite, as one command (`{status}` a literal, so the planner uses the partial
/// index on finished history; `?1` the cutoff, `?2` the batch size). The family goes into
/// a temporary table once; each delete reads it by its index.
const SQLITE_BATCH: &str = "\
CREATE TEMP TABLE IF NOT EXISTS pruning (id PRIMARY KEY, root NOT NULL) WITHOUT ROWID;
DELETE FROM temp.pruning;
WITH RECURSIVE
  roots (id) AS (
    SELECT id FROM job
    WHERE parent_job_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled') AND status = '{status}'
      AND finished_at < ?1 AND {no_live_child}
    ORDER BY finished_at LIMIT ?2),
  family (id, root, status) AS (
    SELECT id, id, 'ended' FROM roots
    UNION ALL
    SELECT job.id, family.root, job.status FROM job JOIN family ON job.parent_job_id = family.id)
INSERT INTO temp.pruning (id, root)
  SELECT id, root FROM family
  WHERE root NOT IN (SELECT root FROM family WHERE status IN ('queued', 'running'));
DELETE FROM job_event WHERE job_id IN (SELECT id FROM temp.pruning);
SELECT 'events' AS counted, changes() AS n;
DELETE FROM job_batch WHERE parent_job_id IN (SELECT id FROM temp.pruning);
DELETE FROM job_dependency WHERE job_id IN (SELECT id FROM temp.pruning);
DELETE FROM job_dependency WHERE dependency_id IN (SELECT id FROM temp.pruning);
DELETE FROM job WHERE id IN (SELECT id FROM temp.pruning);
SELECT 'jobs' AS counted, count(*) AS n FROM temp.pruning WHERE id = root
UNION ALL
SELECT 'children', count(*) FROM temp.pruning WHERE id <> root;
";

impl SeaStore {
    /// One batch of at most `limit` top-level jobs of `status` that ended more than
    /// `older_than` ago, with their families.
    pub(super) async fn prune_history(
        &self,
        status: JobStatus,
        older_than: Duration,
        limit: u64,
    ) -> Result<Pruned, StoreError> {
        // Read outside the write transaction: most passes find nothing to do.
        let backend = self.db.get_database_backend();
        if due(backend, status, older_than, limit).into_tuple::<Uuid>().one(&self.db).await?.is_none() {
            return Ok(Pruned::default());
        }
        match backend {
            DbBackend::Sqlite => self.prune_in_one_command(status, older_than, limit).await,
            _ => self.prune_walked(status, older_than, limit).await,
        }
    }

    async fn prune_in_one_command(
        &self,
        status: JobStatus,
        older_than: Duration,
        limit: u64,
    ) -> Result<Pruned, StoreError> {
        let cutoff = clock::now() - to_chrono(older_than);
        let sql = SQLITE_BATCH.replace("{status}", status.as_str()).replace("{no_live_child}", NO_LIVE_CHILD);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let batch = Statement::from_sql_and_values(DbBackend::Sqlite, sql, [cutoff.into(), limit.into()]);
        let txn = self.pruning_txn().await?;
        let turn = Instant::now();
        let rows = txn.query_all_raw(batch).await?;
        let ran = turn.elapsed();
        txn.commit().await?;
        let mut pruned = Pruned { held: turn.elapsed(), ..Pruned::default() };
        for row in rows {
            let n = u64::try_from(row.try_get::<i64>("", "n")?).unwrap_or(0);
            match row.try_get::<String>("", "counted")?.as_str() {
                "events" => pruned.events = n,
                "jobs" => pruned.jobs = n,
                _ => pruned.children = n,
            }
        }
        tracing::debug!(
            jobs = pruned.jobs,
            children = pruned.children,
            events = pruned.events,
            ?ran,
            held = ?pruned.held,
            "history batch pruned"
        );
        Ok(pruned)
    }

    /// Statement by statement: the roots locked (a manual retry waits for this delete, or
    /// comes first and takes its job out of it), their children read level by level.
    async fn prune_walked(&self, status: JobStatus, older_than: Duration, limit: u64) -> Result<Pruned, StoreError> {
        let backend = self.db.get_database_backend();
        let txn = self.pruning_txn().await?;
        let turn = Instant::now();
        let roots = due(backend, status, older_than, limit).lock(LockType::Update);
        let roots: Vec<Uuid> = roots.into_tuple().all(&txn).await?;
        let found = turn.elapsed();
        let mut kept: HashSet<Uuid> = HashSet::new();
        let mut family: Vec<(Uuid, Uuid)> = Vec::new();
        let mut level: Vec<Uuid> = roots.clone();
        let mut root_of: HashMap<Uuid, Uuid> = roots.iter().map(|id| (*id, *id)).collect();
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
        let walked = turn.elapsed();
        // The jobs first, children first, deepest last found first, so no row ever names a
        // deleted parent. Then what names them: an event is written only with a
        // compare-and-set on its job's row (PostgreSQL keeps no foreign key from events,
        // migration 29), so one committed before a job's delete took the row is read by the
        // deletes below, and one after finds no row to write against.
        for chunk in children.rchunks(CHUNK).chain(roots.chunks(CHUNK)) {
            job::Entity::delete_many().filter(job::Column::Id.is_in(chunk.iter().copied())).exec(&txn).await?;
        }
        let deleted = turn.elapsed();
        for chunk in roots.chunks(CHUNK).chain(children.chunks(CHUNK)) {
            let ids = chunk.iter().copied();
            pruned.events += job_event::Entity::delete_many()
                .filter(job_event::Column::JobId.is_in(ids.clone()))
                .exec(&txn)
                .await?
                .rows_affected;
            job_batch::Entity::delete_many()
                .filter(job_batch::Column::ParentJobId.is_in(ids.clone()))
                .exec(&txn)
                .await?;
            // Its edges both ways (a job still waiting no longer waits for a removed one).
            job_dependency::Entity::delete_many()
                .filter(
                    job_dependency::Column::JobId
                        .is_in(ids.clone())
                        .or(job_dependency::Column::DependencyId.is_in(ids)),
                )
                .exec(&txn)
                .await?;
        }
        let unlinked = turn.elapsed();
        txn.commit().await?;
        pruned.held = turn.elapsed();
        tracing::debug!(
            jobs = pruned.jobs,
            children = pruned.children,
            ?found,
            ?walked,
            ?unlinked,
            ?deleted,
            held = ?pruned.held,
            "history batch pruned"
        );
        Ok(pruned)
    }
}

/// The oldest top-level jobs of `status` that ended more than `older_than` ago.
fn due(backend: DbBackend, status: JobStatus, older_than: Duration, limit: u64) -> Select<job::Entity> {
    job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        // Literals, so both engines use the partial index on finished history.
        .filter(Expr::cust(format!(
            "parent_job_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled') AND status = '{}'",
            status.as_str()
        )))
        .filter(Expr::col(job::Column::FinishedAt).lt(db_now_plus(backend, -millis(older_than))))
        .filter(Expr::cust(NO_LIVE_CHILD))
        .order_by_asc(job::Column::FinishedAt)
        .limit(limit)
}
