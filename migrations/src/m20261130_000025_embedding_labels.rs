//! Labels on embedded items (`embedding.labels`: a JSON array of strings, or null), for
//! `transfer_annotations`, which scores a query's labels from its nearest labelled items;
//! and `embedding_set.labels_revision`, raised whenever a set's labels (or rows) are
//! replaced, so a process that cached the set reads it again.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Embedding {
    Table,
    Labels,
}

#[derive(DeriveIden)]
enum EmbeddingSet {
    Table,
    LabelsRevision,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = ColumnDef::new(Embedding::Labels).text().null().to_owned();
        manager.alter_table(Table::alter().table(Embedding::Table).add_column(column).to_owned()).await?;
        let column = ColumnDef::new(EmbeddingSet::LabelsRevision).big_integer().not_null().default(0).to_owned();
        manager.alter_table(Table::alter().table(EmbeddingSet::Table).add_column(column).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let set = Table::alter().table(EmbeddingSet::Table).drop_column(EmbeddingSet::LabelsRevision).to_owned();
        manager.alter_table(set).await?;
        manager.alter_table(Table::alter().table(Embedding::Table).drop_column(Embedding::Labels).to_owned()).await
    }
}
