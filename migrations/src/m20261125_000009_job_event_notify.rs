//! On PostgreSQL, every statement that writes job events notifies channel `yardmaster_jobs`
//! with the ids of their jobs (comma-separated, at most 150 a notification, so a payload stays
//! under PostgreSQL's 8,000 bytes). `NOTIFY` is transactional: listeners hear it once the
//! writer commits. API and worker processes listen (`live::listen`), to wake their long-polls,
//! event streams, claimers and script hosts whatever process wrote. SQLite runs in one process and needs none of it.

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
            "CREATE OR REPLACE FUNCTION yardmaster_notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE ids text;
             BEGIN
               FOR ids IN
                 SELECT string_agg(job_id::text, ',') FROM (
                   SELECT job_id, (row_number() OVER ()) / 150 AS chunk
                   FROM (SELECT DISTINCT job_id FROM written) AS distinct_jobs
                 ) AS numbered GROUP BY chunk
               LOOP
                 PERFORM pg_notify('yardmaster_jobs', ids);
               END LOOP;
               RETURN NULL;
             END $$",
        )
        .await?;
        db.execute_unprepared("DROP TRIGGER IF EXISTS job_event_notify ON job_event").await?;
        db.execute_unprepared(
            "CREATE TRIGGER job_event_notify AFTER INSERT ON job_event REFERENCING NEW TABLE AS written
             FOR EACH STATEMENT EXECUTE FUNCTION yardmaster_notify_jobs()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared("DROP TRIGGER IF EXISTS job_event_notify ON job_event").await?;
        db.execute_unprepared("DROP FUNCTION IF EXISTS yardmaster_notify_jobs()").await?;
        Ok(())
    }
}
