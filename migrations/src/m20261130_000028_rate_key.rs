//! `rate_key`: the limit a job's start counts toward a rate, set only when its limit has a
//! `rate` (a job's `limit_key` then). The index of starts that rates count moves from
//! every limited job to these: a `max_running` alone no longer adds an entry to it at each
//! start and each ending. Jobs already stored keep being counted: every limited row that a
//! rate's window (a day at most) can still see gets its `limit_key` here, since which
//! limits have rates is configuration, not data. Every statement may run twice (two
//! processes migrating one store at once).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261127_000024_sqlite_planner_stats as planner;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    RateKey,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("job", "rate_key").await? {
            let column = ColumnDef::new(Job::RateKey).string_len(600).null().to_owned();
            // `IF NOT EXISTS` on PostgreSQL, for a second process that checked meanwhile.
            let alter = Table::alter().table(Job::Table).add_column_if_not_exists(column).to_owned();
            manager.alter_table(alter).await?;
        }
        let db = manager.get_connection();
        // Live jobs, and ended ones that started within a day (the longest rate period); on
        // SQLite, every limited job (an embedded store is small, and times are text there).
        let recent = match db.get_database_backend() {
            DbBackend::Postgres => "(status IN ('queued', 'running') OR started_at > now() - interval '1 day')",
            _ => "1 = 1",
        };
        let backfill = format!(
            "UPDATE job SET rate_key = limit_key WHERE limit_key IS NOT NULL AND rate_key IS NULL AND {recent}"
        );
        for sql in [
            backfill.as_str(),
            "CREATE INDEX IF NOT EXISTS ix_job_rate_started ON job (rate_key, started_at) \
             WHERE rate_key IS NOT NULL AND started_at IS NOT NULL",
            "DROP INDEX IF EXISTS ix_job_limit_started",
        ] {
            db.execute_unprepared(sql).await?;
        }
        planner::set(db, "job", &[("ix_job_rate_started", "100000 10000 1")]).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_limit_started ON job (limit_key, started_at) \
             WHERE limit_key IS NOT NULL AND started_at IS NOT NULL",
            "DROP INDEX IF EXISTS ix_job_rate_started",
        ] {
            db.execute_unprepared(sql).await?;
        }
        planner::set(db, "job", &[("ix_job_limit_started", "100000 10000 1")]).await?;
        manager.alter_table(Table::alter().table(Job::Table).drop_column(Job::RateKey).to_owned()).await
    }
}
