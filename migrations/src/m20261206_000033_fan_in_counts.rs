//! On SQLite, a batch parent's running count lives in a row of its own (`job_fan_in`) while
//! its run lasts. SQLite rebuilds a whole record on update, and a coordinator's row holds its
//! inputs (megabytes for a `compute_embeddings` of thousands): counting each batch on that
//! row copied them once a batch (`BENCHMARKS.md`, 2026-12-06 (afternoon), issue 32). The
//! count is moved in the batch's own transaction as before; the trigger folds it into the
//! job's `progress_current` when the run leaves RUNNING, however it leaves (closed, failed,
//! cancelled, requeued), and drops the row, so the table holds running parents only.
//! PostgreSQL keeps a large payload out of line and counts on the row: nothing changes there.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

use crate::only_on;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        only_on(
            manager,
            DbBackend::Sqlite,
            "CREATE TABLE IF NOT EXISTS job_fan_in (
                 job_id uuid_text NOT NULL,
                 attempt integer NOT NULL,
                 done integer NOT NULL,
                 PRIMARY KEY (job_id, attempt)
             ) WITHOUT ROWID;
             CREATE TRIGGER IF NOT EXISTS job_fan_in_fold AFTER UPDATE OF status ON job
             WHEN OLD.status = 'running' AND NEW.status <> 'running' AND OLD.fan_out = 'batches'
             BEGIN
                 UPDATE job SET progress_current =
                     (SELECT done FROM job_fan_in WHERE job_id = NEW.id AND attempt = OLD.attempts)
                 WHERE id = NEW.id
                   AND EXISTS (SELECT 1 FROM job_fan_in WHERE job_id = NEW.id AND attempt = OLD.attempts);
                 DELETE FROM job_fan_in WHERE job_id = NEW.id;
             END;",
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Running parents keep what they counted: folded into their rows first.
        only_on(
            manager,
            DbBackend::Sqlite,
            "UPDATE job SET progress_current =
                 (SELECT done FROM job_fan_in WHERE job_id = job.id AND attempt = job.attempts)
             WHERE EXISTS (SELECT 1 FROM job_fan_in WHERE job_id = job.id AND attempt = job.attempts);
             DROP TRIGGER IF EXISTS job_fan_in_fold;
             DROP TABLE IF EXISTS job_fan_in;",
        )
        .await
    }
}
