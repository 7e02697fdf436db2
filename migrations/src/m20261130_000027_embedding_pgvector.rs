//! The tables of a set's pgvector builds: on a PostgreSQL server that offers the `vector`
//! extension, a set's index is a table of its own (`embedding_vectors_<build>`, made at run
//! time, since the extension is optional) with an HNSW index on it. This registry names each
//! such table's set before the table exists, so a publication or a crashed build's next
//! attempt can drop every table of the set but the current one. On SQLite it stays empty.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum EmbeddingPgvectorBuild {
    Table,
    Build,
    SetName,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(EmbeddingPgvectorBuild::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(EmbeddingPgvectorBuild::Build).uuid().not_null().primary_key())
                    .col(ColumnDef::new(EmbeddingPgvectorBuild::SetName).string_len(265).not_null())
                    .col(ColumnDef::new(EmbeddingPgvectorBuild::CreatedAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;
        let by_set = Index::create()
            .name("embedding_pgvector_build_set")
            .table(EmbeddingPgvectorBuild::Table)
            .col(EmbeddingPgvectorBuild::SetName)
            .to_owned();
        manager.create_index(by_set).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(EmbeddingPgvectorBuild::Table).to_owned()).await
    }
}
