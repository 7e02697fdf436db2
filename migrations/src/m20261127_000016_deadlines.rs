//! Deadlines of a job's own: `timeout_seconds` (a run past it is stopped and fails
//! `Timeout`) and `expires_at` (a job not started by then is CANCELLED). A partial index
//! finds the QUEUED jobs that expire, by time, for the reaper.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    TimeoutSeconds,
    ExpiresAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::TimeoutSeconds).double().null().to_owned(),
            ColumnDef::new(Job::ExpiresAt).timestamp_with_time_zone().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX IF NOT EXISTS ix_job_expiring ON job (expires_at) \
                 WHERE status = 'queued' AND expires_at IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared("DROP INDEX IF EXISTS ix_job_expiring").await?;
        for column in [Job::TimeoutSeconds, Job::ExpiresAt] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
