//! The `api_token` table: one row per token, its secret only as a SHA-256 digest.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "api_token")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Hex SHA-256 of the token's secret part.
    pub secret_sha256: String,
    pub user_name: String,
    pub label: Option<String>,
    pub role: String,
    pub read_only: bool,
    /// The rooms granted, as a JSON array of room ids; the first is the default room.
    pub rooms: Json,
    pub created_at: ChronoDateTimeUtc,
    /// Set once; a revoked token is refused from then on.
    pub revoked_at: Option<ChronoDateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
