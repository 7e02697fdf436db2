//! The `dispatch_outbox` table: a submission's jobs written as published before the
//! transport confirmed their messages, until it has (`dispatch::Dispatcher`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "dispatch_outbox")]
pub struct Model {
    /// Chosen by the submitter before its commit, so it can delete the row after the confirms.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub created_at: ChronoDateTimeUtc,
    /// The jobs' ids, a line each (as a job message carries them).
    pub jobs: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
