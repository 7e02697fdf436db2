//! The tables of registered types and remote workers.

/// `job_type`: one row per `room:category:name`, soft-deleted when nobody serves it.
pub mod job_type {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "job_type")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub room: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub category: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        /// The JSON Schema (draft 2020-12) payloads are checked against at submit.
        pub schema: Json,
        pub created_at: ChronoDateTimeUtc,
        /// Registration or revival: the sweeper spares a type this young.
        pub updated_at: ChronoDateTimeUtc,
        pub deleted_at: Option<ChronoDateTimeUtc>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// `remote_worker`: a worker that claims over HTTP, alive until `expires_at` unless renewed.
pub mod remote_worker {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "remote_worker")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: Uuid,
        /// The token that registered it: only that token speaks for it.
        pub token_id: Uuid,
        pub name: String,
        pub registered_at: ChronoDateTimeUtc,
        pub last_seen_at: ChronoDateTimeUtc,
        pub expires_at: ChronoDateTimeUtc,
        /// Set once, by its `DELETE` or by the sweeper.
        pub gone_at: Option<ChronoDateTimeUtc>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// `remote_worker_type`: the types (full names) each worker serves.
pub mod remote_worker_type {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "remote_worker_type")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub worker_id: Uuid,
        #[sea_orm(primary_key, auto_increment = false)]
        pub type_name: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
