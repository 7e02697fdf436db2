//! Embeddings: `embedding_set`, one row per named set (the job that writes it, how many
//! inputs), and `embedding`, one row per input of a set (its text and its vector as
//! little-endian 32-bit floats: `bytea` on PostgreSQL, a blob on SQLite), whose primary key
//! makes a redelivered batch write once.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(EmbeddingSet::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(EmbeddingSet::Name).string_len(200).not_null().primary_key())
                    .col(ColumnDef::new(EmbeddingSet::JobId).uuid().not_null())
                    .col(ColumnDef::new(EmbeddingSet::Inputs).big_integer().not_null())
                    .col(ColumnDef::new(EmbeddingSet::CreatedAt).timestamp_with_time_zone().not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Embedding::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(Embedding::SetName).string_len(200).not_null())
                    .col(ColumnDef::new(Embedding::Item).big_integer().not_null())
                    .col(ColumnDef::new(Embedding::Input).text().not_null())
                    .col(ColumnDef::new(Embedding::Vector).binary().not_null())
                    .primary_key(Index::create().col(Embedding::SetName).col(Embedding::Item))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(Embedding::Table).to_owned()).await?;
        manager.drop_table(Table::drop().table(EmbeddingSet::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
pub enum EmbeddingSet {
    Table,
    Name,
    JobId,
    Inputs,
    CreatedAt,
}

#[derive(DeriveIden)]
pub enum Embedding {
    Table,
    SetName,
    Item,
    Input,
    Vector,
}
