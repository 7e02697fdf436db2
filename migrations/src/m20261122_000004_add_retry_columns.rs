//! Adds `failures` (failed attempts so far) and `retry_policy` (backoff and error classes)
//! for retries with backoff.

use sea_orm_migration::prelude::*;

use super::m20261122_000001_create_job::Job;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::Failures).integer().not_null().default(0).to_owned(),
            ColumnDef::new(Job::RetryPolicy).json_binary().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Job::Failures, Job::RetryPolicy] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
