//! The `embedding_set` and `embedding` tables (migration `m20261124_000007_embeddings`), and
//! the sets' neighbour indexes, `embedding_index` and `embedding_index_part` (migration
//! `m20261130_000026_embedding_index`).

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
        /// Raised whenever its rows are written again (a re-run of its job): an index built
        /// from another revision is not used (migration `m20261130_000026_embedding_index`).
        pub vectors_revision: i64,
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

pub mod embedding_index {
    //! One row per indexed set: its current build, the vectors revision it was built from,
    //! how it ranks (`method`), and the build's size in bytes and parts.
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "embedding_index")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub set_name: String,
        pub build: Uuid,
        pub vectors_revision: i64,
        pub method: String,
        pub items: i64,
        pub dims: i64,
        pub bytes: i64,
        pub parts: i64,
        pub built_at: ChronoDateTimeUtc,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod embedding_index_part {
    //! One part of a build's file, in order.
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "embedding_index_part")]
    pub struct Model {
        pub set_name: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub build: Uuid,
        #[sea_orm(primary_key, auto_increment = false)]
        pub part: i64,
        pub bytes: Vec<u8>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod embedding_pgvector_build {
    //! A pgvector build's table (`embedding_vectors_<build>`), registered under its set
    //! before the table is made, so every table of a set but its current one can be dropped.
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "embedding_pgvector_build")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub build: Uuid,
        pub set_name: String,
        pub created_at: ChronoDateTimeUtc,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
