//! Rooms and API tokens. Every job gets a `room` (jobs from before are in `default`), with
//! indexes that keep listing per room index-backed, and idempotency keys become unique per
//! room. Stored embedding sets are keyed `room:name` (set names of before move to
//! `default:`). `api_token` holds tokens as SHA-256 digests of their secret, never the secret.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Postgres {
            // Room (64) + ':' + set name (200), before the names move under their room.
            db.execute_unprepared("ALTER TABLE embedding_set ALTER COLUMN name TYPE varchar(265)").await?;
            db.execute_unprepared("ALTER TABLE embedding ALTER COLUMN set_name TYPE varchar(265)").await?;
        }
        if !manager.has_column("job", "room").await? {
            let room = ColumnDef::new(Alias::new("room")).string_len(64).not_null().default("default").to_owned();
            manager.alter_table(Table::alter().table(Alias::new("job")).add_column(room).to_owned()).await?;
            // Set names move under their room in the same step that adds rooms, once.
            db.execute_unprepared("UPDATE embedding_set SET name = 'default:' || name").await?;
            db.execute_unprepared("UPDATE embedding SET set_name = 'default:' || set_name").await?;
        }
        for sql in [
            "CREATE INDEX IF NOT EXISTS ix_job_room_id ON job (room, id)",
            "CREATE INDEX IF NOT EXISTS ix_job_room_status_id ON job (room, status, id)",
            "CREATE UNIQUE INDEX IF NOT EXISTS ux_job_room_key ON job (room, idempotency_key) \
             WHERE idempotency_key IS NOT NULL",
            "DROP INDEX IF EXISTS ux_job_key",
        ] {
            db.execute_unprepared(sql).await?;
        }
        manager.create_table(token_table()).await
    }

    /// Undoes `up`: the per-room indexes and the column go, idempotency keys are unique
    /// across the store again (this fails, changing nothing, when two rooms hold one key),
    /// the `default` room's sets take their names back and, on PostgreSQL, the name columns
    /// narrow again (failing, not truncating, when a name no longer fits). Sets of other
    /// rooms keep their `room:` names: the one thing `down` cannot give back.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        manager.drop_table(Table::drop().table(ApiToken::Table).if_exists().to_owned()).await?;
        for sql in [
            "DROP INDEX IF EXISTS ux_job_room_key",
            "CREATE UNIQUE INDEX IF NOT EXISTS ux_job_key ON job (idempotency_key) WHERE idempotency_key IS NOT NULL",
            "DROP INDEX IF EXISTS ix_job_room_status_id",
            "DROP INDEX IF EXISTS ix_job_room_id",
        ] {
            db.execute_unprepared(sql).await?;
        }
        if manager.has_column("job", "room").await? {
            let drop = Table::alter().table(Alias::new("job")).drop_column(Alias::new("room")).to_owned();
            manager.alter_table(drop).await?;
            db.execute_unprepared("UPDATE embedding_set SET name = substr(name, 9) WHERE name LIKE 'default:%'")
                .await?;
            db.execute_unprepared(
                "UPDATE embedding SET set_name = substr(set_name, 9) WHERE set_name LIKE 'default:%'",
            )
            .await?;
        }
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared("ALTER TABLE embedding_set ALTER COLUMN name TYPE varchar(200)").await?;
            db.execute_unprepared("ALTER TABLE embedding ALTER COLUMN set_name TYPE varchar(200)").await?;
        }
        Ok(())
    }
}

fn token_table() -> TableCreateStatement {
    Table::create()
        .table(ApiToken::Table)
        .if_not_exists()
        .col(ColumnDef::new(ApiToken::Id).uuid().not_null().primary_key())
        .col(ColumnDef::new(ApiToken::SecretSha256).string_len(64).not_null())
        .col(ColumnDef::new(ApiToken::UserName).string_len(128).not_null())
        .col(ColumnDef::new(ApiToken::Label).string_len(128).null())
        .col(ColumnDef::new(ApiToken::Role).string_len(16).not_null())
        .col(ColumnDef::new(ApiToken::ReadOnly).boolean().not_null().default(false))
        .col(ColumnDef::new(ApiToken::Rooms).json_binary().not_null())
        .col(ColumnDef::new(ApiToken::CreatedAt).timestamp_with_time_zone().not_null())
        .col(ColumnDef::new(ApiToken::RevokedAt).timestamp_with_time_zone().null())
        .to_owned()
}

#[derive(DeriveIden)]
enum ApiToken {
    Table,
    Id,
    SecretSha256,
    UserName,
    Label,
    Role,
    ReadOnly,
    Rooms,
    CreatedAt,
    RevokedAt,
}
