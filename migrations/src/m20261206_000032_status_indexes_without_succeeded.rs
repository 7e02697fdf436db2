//! On PostgreSQL, the two indexes keyed by a job's status and id (`ix_job_status_id`,
//! `ix_job_room_status_id`) hold no succeeded job. An outcome that succeeds then adds no entry
//! to them: of the six indexes keyed by id that every row version enters, these were the two
//! whose new entries a drain claimed level by level (priorities) scatters the widest
//! (`BENCHMARKS.md`, 2026-12-06). A listing of succeeded jobs reads `ix_job_room_id` instead
//! and skips the others (most jobs are succeeded ones); a listing of any other status reads
//! the partial index, as its status comes as a literal (`store::sea::reads`). SQLite kept
//! both whole here (the same change measured no better than a round's noise then,
//! `BENCHMARKS.md`, 2026-11-30 (late)); migration 35 makes them partial there too.
//!
//! Each is rebuilt under the migration's lock on `job` (writes wait while it builds), unless
//! it is already so: `docs/deployment.md` says how a large deployment builds them beforehand
//! without blocking writes.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// (name, columns) of each index; both keep migration 31's room in their leaves.
pub const INDEXES: [(&str, &str); 2] =
    [("ix_job_status_id", "status, id"), ("ix_job_room_status_id", "room, status, id")];

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, true).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, false).await
    }
}

/// Builds each of [`INDEXES`] again, `partial` or whole, where it is not so already; on
/// PostgreSQL only.
async fn rebuild(manager: &SchemaManager<'_>, partial: bool) -> Result<(), DbErr> {
    let db = manager.get_connection();
    if db.get_database_backend() == DbBackend::Postgres {
        // Up rebuilds an index not yet partial; down, one that is.
        let (predicate, unless) = match partial {
            true => ("WHERE status <> 'succeeded'", "NOT"),
            false => ("", ""),
        };
        for (name, columns) in INDEXES {
            db.execute_unprepared(&format!(
                "DO $$ BEGIN IF {unless} EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('{name}') \
                 AND indpred IS NOT NULL) THEN DROP INDEX IF EXISTS {name}; \
                 CREATE INDEX {name} ON job ({columns}) WITH (fillfactor = 50) {predicate}; END IF; END $$"
            ))
            .await?;
        }
    }
    Ok(())
}
