//! What SQLite's query planner assumes of `job` (SQLite only; PostgreSQL keeps its own
//! statistics), and the index of jobs waiting for their dependencies keyed by when they
//! began to wait (both stores), so its look is a range SQLite plans on it. With none, the planner takes an equality on any index's first column for
//! about ten rows, so `status = 'queued'` on `ix_job_status_id` wins over every partial
//! index: the look for held jobs after each ending, the dispatch sweep, aging, expiry and
//! the stranded-dependents net each read every QUEUED row. These rows (SQLite's documented
//! hand-written `sqlite_stat1`) describe the shape the table has in service instead: a large
//! history, few values of status, queue, room or operation, and partial indexes of live jobs
//! that are small. They are fixed, not measured: no `ANALYZE` runs, so a plan never turns
//! with the data. A later index on `job` adds its row (see [`STATS`]; a test checks every
//! index has one).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};
use sea_orm_migration::SchemaManagerConnection;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// `(index, stat)`: the rows in the index, then the rows one value of its first column,
/// of its first two, … matches.
pub const STATS: &[(&str, &str)] = &[
    ("sqlite_autoindex_job_1", "1000000 1"),
    ("ix_job_status_id", "1000000 200000 1"),
    ("ix_job_queue_id", "1000000 100000 1"),
    ("ix_job_operation_id", "1000000 50000 1"),
    ("ix_job_room_id", "1000000 100000 1"),
    ("ix_job_room_status_id", "1000000 100000 20000 1"),
    ("ix_job_history", "900000 300000 1"),
    ("ix_job_finished_at", "900000 1"),
    ("ix_job_parent", "100000 10 1"),
    ("ux_job_room_key", "100000 10000 1"),
    ("ix_job_unique", "10000 1000 2 1"),
    ("ix_job_limit_started", "100000 10000 1"),
    ("ix_job_scripts_files", "10000 1000 1"),
    // Live jobs only: small.
    ("ix_job_running_lease", "1000 1"),
    ("ix_job_undispatched", "1000 1"),
    ("ix_job_waiting", "1000 1"),
    ("ix_job_expiring", "1000 1"),
    ("ix_job_aging", "1000 1"),
    ("ix_job_waiting_deps", "1000 1"),
    ("ix_job_tasks", "1000 100 20 1"),
    ("ix_job_scripts_queued", "1000 100 20 5 1"),
    ("ix_job_scripts_running", "100 10 5"),
    ("ix_job_limit_admitted", "1000 100"),
    ("ix_job_limit_held", "1000 100 20 1"),
];

/// Writes `stats` for `table`'s indexes (replacing theirs) and makes every connection
/// read them again.
pub async fn set(db: &SchemaManagerConnection<'_>, table: &str, stats: &[(&str, &str)]) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    let quote = |text: &str| format!("'{}'", text.replace('\'', "''"));
    // One batch, so one connection of the pool runs it all: another might plan the names
    // with the schema it read before. `sqlite_stat1` exists once ANALYZE has run (here on an
    // empty table of its own); a schema change at the end makes every open connection read
    // the schema, and the statistics with it, again.
    let mut batch = String::from("CREATE TABLE IF NOT EXISTS ym_planner_probe (x); ANALYZE ym_planner_probe; ");
    for (index, stat) in stats {
        batch.push_str(&format!(
            "DELETE FROM sqlite_stat1 WHERE tbl = {table} AND idx = {index}; \
             INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ({table}, {index}, {stat}); ",
            table = quote(table),
            index = quote(index),
            stat = quote(stat),
        ));
    }
    batch.push_str("DROP TABLE ym_planner_probe");
    db.execute_unprepared(&batch).await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared(
            "DROP INDEX IF EXISTS ix_job_waiting_deps; \
             CREATE INDEX ix_job_waiting_deps ON job (waiting_since) WHERE waiting_since IS NOT NULL AND status = 'queued'",
        )
        .await?;
        set(db, "job", STATS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if db.get_database_backend() == DbBackend::Sqlite {
            db.execute_unprepared("DELETE FROM sqlite_stat1 WHERE tbl = 'job'").await?;
        }
        db.execute_unprepared(
            "DROP INDEX IF EXISTS ix_job_waiting_deps; \
             CREATE INDEX ix_job_waiting_deps ON job (id) WHERE waiting_since IS NOT NULL AND status = 'queued'",
        )
        .await?;
        Ok(())
    }
}
