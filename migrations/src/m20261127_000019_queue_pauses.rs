//! Paused queues: `queue_state` holds a row per queue an admin paused or resumed, with when
//! and by whom it was paused (`paused_at` null: running). Claims read it (a job of a paused
//! queue is not startable), and so does the dispatch sweep (nothing of a paused queue is
//! sent). On PostgreSQL a row trigger notifies channel `yardmaster_queues` with the queue's
//! name on every change, so every process stops or resumes its consumers of that queue at
//! once. Every statement may run twice (two processes migrating one store at once).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum QueueState {
    Table,
    Name,
    PausedAt,
    PausedBy,
    ChangedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(QueueState::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(QueueState::Name).string_len(64).not_null().primary_key())
                    .col(ColumnDef::new(QueueState::PausedAt).timestamp_with_time_zone().null())
                    .col(ColumnDef::new(QueueState::PausedBy).string_len(255).null())
                    .col(ColumnDef::new(QueueState::ChangedAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION yardmaster_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               PERFORM pg_notify('yardmaster_queues', NEW.name);
               RETURN NULL;
             END $$",
        )
        .await?;
        db.execute_unprepared("DROP TRIGGER IF EXISTS queue_state_notify ON queue_state").await?;
        db.execute_unprepared(
            "CREATE TRIGGER queue_state_notify AFTER INSERT OR UPDATE ON queue_state
             FOR EACH ROW EXECUTE FUNCTION yardmaster_notify_queue()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            let db = manager.get_connection();
            db.execute_unprepared("DROP TRIGGER IF EXISTS queue_state_notify ON queue_state").await?;
            db.execute_unprepared("DROP FUNCTION IF EXISTS yardmaster_notify_queue()").await?;
        }
        manager.drop_table(Table::drop().table(QueueState::Table).if_exists().to_owned()).await?;
        Ok(())
    }
}
