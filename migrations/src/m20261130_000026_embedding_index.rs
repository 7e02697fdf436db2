//! The neighbour index of a set (HNSW, built by `embeddings.index` once the set is whole):
//! `embedding_index`, one row per set naming its current build and the vectors it was built
//! from (`embedding_set.vectors_revision`, raised when a set's rows are written again), and
//! `embedding_index_part`, the build's file in parts of a few megabytes, so a worker on any
//! host fetches it once into its own cache and maps it from there.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum EmbeddingSet {
    Table,
    VectorsRevision,
}

#[derive(DeriveIden)]
enum EmbeddingIndex {
    Table,
    SetName,
    Build,
    VectorsRevision,
    Method,
    Items,
    Dims,
    Bytes,
    Parts,
    BuiltAt,
}

#[derive(DeriveIden)]
enum EmbeddingIndexPart {
    Table,
    SetName,
    Build,
    Part,
    Bytes,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = ColumnDef::new(EmbeddingSet::VectorsRevision).big_integer().not_null().default(0).to_owned();
        manager.alter_table(Table::alter().table(EmbeddingSet::Table).add_column(column).to_owned()).await?;
        manager
            .create_table(
                Table::create()
                    .table(EmbeddingIndex::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(EmbeddingIndex::SetName).string_len(265).not_null().primary_key())
                    .col(ColumnDef::new(EmbeddingIndex::Build).uuid().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::VectorsRevision).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::Method).string_len(64).not_null())
                    .col(ColumnDef::new(EmbeddingIndex::Items).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::Dims).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::Bytes).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::Parts).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndex::BuiltAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(EmbeddingIndexPart::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(EmbeddingIndexPart::SetName).string_len(265).not_null())
                    .col(ColumnDef::new(EmbeddingIndexPart::Build).uuid().not_null())
                    .col(ColumnDef::new(EmbeddingIndexPart::Part).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingIndexPart::Bytes).binary().not_null())
                    .primary_key(Index::create().col(EmbeddingIndexPart::Build).col(EmbeddingIndexPart::Part))
                    .to_owned(),
            )
            .await?;
        // A publication deletes the set's other builds (earlier ones, and parts a crashed
        // build left) by set.
        let by_set = Index::create()
            .name("embedding_index_part_set")
            .table(EmbeddingIndexPart::Table)
            .col(EmbeddingIndexPart::SetName)
            .to_owned();
        manager.create_index(by_set).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(EmbeddingIndexPart::Table).to_owned()).await?;
        manager.drop_table(Table::drop().table(EmbeddingIndex::Table).to_owned()).await?;
        let set = Table::alter().table(EmbeddingSet::Table).drop_column(EmbeddingSet::VectorsRevision).to_owned();
        manager.alter_table(set).await
    }
}
