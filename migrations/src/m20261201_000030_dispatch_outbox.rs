//! The dispatch outbox: a row per submission whose jobs were written as published before
//! their messages were confirmed (a durable transport). It names the jobs, a line each, and
//! is deleted once the transport confirmed every message; a row older than the dispatch
//! grace was left by a crash or a failed publish, and the sweep marks its still-QUEUED jobs
//! unpublished again (and sends them). So a job on RabbitMQ is written once before its claim
//! instead of twice (insert, then `published_at`), and its publication is one small row per
//! submission, not a new version of every job row in every index of `job`. Every statement
//! may run twice (two processes migrating one store at once).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum DispatchOutbox {
    Table,
    Id,
    CreatedAt,
    Jobs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(DispatchOutbox::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(DispatchOutbox::Id).uuid().not_null().primary_key())
                    .col(ColumnDef::new(DispatchOutbox::CreatedAt).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(DispatchOutbox::Jobs).text().not_null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(DispatchOutbox::Table).if_exists().to_owned()).await
    }
}
