//! A cancel reaches the run it stops, in whichever process runs it: on PostgreSQL a row
//! trigger notifies channel `yardmaster_stops` with a job's id when the job goes from
//! RUNNING to CANCELLED (a cancel by request, by the dashboard, or with its parent), and
//! every worker process listens and stops its run of that job at once, not at its next
//! heartbeat. (SQLite serves one process: its cancels reach the run in process.)

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION yardmaster_notify_stop() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               PERFORM pg_notify('yardmaster_stops', NEW.id::text);
               RETURN NULL;
             END $$",
        )
        .await?;
        db.execute_unprepared("DROP TRIGGER IF EXISTS job_stop_notify ON job").await?;
        db.execute_unprepared(
            "CREATE TRIGGER job_stop_notify AFTER UPDATE OF status ON job
             FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status = 'cancelled')
             EXECUTE FUNCTION yardmaster_notify_stop()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            let db = manager.get_connection();
            db.execute_unprepared("DROP TRIGGER IF EXISTS job_stop_notify ON job").await?;
            db.execute_unprepared("DROP FUNCTION IF EXISTS yardmaster_notify_stop()").await?;
        }
        Ok(())
    }
}
