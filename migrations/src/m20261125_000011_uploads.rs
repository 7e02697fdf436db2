//! Upload-and-run jobs. Every job now records who submitted it (`submitted_by`, the token's
//! user); a `run_script` job also names its `service`, whose quotas (runs at once per user,
//! and in all) decide which of the `@scripts` queue's jobs a script host claims next. Two
//! partial indexes serve that choice: the queued jobs of a service by user, oldest first,
//! and the running ones it counts. On PostgreSQL a row trigger notifies `yardmaster_tasks`
//! with `run_script` whenever a script job changes state, so a claim held in any process
//! wakes both when a job is queued and when a running one frees its slot.
//!
//! Retention: `cleaned_at` marks an uploaded job whose files the cleaner removed (its row and
//! events stay); one partial index finds finished script jobs whose files are due, another
//! the finished top-level jobs whose history is due, oldest first.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for column in [Job::SubmittedBy, Job::Service] {
            let width = if column == Job::Service { 64 } else { 200 };
            manager
                .alter_table(
                    Table::alter()
                        .table(Job::Table)
                        .add_column(ColumnDef::new(column).string_len(width).null())
                        .to_owned(),
                )
                .await?;
        }
        let cleaned = ColumnDef::new(Job::CleanedAt).timestamp_with_time_zone().null().to_owned();
        manager.alter_table(Table::alter().table(Job::Table).add_column(cleaned).to_owned()).await?;
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_scripts_queued ON job (service, submitted_by, id)
             WHERE status = 'queued' AND queue = '@scripts'",
            "CREATE INDEX IF NOT EXISTS ix_job_scripts_running ON job (service, submitted_by)
             WHERE status = 'running' AND queue = '@scripts'",
            "CREATE INDEX IF NOT EXISTS ix_job_scripts_files ON job (service, finished_at)
             WHERE queue = '@scripts' AND cleaned_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')",
            "CREATE INDEX IF NOT EXISTS ix_job_history ON job (status, finished_at)
             WHERE parent_job_id IS NULL AND status IN ('succeeded', 'failed', 'cancelled')",
        ] {
            db.execute_unprepared(sql).await?;
        }
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION yardmaster_notify_scripts() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               PERFORM pg_notify('yardmaster_tasks', 'run_script');
               RETURN NULL;
             END $$",
        )
        .await?;
        db.execute_unprepared("DROP TRIGGER IF EXISTS job_script_notify ON job").await?;
        db.execute_unprepared(
            "CREATE TRIGGER job_script_notify AFTER INSERT OR UPDATE OF status, published_at ON job
             FOR EACH ROW WHEN (NEW.queue = '@scripts')
             EXECUTE FUNCTION yardmaster_notify_scripts()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared("DROP TRIGGER IF EXISTS job_script_notify ON job").await?;
            db.execute_unprepared("DROP FUNCTION IF EXISTS yardmaster_notify_scripts()").await?;
        }
        for index in ["ix_job_scripts_queued", "ix_job_scripts_running", "ix_job_scripts_files", "ix_job_history"] {
            db.execute_unprepared(&format!("DROP INDEX IF EXISTS {index}")).await?;
        }
        for column in [Job::SubmittedBy, Job::Service, Job::CleanedAt] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, PartialEq, Clone, Copy)]
enum Job {
    Table,
    SubmittedBy,
    Service,
    CleanedAt,
}
