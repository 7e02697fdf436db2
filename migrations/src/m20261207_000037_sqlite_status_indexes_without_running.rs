//! On SQLite, the two indexes keyed by a job's status and id (`ix_job_status_id`,
//! `ix_job_room_status_id`) hold no running job either (migration 35 took the succeeded
//! ones out). Every job passed through them twice on its way: its claim put a running entry
//! in and its outcome took it out again, in the few leaves that hold the running ones, and
//! SQLite rebalanced and wrote those leaves whole to its log at nearly every commit: 28% of
//! an embedded drain's page writes (`BENCHMARKS.md`, 2026-12-07, issues 30 and 29). RUNNING jobs
//! are found through `ix_job_running_lease` (`WHERE status = 'running'`), which a claim and
//! an outcome write anyway, and a listing of them sorts what runs, which the slots of the
//! workers bound. Every look by queued, failed or cancelled says the new term besides
//! (`store::sea::rows::STATUS_INDEXED`), and the planner's rows say the indexes are smaller.
//! PostgreSQL keeps its indexes (migration 32): a claim there writes a new version of the
//! row to every index whatever their terms, the status being indexed.

use sea_orm_migration::prelude::*;

use crate::m20261206_000035_sqlite_status_indexes_without_succeeded::{planned, rebuild};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The planner's rows for the two indexes without succeeded or running jobs: a tenth of
/// the table, queued jobs most of it.
const SMALLER: [(&str, &str); 2] =
    [("ix_job_status_id", "100000 30000 1"), ("ix_job_room_status_id", "100000 10000 3000 1")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "WHERE status NOT IN ('succeeded', 'running')", &SMALLER).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, "WHERE status <> 'succeeded'", &planned()).await
    }
}
