//! Unique jobs: `unique_key`, the key a `unique` submission was made under, and an index
//! of those jobs by room, key and creation, where a later submission of the same key finds
//! the job that answers it.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    UniqueKey,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let column = ColumnDef::new(Job::UniqueKey).string_len(300).null().to_owned();
        manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX IF NOT EXISTS ix_job_unique ON job (room, unique_key, created_at) \
                 WHERE unique_key IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared("DROP INDEX IF EXISTS ix_job_unique").await?;
        manager.alter_table(Table::alter().table(Job::Table).drop_column(Job::UniqueKey).to_owned()).await?;
        Ok(())
    }
}
