//! Creates the `job` table and the indexes that keep claims, sweeps and listings index-driven.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.create_table(job_table()).await?;
        for index in [
            // Newest-first listing filtered by one column; the id (UUIDv7) is the cursor.
            Index::create().name("ix_job_status_id").table(Job::Table).col(Job::Status).col(Job::Id).to_owned(),
            Index::create().name("ix_job_queue_id").table(Job::Table).col(Job::Queue).col(Job::Id).to_owned(),
            Index::create().name("ix_job_operation_id").table(Job::Table).col(Job::Operation).col(Job::Id).to_owned(),
            Index::create().name("ix_job_parent_id").table(Job::Table).col(Job::ParentJobId).col(Job::Id).to_owned(),
            Index::create()
                .name("ux_job_idempotency_key")
                .table(Job::Table)
                .col(Job::IdempotencyKey)
                .unique()
                .to_owned(),
        ] {
            manager.create_index(index).await?;
        }
        // Partial indexes: finished rows never slow the dispatch sweep or the lease scan.
        // Both SQLite and PostgreSQL accept this syntax.
        let db = manager.get_connection();
        db.execute_unprepared("CREATE INDEX ix_job_runnable ON job (queue, id) WHERE status = 'queued'").await?;
        db.execute_unprepared("CREATE INDEX ix_job_running_lease ON job (leased_until) WHERE status = 'running'")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(Job::Table).to_owned()).await
    }
}

fn job_table() -> TableCreateStatement {
    Table::create()
        .table(Job::Table)
        .if_not_exists()
        .col(ColumnDef::new(Job::Id).uuid().not_null().primary_key())
        .col(ColumnDef::new(Job::Operation).string_len(128).not_null())
        .col(ColumnDef::new(Job::Queue).string_len(64).not_null())
        .col(ColumnDef::new(Job::Payload).json_binary().not_null())
        .col(ColumnDef::new(Job::Result).json_binary().null())
        .col(ColumnDef::new(Job::Status).string_len(16).not_null())
        .col(ColumnDef::new(Job::ParentJobId).uuid().null())
        .col(ColumnDef::new(Job::ProgressCurrent).big_integer().not_null().default(0))
        .col(ColumnDef::new(Job::ProgressTotal).big_integer().null())
        .col(ColumnDef::new(Job::Attempts).integer().not_null().default(0))
        .col(ColumnDef::new(Job::MaxRetries).integer().not_null().default(0))
        .col(ColumnDef::new(Job::ErrorCode).string_len(128).null())
        .col(ColumnDef::new(Job::ErrorMessage).text().null())
        .col(ColumnDef::new(Job::IdempotencyKey).string_len(255).null())
        .col(ColumnDef::new(Job::CreatedAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(Job::StartedAt).timestamp_with_time_zone().null())
        .col(ColumnDef::new(Job::FinishedAt).timestamp_with_time_zone().null())
        .col(ColumnDef::new(Job::LeasedUntil).timestamp_with_time_zone().null())
        .col(ColumnDef::new(Job::Owner).string_len(255).null())
        .to_owned()
}

#[derive(DeriveIden)]
pub enum Job {
    Table,
    Id,
    Operation,
    Queue,
    Payload,
    Result,
    Status,
    ParentJobId,
    ProgressCurrent,
    ProgressTotal,
    Attempts,
    MaxRetries,
    ErrorCode,
    ErrorMessage,
    IdempotencyKey,
    CreatedAt,
    StartedAt,
    FinishedAt,
    LeasedUntil,
    Owner,
    RunAfter,
    PublishedAt,
    Failures,
    RetryPolicy,
    FanOut,
    DeferredAt,
}
