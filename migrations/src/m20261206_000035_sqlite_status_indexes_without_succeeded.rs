//! Migration 32 on SQLite: the two indexes keyed by a job's status and id
//! (`ix_job_status_id`, `ix_job_room_status_id`) hold no succeeded job, so an outcome that
//! succeeds adds no entry to them. A drain claimed level by level (priorities) scatters those
//! entries over the most leaves, and SQLite writes each leaf a commit touches to its log whole
//! (`BENCHMARKS.md`, 2026-12-06 (evening), issue 29). SQLite reads a partial index only for a
//! query whose condition holds the index's own term as written, so every look by a status
//! other than succeeded says `status <> 'succeeded'` besides (`store::sea::rows::LIVE`); a
//! listing of succeeded jobs reads `ix_job_room_id` or the table in id order, most jobs being
//! succeeded ones. The planner's rows for both (migration 24) stay as they were.
//! PostgreSQL has had this since migration 32.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261127_000024_sqlite_planner_stats::{set, STATS};
use crate::m20261206_000032_status_indexes_without_succeeded::INDEXES;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "WHERE status <> 'succeeded'", &planned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "", &planned()).await
    }
}

/// The planner's rows (migration 24) of [`INDEXES`].
pub(crate) fn planned() -> Vec<(&'static str, &'static str)> {
    STATS.iter().copied().filter(|(index, _)| INDEXES.iter().any(|(name, _)| name == index)).collect()
}

/// Builds each of [`INDEXES`] again with `predicate`, and their planner rows `stats`; on
/// SQLite only.
pub(crate) async fn rebuild(manager: &SchemaManager<'_>, predicate: &str, stats: &[(&str, &str)]) -> Result<(), DbErr> {
    let db = manager.get_connection();
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    for (name, columns) in INDEXES {
        db.execute_unprepared(&format!(
            "DROP INDEX IF EXISTS {name}; CREATE INDEX {name} ON job ({columns}) {predicate}"
        ))
        .await?;
    }
    // Dropping an index drops its row of `sqlite_stat1`.
    set(db, "job", stats).await
}
