//! On SQLite, a limit's index of admitted jobs (`ix_job_limit_admitted`, migration 20) holds
//! a job until it has ended (`finished_at IS NULL`) rather than while it is QUEUED or
//! RUNNING: the same jobs (a job not yet ended is one of those two, `finished_at` being set
//! by every ending and cleared by every way back to QUEUED), but a claim changes no column
//! of the index's term. SQLite takes an entry out and puts it back for every update that
//! changes a column its index's term reads, so each claim of a limited job sought the
//! entry twice in a run of keys all alike; now only the submission and the ending touch it
//! (`BENCHMARKS.md`, 2026-12-06 (night), issue 29). The look that counts them names both
//! terms, so either index serves it. PostgreSQL keeps the status's term: a claim writes a
//! new version of the row to every index there whichever the term, the status being
//! indexed. The planner's row (migration 24) stays as it was.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261127_000024_sqlite_planner_stats::{set, STATS};

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "ix_job_limit_admitted";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "finished_at IS NULL").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "status IN ('queued', 'running')").await
    }
}

/// Builds the index of admitted jobs again with `live` as its last term, and its planner
/// row; on SQLite only.
async fn rebuild(manager: &SchemaManager<'_>, live: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    db.execute_unprepared(&format!(
        "DROP INDEX IF EXISTS {INDEX}; CREATE INDEX {INDEX} ON job (limit_key) \
         WHERE limit_key IS NOT NULL AND held_since IS NULL AND {live}"
    ))
    .await?;
    // Dropping an index drops its row of `sqlite_stat1`.
    let rows: Vec<(&str, &str)> = STATS.iter().copied().filter(|(index, _)| *index == INDEX).collect();
    set(db, "job", &rows).await
}
