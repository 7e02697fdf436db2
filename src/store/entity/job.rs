//! The `job` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub room: String,
    pub operation: String,
    pub queue: String,
    pub payload: Json,
    pub result: Option<Json>,
    pub status: String,
    pub parent_job_id: Option<Uuid>,
    pub progress_current: i64,
    pub progress_total: Option<i64>,
    pub attempts: i32,
    pub max_retries: i32,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: ChronoDateTimeUtc,
    pub started_at: Option<ChronoDateTimeUtc>,
    pub finished_at: Option<ChronoDateTimeUtc>,
    pub leased_until: Option<ChronoDateTimeUtc>,
    pub owner: Option<String>,
    pub run_after: Option<ChronoDateTimeUtc>,
    pub published_at: Option<ChronoDateTimeUtc>,
    pub failures: i32,
    pub retry_policy: Option<Json>,
    pub fan_out: Option<String>,
    pub deferred_at: Option<ChronoDateTimeUtc>,
    pub submitted_by: Option<String>,
    pub service: Option<String>,
    pub cleaned_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
