//! The `job_dependency` table: one row per edge, a job and a job it waits for.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job_dependency")]
pub struct Model {
    /// The job that waits.
    #[sea_orm(primary_key, auto_increment = false)]
    pub job_id: Uuid,
    /// The job it waits for.
    #[sea_orm(primary_key, auto_increment = false)]
    pub dependency_id: Uuid,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
