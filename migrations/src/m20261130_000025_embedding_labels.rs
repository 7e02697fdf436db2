//! Labels on embedded items (`embedding.labels`: a JSON array of strings, or null), for
//! `transfer_annotations`, which scores a query's labels from its nearest labelled items.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Embedding {
    Table,
    Labels,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = ColumnDef::new(Embedding::Labels).text().null().to_owned();
        manager.alter_table(Table::alter().table(Embedding::Table).add_column(column).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table(Embedding::Table).drop_column(Embedding::Labels).to_owned()).await
    }
}
