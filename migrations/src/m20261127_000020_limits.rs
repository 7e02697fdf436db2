//! Limits across the deployment: `limit_key` (the limit a job is counted under: its rule,
//! and its concurrency key when partitioned) and `held_since` (a job held QUEUED by its
//! limit, neither sent nor claimable). Partial indexes count a limit's admitted jobs that
//! are QUEUED or RUNNING, find its held jobs in the order they are released (level, then
//! age), and its recent starts for rates. Every statement may run twice (two processes
//! migrating one store at once).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    LimitKey,
    HeldSince,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::LimitKey).string_len(600).null().to_owned(),
            ColumnDef::new(Job::HeldSince).timestamp_with_time_zone().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_limit_admitted ON job (limit_key) \
             WHERE limit_key IS NOT NULL AND held_since IS NULL AND status IN ('queued', 'running')",
            "CREATE INDEX IF NOT EXISTS ix_job_limit_held ON job (limit_key, effective_priority, id) \
             WHERE held_since IS NOT NULL AND status = 'queued'",
            "CREATE INDEX IF NOT EXISTS ix_job_limit_started ON job (limit_key, started_at) \
             WHERE limit_key IS NOT NULL AND started_at IS NOT NULL",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for index in ["ix_job_limit_admitted", "ix_job_limit_held", "ix_job_limit_started"] {
            db.execute_unprepared(&format!("DROP INDEX IF EXISTS {index}")).await?;
        }
        for column in [Job::LimitKey, Job::HeldSince] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
