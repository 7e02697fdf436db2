//! On PostgreSQL, the six indexes of `job` keyed by its id (the primary key, and the id after
//! queue, room, operation and status) leave half of each leaf page free. A claim and an
//! outcome each add an entry to every one of them; when the jobs of a queue are claimed in
//! priority order rather than by age, every leaf is visited once per level, and a full leaf
//! is cleared by checking its entries against the heap before it may split (bottom-up
//! deletion): measured, the cost that made a drain of interleaved priorities dearer than a
//! plain one (`BENCHMARKS.md`, 2026-12-02 (afternoon)). Pages written from now on keep the
//! room; an existing deployment's older pages keep their density until `REINDEX INDEX
//! CONCURRENTLY` rebuilds them, which the service does not need. SQLite's indexes have no
//! such setting.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// The indexes keyed by a job's id.
const INDEXES: [&str; 6] = [
    "job_pkey",
    "ix_job_queue_id",
    "ix_job_room_id",
    "ix_job_operation_id",
    "ix_job_status_id",
    "ix_job_room_status_id",
];
/// The share of each leaf page they fill, in percent (PostgreSQL's default for a B-tree: 90).
const FILLFACTOR: u32 = 50;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_each(manager, &format!("SET (fillfactor = {FILLFACTOR})")).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_each(manager, "RESET (fillfactor)").await
    }
}

/// `ALTER INDEX <index> <change>` for each of [`INDEXES`], on PostgreSQL only.
async fn alter_each(manager: &SchemaManager<'_>, change: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    if db.get_database_backend() == DbBackend::Postgres {
        for index in INDEXES {
            db.execute_unprepared(&format!("ALTER INDEX {index} {change}")).await?;
        }
    }
    Ok(())
}
