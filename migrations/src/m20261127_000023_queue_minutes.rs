//! The queues' per-minute rollup the dashboard draws: `queue_minute`, one row per minute,
//! queue and room, with the runs started and the jobs that succeeded, failed and were
//! cancelled in that minute, the waits from submission to start (a histogram, JSON), and
//! samples of the waiting depth, held and running jobs; a row of room `''` says the queue
//! was paused. Every process adds what it committed; old minutes are deleted.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum QueueMinute {
    Table,
    Minute,
    Queue,
    Room,
    Started,
    Succeeded,
    Failed,
    Cancelled,
    Waits,
    Depth,
    Held,
    Running,
    Paused,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let count = |column: QueueMinute| ColumnDef::new(column).big_integer().not_null().default(0).to_owned();
        manager
            .create_table(
                Table::create()
                    .table(QueueMinute::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(QueueMinute::Minute).timestamp_with_time_zone().not_null())
                    .col(ColumnDef::new(QueueMinute::Queue).string_len(64).not_null())
                    .col(ColumnDef::new(QueueMinute::Room).string_len(64).not_null())
                    .col(count(QueueMinute::Started))
                    .col(count(QueueMinute::Succeeded))
                    .col(count(QueueMinute::Failed))
                    .col(count(QueueMinute::Cancelled))
                    .col(ColumnDef::new(QueueMinute::Waits).text().not_null().default("{}"))
                    .col(ColumnDef::new(QueueMinute::Depth).big_integer().null())
                    .col(ColumnDef::new(QueueMinute::Held).big_integer().null())
                    .col(ColumnDef::new(QueueMinute::Running).big_integer().null())
                    .col(ColumnDef::new(QueueMinute::Paused).boolean().not_null().default(false))
                    .primary_key(
                        Index::create().col(QueueMinute::Minute).col(QueueMinute::Queue).col(QueueMinute::Room),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(QueueMinute::Table).if_exists().to_owned()).await
    }
}
