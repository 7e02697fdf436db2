//! Migrations go down as well as up: a step down gives back what its step up changed, and
//! up again gives the same store as the first time.

use migration::{Migrator, MigratorTrait};
use sea_orm::{ConnectionTrait as _, DbBackend, Statement};
use yardmaster::config::StoreSettings;

use crate::helpers::{Backend, TestDatabase};

/// One text value, read on a connection of its own: PostgreSQL refuses a pooled
/// connection's cached plan of a query whose columns a migration retyped since.
async fn one_text(settings: &StoreSettings, sql: &str) -> String {
    let db = yardmaster::store::connect(settings).await.unwrap();
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    db.close().await.unwrap();
    row.try_get_by_index::<String>(0).unwrap()
}

async fn set_names(settings: &StoreSettings) -> (String, String) {
    let set = one_text(settings, "SELECT name FROM embedding_set").await;
    (set, one_text(settings, "SELECT set_name FROM embedding").await)
}

/// Migration 8 (rooms): set names move under `default:` and back, the name columns widen
/// and narrow back on PostgreSQL, and keys are unique across the store again.
async fn rooms_go_down_and_up_again(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let db = yardmaster::store::connect(&settings).await.unwrap();
    Migrator::up(&db, Some(7)).await.unwrap();
    for sql in [
        "INSERT INTO embedding_set (name, job_id, inputs, created_at) \
         VALUES ('s1', '01a21800-0000-7000-8000-000000000001', 1, CURRENT_TIMESTAMP)",
        "INSERT INTO embedding (set_name, item, input, vector) VALUES ('s1', 0, 'MKV', '')",
    ] {
        db.execute_unprepared(sql).await.unwrap();
    }
    let pg = db.get_database_backend() == DbBackend::Postgres;
    let width = "SELECT CAST(character_maximum_length AS TEXT) FROM information_schema.columns \
                 WHERE table_name = 'embedding_set' AND column_name = 'name'";
    Migrator::up(&db, Some(1)).await.unwrap();
    assert_eq!(set_names(&settings).await, ("default:s1".into(), "default:s1".into()));
    if pg {
        assert_eq!(one_text(&settings, width).await, "265");
    }
    Migrator::down(&db, Some(1)).await.unwrap();
    assert_eq!(set_names(&settings).await, ("s1".into(), "s1".into()));
    if pg {
        assert_eq!(one_text(&settings, width).await, "200");
    }
    let index = match pg {
        true => "SELECT indexname FROM pg_indexes WHERE indexname = 'ux_job_key'",
        false => "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'ux_job_key'",
    };
    assert_eq!(one_text(&settings, index).await, "ux_job_key");
    Migrator::up(&db, Some(1)).await.unwrap();
    assert_eq!(set_names(&settings).await, ("default:s1".into(), "default:s1".into()), "moved once, not twice");
    Migrator::up(&db, None).await.unwrap();
    db.close().await.unwrap();
}

on_both_backends!(rooms_go_down_and_up_again);
