//! Jobs that wait for a time get an index of their own, by that time: the dispatch sweep
//! finds the due ones, and the time of the next, without visiting the thousands that wait
//! for later (`run_at`, `delay_seconds`, RetryLater and retry delays). The index of fresh
//! unpublished jobs, by age, no longer holds them. Every statement may run twice (two
//! processes migrating one store at once).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX IF EXISTS ix_job_undispatched").await?;
        db.execute_unprepared(
            "CREATE INDEX IF NOT EXISTS ix_job_undispatched ON job (created_at) \
             WHERE status = 'queued' AND published_at IS NULL AND run_after IS NULL",
        )
        .await?;
        db.execute_unprepared(
            "CREATE INDEX IF NOT EXISTS ix_job_waiting ON job (run_after) \
             WHERE status = 'queued' AND published_at IS NULL AND run_after IS NOT NULL",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX IF EXISTS ix_job_waiting").await?;
        db.execute_unprepared("DROP INDEX IF EXISTS ix_job_undispatched").await?;
        db.execute_unprepared(
            "CREATE INDEX IF NOT EXISTS ix_job_undispatched ON job (created_at) WHERE status = 'queued' AND published_at IS NULL",
        )
        .await?;
        Ok(())
    }
}
