//! Jobs that wait for jobs: `job_dependency`, one row per edge (a job, and a job it waits
//! for), indexed both ways; on `job`, `waiting_since` (a job held QUEUED until its
//! dependencies allow it; `held_since` is set too, so nothing sends or claims it),
//! `has_dependents` (its ending settles the jobs that wait for it) and
//! `on_dependency_failure` (`cancel` or `run`). A partial index finds the waiting jobs.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Job {
    Table,
    WaitingSince,
    HasDependents,
    OnDependencyFailure,
}

#[derive(DeriveIden)]
enum JobDependency {
    Table,
    JobId,
    DependencyId,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ColumnDef::new(Job::WaitingSince).timestamp_with_time_zone().null().to_owned(),
            ColumnDef::new(Job::HasDependents).boolean().not_null().default(false).to_owned(),
            ColumnDef::new(Job::OnDependencyFailure).string_len(16).null().to_owned(),
        ] {
            manager.alter_table(Table::alter().table(Job::Table).add_column(column).to_owned()).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(JobDependency::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(JobDependency::JobId).uuid().not_null())
                    .col(ColumnDef::new(JobDependency::DependencyId).uuid().not_null())
                    .primary_key(Index::create().col(JobDependency::JobId).col(JobDependency::DependencyId))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_dependency_of ON job_dependency (dependency_id, job_id)",
            "CREATE INDEX IF NOT EXISTS ix_job_waiting_deps ON job (id) \
             WHERE waiting_since IS NOT NULL AND status = 'queued'",
        ] {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP INDEX IF EXISTS ix_job_waiting_deps").await?;
        manager.drop_table(Table::drop().table(JobDependency::Table).if_exists().to_owned()).await?;
        for column in [Job::WaitingSince, Job::HasDependents, Job::OnDependencyFailure] {
            manager.alter_table(Table::alter().table(Job::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}
