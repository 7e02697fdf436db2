//! Fan-out: on the job, `fan_out` (the form a coordinator's run fanned out in: `batches` or
//! `children`) and `deferred_at` (it handed its work on and holds no lease); and `job_batch`,
//! one row per batch outcome of a parent's run, whose primary key makes a redelivered
//! outcome count once.

use sea_orm_migration::prelude::*;

use super::m20261122_000001_create_job::Job;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::FanOut).string_len(16).null().to_owned(),
            ColumnDef::new(Job::DeferredAt).timestamp_with_time_zone().null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(JobBatch::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(JobBatch::ParentJobId).uuid().not_null())
                    .col(ColumnDef::new(JobBatch::Attempt).integer().not_null())
                    .col(ColumnDef::new(JobBatch::Batch).big_integer().not_null())
                    .col(ColumnDef::new(JobBatch::Status).string_len(16).not_null())
                    .col(ColumnDef::new(JobBatch::Output).json_binary().null())
                    .col(ColumnDef::new(JobBatch::ErrorCode).string_len(128).null())
                    .col(ColumnDef::new(JobBatch::ErrorMessage).text().null())
                    .col(ColumnDef::new(JobBatch::FinishedAt).timestamp_with_time_zone().not_null())
                    .primary_key(Index::create().col(JobBatch::ParentJobId).col(JobBatch::Attempt).col(JobBatch::Batch))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(JobBatch::Table).to_owned()).await?;
        for column in [Job::FanOut, Job::DeferredAt] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
pub enum JobBatch {
    Table,
    ParentJobId,
    Attempt,
    Batch,
    Status,
    Output,
    ErrorCode,
    ErrorMessage,
    FinishedAt,
}
