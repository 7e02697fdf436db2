//! Every job row holds its retry policy: rows written before policies were recorded get
//! the default one, so a row decodes straight into the job (whose policy is not optional).
//! The column stays nullable; every submission writes it.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// `RetryPolicy::default()` as JSON (a unit test of the service holds the two equal).
pub const DEFAULT_POLICY: &str = r#"{"base_seconds":1.0,"cap_seconds":300.0,"retry_on":[],"no_retry_on":[]}"#;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let sql = format!("UPDATE job SET retry_policy = '{DEFAULT_POLICY}' WHERE retry_policy IS NULL");
        manager.get_connection().execute_unprepared(&sql).await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Ok(())
    }
}
