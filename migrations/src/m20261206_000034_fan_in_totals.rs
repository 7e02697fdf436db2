//! On SQLite, a batch parent's count beside its row (`job_fan_in`, migration 33) carries the
//! run's total too, so counting a batch reads nothing of the coordinator's row but its
//! operation: `progress_total` (like `status` and `attempts`) is stored after the payload,
//! and reaching it walked the chain of pages holding the coordinator's inputs, about a
//! millisecond a batch at 16,384 inputs (`BENCHMARKS.md`, 2026-12-06 (afternoon), issue
//! 32). A count started before this migration has no total and is counted from the row as
//! before. PostgreSQL has no such table.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

use crate::only_on;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        only_on(manager, DbBackend::Sqlite, "ALTER TABLE job_fan_in ADD COLUMN total integer").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        only_on(manager, DbBackend::Sqlite, "ALTER TABLE job_fan_in DROP COLUMN total").await
    }
}
