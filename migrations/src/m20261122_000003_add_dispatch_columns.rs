//! Adds `run_after` (a QUEUED job is not claimable before it) and `published_at` (when the
//! transport confirmed the job's message), and the index the dispatch sweep reads.

use sea_orm_migration::prelude::*;

use super::m20261122_000001_create_job::Job;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite takes one column per ALTER TABLE.
        for column in [
            ColumnDef::new(Job::RunAfter).timestamp_with_time_zone().null().to_owned(),
            ColumnDef::new(Job::PublishedAt).timestamp_with_time_zone().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        // Jobs committed but not yet confirmed by the transport: what the sweep re-sends.
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX ix_job_undispatched ON job (created_at) \
                 WHERE status = 'queued' AND published_at IS NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX ix_job_undispatched").await?;
        for column in [Job::RunAfter, Job::PublishedAt] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
