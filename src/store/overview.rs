//! What operators look at across every room: each queue's waiting and running jobs and its
//! longest wait (over the status index), and the jobs that ended lately (over the
//! `finished_at` index). Read by `/metrics` and the dashboard; written by nothing here.
//! The live figures are a store read ([`crate::store::JobReads::queue_figures`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QuerySelect};

use super::entity::job;
use super::StoreError;

/// One queue's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFigures {
    pub queued: i64,
    pub running: i64,
    /// When the longest-waiting QUEUED job became due (`run_after`, else its creation).
    pub oldest_due: Option<DateTime<Utc>>,
    /// Jobs that ended SUCCEEDED / FAILED / CANCELLED since the time asked about.
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// Adds to `figures` the jobs that ended since `since`, by queue and status; of `rooms`
/// only, when given.
pub async fn ended_since(
    db: &DatabaseConnection,
    since: DateTime<Utc>,
    rooms: Option<&[String]>,
    figures: &mut BTreeMap<String, QueueFigures>,
) -> Result<(), StoreError> {
    let mut query = job::Entity::find();
    if let Some(rooms) = rooms {
        query = query.filter(job::Column::Room.is_in(rooms.iter().map(String::as_str)));
    }
    let rows: Vec<(String, String, i64)> = query
        .select_only()
        .column(job::Column::Queue)
        .column(job::Column::Status)
        .column_as(Expr::cust("COUNT(*)"), "jobs")
        .filter(job::Column::FinishedAt.gte(since))
        .group_by(job::Column::Queue)
        .group_by(job::Column::Status)
        .into_tuple()
        .all(db)
        .await?;
    for (name, status, jobs) in rows {
        let queue = figures.entry(name).or_default();
        match status.as_str() {
            "succeeded" => queue.succeeded = jobs,
            "failed" => queue.failed = jobs,
            "cancelled" => queue.cancelled = jobs,
            // A job retried since it ended has no finish any more; nothing else ends.
            _ => {}
        }
    }
    Ok(())
}

/// One recorded batch of a coordinator's run.
#[derive(Debug, Clone)]
pub struct BatchRow {
    pub batch: i64,
    pub status: String,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub finished_at: DateTime<Utc>,
}

/// The batches of run `attempt` of coordinator `parent` that have ended, failures first,
/// at most `limit`; and how many ended in all, by status.
pub async fn batches(
    db: &DatabaseConnection,
    parent: uuid::Uuid,
    attempt: i32,
    limit: u64,
) -> Result<(Vec<BatchRow>, BTreeMap<String, i64>), StoreError> {
    use super::entity::job_batch::{Column, Entity};
    use sea_orm::QueryOrder as _;
    let of_run = || Entity::find().filter(Column::ParentJobId.eq(parent)).filter(Column::Attempt.eq(attempt));
    let counts: Vec<(String, i64)> = of_run()
        .select_only()
        .column(Column::Status)
        .column_as(Expr::cust("COUNT(*)"), "batches")
        .group_by(Column::Status)
        .into_tuple()
        .all(db)
        .await?;
    let rows = of_run()
        .order_by_asc(Expr::cust("CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END"))
        .order_by_asc(Column::Batch)
        .limit(limit)
        .all(db)
        .await?;
    let rows = rows
        .into_iter()
        .map(|row| BatchRow {
            batch: row.batch,
            status: row.status,
            error_code: row.error_code,
            error_message: row.error_message,
            finished_at: row.finished_at,
        })
        .collect();
    Ok((rows, counts.into_iter().collect()))
}

/// Jobs waiting for their dependencies, by queue (read from the index of waiting jobs).
pub async fn waiting_for_dependencies(db: &DatabaseConnection) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(job::Entity::find()
        .select_only()
        .column(job::Column::Queue)
        .column_as(Expr::cust("COUNT(*)"), "waiting")
        .filter(Expr::cust("waiting_since IS NOT NULL AND status = 'queued'"))
        .group_by(job::Column::Queue)
        .into_tuple::<(String, i64)>()
        .all(db)
        .await?)
}
