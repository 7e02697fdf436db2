//! Schema migrations for yardmaster, applied by `yardmaster migrate` or at start-up.
//!
//! The same migrations run on SQLite (embedded default) and PostgreSQL (production);
//! anything backend-specific is written in SQL both engines accept.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_create_job;
mod m20261122_000002_create_job_event;
mod m20261122_000003_add_dispatch_columns;
mod m20261122_000004_add_retry_columns;
mod m20261122_000005_fan_out;
mod m20261123_000006_partial_indexes;
mod m20261124_000007_embeddings;
mod m20261125_000008_rooms_and_tokens;
mod m20261125_000009_job_event_notify;
mod m20261125_000010_remote_workers;
mod m20261125_000011_uploads;
mod m20261125_000012_finished_at_index;
mod m20261126_000013_cancel_notify;
mod m20261127_000014_retry_policy_filled;
mod m20261127_000015_waiting_index;
mod m20261127_000016_deadlines;
mod m20261127_000017_schedules;
mod m20261127_000018_priorities;
mod m20261127_000019_queue_pauses;
mod m20261127_000020_limits;
mod m20261127_000021_unique_jobs;
mod m20261127_000022_dependencies;
mod m20261127_000023_queue_minutes;
pub mod m20261127_000024_sqlite_planner_stats;
mod m20261130_000025_embedding_labels;
mod m20261130_000026_embedding_index;
mod m20261130_000027_embedding_pgvector;
mod m20261130_000028_rate_key;
mod m20261130_000029_event_foreign_key;
mod m20261201_000030_dispatch_outbox;
mod m20261202_000031_job_index_fillfactor;
mod m20261206_000032_status_indexes_without_succeeded;
mod m20261206_000033_fan_in_counts;
mod m20261206_000034_fan_in_totals;
mod m20261206_000035_sqlite_status_indexes_without_succeeded;
mod m20261206_000036_sqlite_admitted_until_finished;
mod m20261207_000037_sqlite_status_indexes_without_running;

pub use m20261127_000014_retry_policy_filled::DEFAULT_POLICY;

/// Runs `sql` (one or more statements) if the store is `backend`, for a step that only one
/// engine takes.
async fn only_on(
    manager: &SchemaManager<'_>,
    backend: sea_orm_migration::sea_orm::DbBackend,
    sql: &str,
) -> Result<(), DbErr> {
    use sea_orm_migration::sea_orm::ConnectionTrait as _;
    let db = manager.get_connection();
    if db.get_database_backend() == backend {
        db.execute_unprepared(sql).await?;
    }
    Ok(())
}

/// Lists every migration in the order it is applied.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_create_job::Migration),
            Box::new(m20261122_000002_create_job_event::Migration),
            Box::new(m20261122_000003_add_dispatch_columns::Migration),
            Box::new(m20261122_000004_add_retry_columns::Migration),
            Box::new(m20261122_000005_fan_out::Migration),
            Box::new(m20261123_000006_partial_indexes::Migration),
            Box::new(m20261124_000007_embeddings::Migration),
            Box::new(m20261125_000008_rooms_and_tokens::Migration),
            Box::new(m20261125_000009_job_event_notify::Migration),
            Box::new(m20261125_000010_remote_workers::Migration),
            Box::new(m20261125_000011_uploads::Migration),
            Box::new(m20261125_000012_finished_at_index::Migration),
            Box::new(m20261126_000013_cancel_notify::Migration),
            Box::new(m20261127_000014_retry_policy_filled::Migration),
            Box::new(m20261127_000015_waiting_index::Migration),
            Box::new(m20261127_000016_deadlines::Migration),
            Box::new(m20261127_000017_schedules::Migration),
            Box::new(m20261127_000018_priorities::Migration),
            Box::new(m20261127_000019_queue_pauses::Migration),
            Box::new(m20261127_000020_limits::Migration),
            Box::new(m20261127_000021_unique_jobs::Migration),
            Box::new(m20261127_000022_dependencies::Migration),
            Box::new(m20261127_000023_queue_minutes::Migration),
            Box::new(m20261127_000024_sqlite_planner_stats::Migration),
            Box::new(m20261130_000025_embedding_labels::Migration),
            Box::new(m20261130_000026_embedding_index::Migration),
            Box::new(m20261130_000027_embedding_pgvector::Migration),
            Box::new(m20261130_000028_rate_key::Migration),
            Box::new(m20261130_000029_event_foreign_key::Migration),
            Box::new(m20261201_000030_dispatch_outbox::Migration),
            Box::new(m20261202_000031_job_index_fillfactor::Migration),
            Box::new(m20261206_000032_status_indexes_without_succeeded::Migration),
            Box::new(m20261206_000033_fan_in_counts::Migration),
            Box::new(m20261206_000034_fan_in_totals::Migration),
            Box::new(m20261206_000035_sqlite_status_indexes_without_succeeded::Migration),
            Box::new(m20261206_000036_sqlite_admitted_until_finished::Migration),
            Box::new(m20261207_000037_sqlite_status_indexes_without_running::Migration),
        ]
    }
}
