//! The `embedding_set` and `embedding` tables (migration `m20261124_000007_embeddings`).

pub mod embedding_set {
    //! One row per named set of embeddings: the job that writes it, how many inputs, and
    //! the revision of its labels (raised whenever they, or its rows, are replaced).
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "embedding_set")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        pub job_id: Uuid,
        pub inputs: i64,
        pub created_at: ChronoDateTimeUtc,
        pub labels_revision: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod embedding {
    //! One row per input of a set: its text, its vector (little-endian f32) and its labels
    //! (a JSON array of strings, or null; migration `m20261130_000025_embedding_labels`).
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "embedding")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub set_name: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub item: i64,
        pub input: String,
        pub vector: Vec<u8>,
        pub labels: Option<String>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
