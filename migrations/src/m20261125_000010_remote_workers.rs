//! Registered job types and remote workers. `job_type` holds each room's types
//! (`room:category:name`) with their JSON Schema, soft-deleted when no worker serves them;
//! `remote_worker` holds workers that claim over HTTP, and `remote_worker_type` the types
//! each serves. Jobs of a registered type are named by the type's full name (wider
//! `operation` on PostgreSQL) and sit on the `@remote` queue, claimed oldest first through
//! a partial index. On PostgreSQL a row trigger notifies channel `yardmaster_tasks` with a
//! type's name whenever one of its jobs becomes claimable (queued, requeued, or announced
//! by the dispatch sweep once its delay is over), to wake claimers held by any API process.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        manager.create_table(type_table()).await?;
        manager.create_table(worker_table()).await?;
        manager.create_table(worker_type_table()).await?;
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_remote_worker_type_name ON remote_worker_type (type_name, worker_id)",
            "CREATE INDEX IF NOT EXISTS ix_remote_worker_live ON remote_worker (expires_at) WHERE gone_at IS NULL",
            "CREATE INDEX IF NOT EXISTS ix_job_tasks ON job (operation, id) WHERE status = 'queued' AND queue = '@remote'",
        ] {
            db.execute_unprepared(sql).await?;
        }
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        db.execute_unprepared("ALTER TABLE job ALTER COLUMN operation TYPE varchar(200)").await?;
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION yardmaster_notify_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               PERFORM pg_notify('yardmaster_tasks', NEW.operation);
               RETURN NULL;
             END $$",
        )
        .await?;
        db.execute_unprepared("DROP TRIGGER IF EXISTS job_task_notify ON job").await?;
        db.execute_unprepared(
            "CREATE TRIGGER job_task_notify AFTER INSERT OR UPDATE OF status, published_at ON job
             FOR EACH ROW WHEN (NEW.queue = '@remote' AND NEW.status = 'queued')
             EXECUTE FUNCTION yardmaster_notify_tasks()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared("DROP TRIGGER IF EXISTS job_task_notify ON job").await?;
            db.execute_unprepared("DROP FUNCTION IF EXISTS yardmaster_notify_tasks()").await?;
        }
        db.execute_unprepared("DROP INDEX IF EXISTS ix_job_tasks").await?;
        for table in ["remote_worker_type", "remote_worker", "job_type"] {
            manager.drop_table(Table::drop().table(Alias::new(table)).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}

fn type_table() -> TableCreateStatement {
    Table::create()
        .table(JobType::Table)
        .if_not_exists()
        .col(ColumnDef::new(JobType::Room).string_len(64).not_null())
        .col(ColumnDef::new(JobType::Category).string_len(32).not_null())
        .col(ColumnDef::new(JobType::Name).string_len(64).not_null())
        .col(ColumnDef::new(JobType::Schema).json_binary().not_null())
        .col(ColumnDef::new(JobType::CreatedAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(JobType::UpdatedAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(JobType::DeletedAt).timestamp_with_time_zone().null())
        .primary_key(Index::create().col(JobType::Room).col(JobType::Category).col(JobType::Name))
        .to_owned()
}

fn worker_table() -> TableCreateStatement {
    Table::create()
        .table(RemoteWorker::Table)
        .if_not_exists()
        .col(ColumnDef::new(RemoteWorker::Id).uuid().not_null().primary_key())
        .col(ColumnDef::new(RemoteWorker::TokenId).uuid().not_null())
        .col(ColumnDef::new(RemoteWorker::Name).string_len(128).not_null())
        .col(ColumnDef::new(RemoteWorker::RegisteredAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(RemoteWorker::LastSeenAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(RemoteWorker::ExpiresAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(RemoteWorker::GoneAt).timestamp_with_time_zone().null())
        .to_owned()
}

fn worker_type_table() -> TableCreateStatement {
    Table::create()
        .table(RemoteWorkerType::Table)
        .if_not_exists()
        .col(ColumnDef::new(RemoteWorkerType::WorkerId).uuid().not_null())
        .col(ColumnDef::new(RemoteWorkerType::TypeName).string_len(200).not_null())
        .primary_key(Index::create().col(RemoteWorkerType::WorkerId).col(RemoteWorkerType::TypeName))
        .to_owned()
}

#[derive(DeriveIden)]
enum JobType {
    Table,
    Room,
    Category,
    Name,
    Schema,
    CreatedAt,
    UpdatedAt,
    DeletedAt,
}

#[derive(DeriveIden)]
enum RemoteWorker {
    Table,
    Id,
    TokenId,
    Name,
    RegisteredAt,
    LastSeenAt,
    ExpiresAt,
    GoneAt,
}

#[derive(DeriveIden)]
enum RemoteWorkerType {
    Table,
    WorkerId,
    TypeName,
}
