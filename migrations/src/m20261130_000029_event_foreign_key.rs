//! On PostgreSQL, a job's events no longer hold a foreign key to it. Checking one took a
//! `FOR KEY SHARE` lock on the job's row at every event written: a lock record in the
//! write-ahead log and the job's page dirtied again, three times a job (3.1 of 5.4 lock
//! records per job in a drain; 14% of the backends' CPU per job). The store keeps what the
//! key kept: every event is written in the transaction of a compare-and-set on its job's
//! row, and a job's history is pruned by deleting the job, then its events
//! (`store::sea::prune`), so an event written before the prune is deleted with it and one
//! after finds no row. SQLite keeps its key: checking it writes nothing, and dropping it
//! would copy the whole table of events.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if db.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared("ALTER TABLE job_event DROP CONSTRAINT IF EXISTS fk_job_event_job").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if db.get_database_backend() == DbBackend::Postgres {
            // `NOT VALID`: checked for new events at once, for the stored ones not under
            // the migration's lock.
            db.execute_unprepared(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'fk_job_event_job') THEN \
                 ALTER TABLE job_event ADD CONSTRAINT fk_job_event_job FOREIGN KEY (job_id) \
                 REFERENCES job (id) ON DELETE CASCADE NOT VALID; END IF; END $$",
            )
            .await?;
        }
        Ok(())
    }
}
