//! Creates `job_event`, the append-only log of every transition and progress report.

use sea_orm_migration::prelude::*;

use super::m20261122_000001_create_job::Job;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(JobEvent::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(JobEvent::Id).big_integer().not_null().auto_increment().primary_key())
                    .col(ColumnDef::new(JobEvent::JobId).uuid().not_null())
                    .col(ColumnDef::new(JobEvent::Ts).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(JobEvent::Event).string_len(128).not_null())
                    .col(ColumnDef::new(JobEvent::Message).text().null())
                    .col(ColumnDef::new(JobEvent::Fields).json_binary().not_null())
                    .col(ColumnDef::new(JobEvent::Level).string_len(16).not_null())
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_job_event_job")
                            .from(JobEvent::Table, JobEvent::JobId)
                            .to(Job::Table, Job::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_job_event_job_id")
                    .table(JobEvent::Table)
                    .col(JobEvent::JobId)
                    .col(JobEvent::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(JobEvent::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum JobEvent {
    Table,
    Id,
    JobId,
    Ts,
    Event,
    Message,
    Fields,
    Level,
}
