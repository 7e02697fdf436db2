//! Priorities: `priority` (0 first, 9 last, as asked), `effective_priority` (what dispatch
//! and claims order by: the asked one, raised by waiting) and `ages_at` (when a QUEUED job
//! of a level above 0 next rises one). A partial index finds the jobs due to rise, by time;
//! the claim indexes of registered types and scripts order by level, then age.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    Priority,
    EffectivePriority,
    AgesAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::Priority).small_integer().not_null().default(0).to_owned(),
            ColumnDef::new(Job::EffectivePriority).small_integer().not_null().default(0).to_owned(),
            ColumnDef::new(Job::AgesAt).timestamp_with_time_zone().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_aging ON job (ages_at) \
             WHERE status = 'queued' AND ages_at IS NOT NULL",
            "DROP INDEX IF EXISTS ix_job_tasks",
            "CREATE INDEX IF NOT EXISTS ix_job_tasks ON job (operation, effective_priority, id) \
             WHERE status = 'queued' AND queue = '@remote'",
            "DROP INDEX IF EXISTS ix_job_scripts_queued",
            "CREATE INDEX IF NOT EXISTS ix_job_scripts_queued ON job (service, submitted_by, effective_priority, id) \
             WHERE status = 'queued' AND queue = '@scripts'",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in [
            "DROP INDEX IF EXISTS ix_job_aging",
            "DROP INDEX IF EXISTS ix_job_tasks",
            "CREATE INDEX IF NOT EXISTS ix_job_tasks ON job (operation, id) WHERE status = 'queued' AND queue = '@remote'",
            "DROP INDEX IF EXISTS ix_job_scripts_queued",
            "CREATE INDEX IF NOT EXISTS ix_job_scripts_queued ON job (service, submitted_by, id) \
             WHERE status = 'queued' AND queue = '@scripts'",
        ] {
            db.execute_unprepared(sql).await?;
        }
        for column in [Job::Priority, Job::EffectivePriority, Job::AgesAt] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
