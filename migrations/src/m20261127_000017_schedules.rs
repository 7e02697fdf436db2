//! Schedules: recurring submissions. `schedule` holds each one (a name unique per room, a
//! cron expression or a period, a time zone, the job to submit, its overlap and catch-up
//! policies) with its next fire time, read by every scheduler from a partial index of the
//! schedules that are not paused. `schedule_tick` is a schedule's log: one row per tick
//! time, written in the transaction that advances the schedule, so however many schedulers
//! run, a tick is decided once; a fired tick names its job. Ticks older than
//! `scheduler.keep_ticks_days` are removed by time, through their own index. Every statement may run twice
//! (two processes migrating one store at once).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.create_table(schedule_table()).await?;
        manager.create_table(tick_table()).await?;
        let db = manager.get_connection();
        for sql in [
            "CREATE UNIQUE INDEX IF NOT EXISTS ux_schedule_name ON schedule (room, name)",
            "CREATE INDEX IF NOT EXISTS ix_schedule_due ON schedule (next_fire_at) WHERE paused = false",
            "CREATE INDEX IF NOT EXISTS ix_schedule_tick_firing ON schedule_tick (recorded_at) WHERE outcome = 'firing'",
            "CREATE INDEX IF NOT EXISTS ix_schedule_tick_recorded ON schedule_tick (recorded_at)",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["schedule_tick", "schedule"] {
            manager.drop_table(Table::drop().table(Alias::new(table)).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Schedule {
    Table,
    Id,
    Room,
    Name,
    Cron,
    EverySeconds,
    Timezone,
    Job,
    Overlap,
    CatchUp,
    MaxCatchUp,
    Paused,
    NextFireAt,
    LastTickAt,
    LastJobId,
    Source,
    Version,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ScheduleTick {
    Table,
    ScheduleId,
    TickAt,
    Outcome,
    JobId,
    Missed,
    Request,
    Detail,
    RecordedAt,
}

fn schedule_table() -> TableCreateStatement {
    Table::create()
        .table(Schedule::Table)
        .if_not_exists()
        .col(ColumnDef::new(Schedule::Id).uuid().not_null().primary_key())
        .col(ColumnDef::new(Schedule::Room).string_len(64).not_null())
        .col(ColumnDef::new(Schedule::Name).string_len(128).not_null())
        .col(ColumnDef::new(Schedule::Cron).string_len(256).null())
        .col(ColumnDef::new(Schedule::EverySeconds).double().null())
        .col(ColumnDef::new(Schedule::Timezone).string_len(64).not_null())
        .col(ColumnDef::new(Schedule::Job).json_binary().not_null())
        .col(ColumnDef::new(Schedule::Overlap).string_len(16).not_null())
        .col(ColumnDef::new(Schedule::CatchUp).string_len(16).not_null())
        .col(ColumnDef::new(Schedule::MaxCatchUp).integer().not_null())
        .col(ColumnDef::new(Schedule::Paused).boolean().not_null())
        .col(ColumnDef::new(Schedule::NextFireAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(Schedule::LastTickAt).timestamp_with_time_zone().null())
        .col(ColumnDef::new(Schedule::LastJobId).uuid().null())
        .col(ColumnDef::new(Schedule::Source).string_len(16).not_null())
        .col(ColumnDef::new(Schedule::Version).big_integer().not_null())
        .col(ColumnDef::new(Schedule::CreatedAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(Schedule::UpdatedAt).timestamp_with_time_zone().not_null())
        .to_owned()
}

fn tick_table() -> TableCreateStatement {
    Table::create()
        .table(ScheduleTick::Table)
        .if_not_exists()
        .col(ColumnDef::new(ScheduleTick::ScheduleId).uuid().not_null())
        .col(ColumnDef::new(ScheduleTick::TickAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(ScheduleTick::Outcome).string_len(16).not_null())
        .col(ColumnDef::new(ScheduleTick::JobId).uuid().null())
        .col(ColumnDef::new(ScheduleTick::Missed).big_integer().not_null())
        .col(ColumnDef::new(ScheduleTick::Request).json_binary().null())
        .col(ColumnDef::new(ScheduleTick::Detail).text().null())
        .col(ColumnDef::new(ScheduleTick::RecordedAt).timestamp_with_time_zone().not_null())
        .primary_key(Index::create().col(ScheduleTick::ScheduleId).col(ScheduleTick::TickAt))
        .to_owned()
}
