//! The `job_batch` table: one row per batch outcome of a parent's run.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job_batch")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub parent_job_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    #[sea_orm(primary_key, auto_increment = false)]
    pub batch: i64,
    pub status: String,
    pub output: Option<Json>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub finished_at: ChronoDateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
