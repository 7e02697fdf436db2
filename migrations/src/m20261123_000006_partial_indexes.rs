//! The parent and idempotency-key indexes hold only the rows that have one: a root job
//! without a key (most jobs) then adds no entry to either at submission or at any later
//! transition, which on PostgreSQL writes every index of the row anew.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX ix_job_parent ON job (parent_job_id, id) WHERE parent_job_id IS NOT NULL",
            "DROP INDEX ix_job_parent_id",
            "CREATE UNIQUE INDEX ux_job_key ON job (idempotency_key) WHERE idempotency_key IS NOT NULL",
            "DROP INDEX ux_job_idempotency_key",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX ix_job_parent_id ON job (parent_job_id, id)",
            "DROP INDEX ix_job_parent",
            "CREATE UNIQUE INDEX ux_job_idempotency_key ON job (idempotency_key)",
            "DROP INDEX ux_job_key",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }
}
