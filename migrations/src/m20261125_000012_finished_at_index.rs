//! Jobs by the time they ended, for "succeeded and failed in the last minute" (the
//! dashboard's queue overview) without reading every finished row. Partial: a job adds an
//! entry once, when it ends, and none while it waits or runs (lease renewals stay cheap).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let sql = "CREATE INDEX IF NOT EXISTS ix_job_finished_at ON job (finished_at) WHERE finished_at IS NOT NULL";
        manager.get_connection().execute_unprepared(sql).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared("DROP INDEX ix_job_finished_at").await?;
        Ok(())
    }
}
