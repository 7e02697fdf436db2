//! Listing jobs: summaries only, with the payload and result never read, so a page of 500
//! jobs costs the same whatever clients submitted.

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::SeaStore;
use crate::domain::{JobStatus, JobSummary};
use crate::store::entity::job;
use crate::store::{JobFilter, Page, StoreError};

/// The columns of a summary, as read.
#[derive(Debug, FromQueryResult)]
struct SummaryRow {
    id: Uuid,
    room: String,
    operation: String,
    queue: String,
    status: String,
    parent_job_id: Option<Uuid>,
    progress_current: i64,
    progress_total: Option<i64>,
    attempts: i32,
    max_retries: i32,
    error_code: Option<String>,
    error_message: Option<String>,
    idempotency_key: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    finished_at: Option<chrono::DateTime<chrono::Utc>>,
    leased_until: Option<chrono::DateTime<chrono::Utc>>,
    owner: Option<String>,
    run_after: Option<chrono::DateTime<chrono::Utc>>,
    failures: i32,
    fan_out: Option<String>,
    deferred_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl SeaStore {
    pub(super) async fn list_summaries(&self, filter: &JobFilter) -> Result<Page, StoreError> {
        use job::Column as C;
        let plain = [
            C::Id,
            C::Room,
            C::Operation,
            C::Queue,
            C::Status,
            C::ParentJobId,
            C::ProgressCurrent,
            C::ProgressTotal,
            C::Attempts,
            C::MaxRetries,
            C::ErrorCode,
            C::IdempotencyKey,
            C::CreatedAt,
            C::StartedAt,
            C::FinishedAt,
            C::LeasedUntil,
            C::Owner,
            C::RunAfter,
            C::Failures,
            C::FanOut,
            C::DeferredAt,
        ];
        // SUBSTR counts characters on both engines.
        let message = Expr::cust(format!("SUBSTR(error_message, 1, {})", JobSummary::MESSAGE_CHARS));
        let mut query = job::Entity::find().select_only().columns(plain).column_as(message, "error_message");
        if let Some(rooms) = &filter.rooms {
            query = query.filter(C::Room.is_in(rooms.iter().map(String::as_str)));
        }
        if let Some(status) = filter.status {
            query = query.filter(C::Status.eq(status.as_str()));
        }
        if let Some(operation) = &filter.operation {
            query = query.filter(C::Operation.eq(operation.as_str()));
        }
        if let Some(queue) = &filter.queue {
            query = query.filter(C::Queue.eq(queue.as_str()));
        }
        if let Some(parent) = filter.parent_job_id {
            query = query.filter(C::ParentJobId.eq(parent));
        }
        if let Some(before) = filter.before {
            query = query.filter(C::Id.lt(before));
        }
        if let Some(not_before) = filter.not_before {
            query = query.filter(C::Id.gte(not_before));
        }
        if let Some(key) = &filter.idempotency_key {
            query = query.filter(C::IdempotencyKey.eq(key.as_str()));
        }
        let rows = query.order_by_desc(C::Id).limit(filter.limit + 1).into_model::<SummaryRow>().all(&self.db).await?;
        let mut jobs = rows.into_iter().map(to_summary).collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match jobs.len() as u64 > filter.limit {
            true => {
                jobs.truncate(filter.limit as usize);
                jobs.last().map(|job| job.id)
            }
            false => None,
        };
        Ok(Page { jobs, next_cursor })
    }
}

fn to_summary(row: SummaryRow) -> Result<JobSummary, StoreError> {
    let status = row.status.parse::<JobStatus>().map_err(|err| StoreError::Corrupt(err.to_string()))?;
    Ok(JobSummary {
        id: row.id,
        room: row.room,
        operation: row.operation,
        queue: row.queue,
        status,
        parent_job_id: row.parent_job_id,
        progress_current: row.progress_current,
        progress_total: row.progress_total,
        attempts: row.attempts,
        max_retries: row.max_retries,
        error_code: row.error_code,
        error_message: row.error_message,
        idempotency_key: row.idempotency_key,
        created_at: row.created_at,
        started_at: row.started_at,
        finished_at: row.finished_at,
        leased_until: row.leased_until,
        owner: row.owner,
        run_after: row.run_after,
        failures: row.failures,
        fan_out: row.fan_out,
        deferred_at: row.deferred_at,
    })
}
