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

/// How many steps down undo the migration whose name holds `number`, and every later one.
fn steps_back_to(number: &str) -> u32 {
    let migrations = Migrator::migrations();
    let at = migrations.iter().position(|migration| migration.name().contains(number)).expect("a migration");
    u32::try_from(migrations.len() - at).unwrap()
}

/// Migration 28 (`rate_key`): the starts rates count move to an index of their own, and
/// every limited job stored before it keeps being counted (which limits have rates is
/// configuration, so each gets its `limit_key`); new jobs get one only under a rate.
async fn limited_jobs_stored_before_rate_keys_keep_counting(backend: Backend) {
    use yardmaster::domain::{Limit, NewJob, Rate};
    use yardmaster::store::JobCommands as _;

    let (_database, url) = TestDatabase::create(backend).await;
    let (db, store) = crate::helpers::migrated_store(&url).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let limited = |rate| NewJob {
        limit: Some(Limit { key: "operation:ping".into(), max_running: Some(5), rate }),
        ..NewJob::new("ping")
    };
    let rate = Rate { starts: 3, per: std::time::Duration::from_secs(1) };
    store.submit_many(vec![limited(None), limited(Some(rate))]).await.unwrap();
    let keyed = "SELECT CAST(COUNT(rate_key) AS TEXT) || ' of ' || CAST(COUNT(*) AS TEXT) FROM job";
    assert_eq!(one_text(&settings, keyed).await, "1 of 2", "a max_running alone has no rate key");

    Migrator::down(&db, Some(steps_back_to("000028"))).await.unwrap();
    Migrator::up(&db, None).await.unwrap();
    assert_eq!(one_text(&settings, keyed).await, "2 of 2", "stored before: counted");
    let wrong = "SELECT CAST(COUNT(*) AS TEXT) FROM job WHERE rate_key <> limit_key";
    assert_eq!(one_text(&settings, wrong).await, "0");
    let index = match backend {
        Backend::Postgres => "SELECT string_agg(indexname, ',') FROM pg_indexes WHERE indexname LIKE '%started'",
        _ => "SELECT group_concat(name) FROM sqlite_master WHERE type = 'index' AND name LIKE '%started'",
    };
    assert_eq!(one_text(&settings, index).await, "ix_job_rate_started");
    db.close().await.unwrap();
}

/// Migration 29: on PostgreSQL an event holds no foreign key to its job (checking it wrote
/// a lock on the job's row at every event), so the store alone keeps events to jobs that
/// exist; SQLite keeps its key. Down gives PostgreSQL's back, for new events.
async fn events_hold_no_key_to_their_job_on_postgres(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let (db, _store) = crate::helpers::migrated_store(&url).await;
    let orphan = |n: u32| {
        format!(
            "INSERT INTO job_event (job_id, ts, event, message, fields, level) VALUES \
             ('01a21800-0000-7000-8000-00000000000{n}', CURRENT_TIMESTAMP, 'job.noted', NULL, '{{}}', 'info')"
        )
    };
    let pg = backend == Backend::Postgres;
    assert_eq!(db.execute_unprepared(&orphan(1)).await.is_ok(), pg, "an event of no job, on {backend:?}");
    if pg {
        Migrator::down(&db, Some(steps_back_to("000029"))).await.unwrap();
        assert!(db.execute_unprepared(&orphan(2)).await.is_err(), "the key is back");
        Migrator::up(&db, None).await.unwrap();
        assert!(db.execute_unprepared(&orphan(3)).await.is_ok(), "and gone again");
    }
    db.close().await.unwrap();
}

/// Migration 31: on PostgreSQL the six indexes of `job` keyed by its id leave half of each
/// leaf free (a claim and an outcome each add an entry to every one); down gives back the
/// default. SQLite's indexes have no such setting, and its store migrates the same.
async fn id_keyed_indexes_leave_room_on_postgres(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let (db, _store) = crate::helpers::migrated_store(&settings.url).await;
    if backend == Backend::Postgres {
        // Each index's storage options, in this order.
        const INDEXES: [&str; 6] = [
            "job_pkey",
            "ix_job_queue_id",
            "ix_job_room_id",
            "ix_job_operation_id",
            "ix_job_status_id",
            "ix_job_room_status_id",
        ];
        let options = || async {
            let mut options = Vec::new();
            for index in INDEXES {
                let sql = format!(
                    "SELECT coalesce(array_to_string(reloptions, ','), '-') FROM pg_class WHERE oid = '{index}'::regclass"
                );
                options.push(one_text(&settings, &sql).await);
            }
            options
        };
        assert_eq!(options().await, ["fillfactor=50"; 6], "{INDEXES:?}");
        Migrator::down(&db, Some(steps_back_to("000031"))).await.unwrap();
        assert_eq!(options().await, ["-"; 6], "down gives back the default of {INDEXES:?}");
        Migrator::up(&db, None).await.unwrap();
        assert_eq!(options().await, ["fillfactor=50"; 6], "{INDEXES:?}");
    }
    db.close().await.unwrap();
}

/// Migrations 32 (PostgreSQL) and 35 (SQLite): the two indexes keyed by status and id hold no
/// succeeded job (on PostgreSQL keeping migration 31's room), and on SQLite no running one
/// either (migration 37); down makes them whole again, and up, on PostgreSQL finding an
/// index already partial (built beforehand, `docs/deployment.md`), leaves it. On SQLite each
/// keeps its row of the planner's statistics (migration 24) at every step, the smaller one
/// with migration 37.
async fn status_indexes_leave_succeeded_jobs_out(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let (db, _store) = crate::helpers::migrated_store(&settings.url).await;
    let definitions = || async {
        let mut definitions = Vec::new();
        for index in ["ix_job_status_id", "ix_job_room_status_id"] {
            let sql = match backend {
                Backend::Postgres => format!("SELECT indexdef FROM pg_indexes WHERE indexname = '{index}'"),
                _ => format!("SELECT sql FROM sqlite_master WHERE name = '{index}'"),
            };
            definitions.push(one_text(&settings, &sql).await);
        }
        definitions
    };
    let partial =
        |definitions: &[String]| definitions.iter().all(|d| d.contains(" WHERE ") && d.contains("<> 'succeeded'"));
    let whole = |definitions: &[String]| definitions.iter().all(|d| !d.contains("WHERE"));
    if backend == Backend::Postgres {
        let built = definitions().await;
        assert!(partial(&built) && built.iter().all(|d| d.contains("fillfactor='50'")), "{built:?}");
        Migrator::down(&db, Some(steps_back_to("000032"))).await.unwrap();
        let down = definitions().await;
        assert!(whole(&down) && down.iter().all(|d| d.contains("fillfactor='50'")), "{down:?}");
        // Built beforehand under another name and swapped in, as a large deployment does.
        let raw = yardmaster::store::connect(&settings).await.unwrap();
        for statement in [
            "CREATE INDEX ix_job_status_id_new ON job (status, id) WITH (fillfactor = 50) WHERE status <> 'succeeded'",
            "DROP INDEX ix_job_status_id",
            "ALTER INDEX ix_job_status_id_new RENAME TO ix_job_status_id",
        ] {
            raw.execute_unprepared(statement).await.unwrap();
        }
        let oid = "SELECT 'ix_job_status_id'::regclass::oid::text";
        let before = one_text(&settings, oid).await;
        Migrator::up(&db, None).await.unwrap();
        assert!(partial(&definitions().await), "{:?}", definitions().await);
        assert_eq!(one_text(&settings, oid).await, before, "an index already partial was built again");
        raw.close().await.unwrap();
    } else {
        let planned = "SELECT CAST(COUNT(*) AS TEXT) FROM sqlite_stat1 \
                       WHERE idx IN ('ix_job_status_id', 'ix_job_room_status_id')";
        let stat = "SELECT stat FROM sqlite_stat1 WHERE idx = 'ix_job_status_id'";
        // Migration 37: neither succeeded nor running jobs, and the planner told so.
        let without_running =
            |definitions: &[String]| definitions.iter().all(|d| d.contains("NOT IN ('succeeded', 'running')"));
        assert!(without_running(&definitions().await), "{:?}", definitions().await);
        assert_eq!(one_text(&settings, planned).await, "2");
        assert_eq!(one_text(&settings, stat).await, "100000 30000 1");
        Migrator::down(&db, Some(steps_back_to("000037"))).await.unwrap();
        let down = definitions().await;
        assert!(partial(&down) && !down.iter().any(|d| d.contains("'running'")), "{down:?}");
        assert_eq!(one_text(&settings, planned).await, "2");
        assert_eq!(one_text(&settings, stat).await, "1000000 200000 1");
        Migrator::down(&db, Some(steps_back_to("000035"))).await.unwrap();
        assert!(whole(&definitions().await), "{:?}", definitions().await);
        assert_eq!(one_text(&settings, planned).await, "2");
        Migrator::up(&db, None).await.unwrap();
        assert!(without_running(&definitions().await), "{:?}", definitions().await);
        assert_eq!(one_text(&settings, planned).await, "2");
    }
    db.close().await.unwrap();
}

/// Migration 36: on SQLite a limit's index of admitted jobs holds a job until it has ended
/// (`finished_at IS NULL`), so a claim leaves its entry alone; down gives back the status's
/// term. Either way the look that counts admitted jobs reads the index, and a limit admits
/// as many as it allows: a job claimed still counts, one ended no longer does. PostgreSQL
/// keeps the status's term throughout.
async fn admitted_jobs_are_counted_until_they_end(backend: Backend) {
    use std::time::Duration;
    use yardmaster::domain::{Limit, NewJob};
    use yardmaster::store::{Completion, DispatchBook as _, JobCommands as _, RunRef, RunWrites as _};

    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let (db, store) = crate::helpers::migrated_store(&settings.url).await;
    let definition = || async {
        let sql = match backend {
            Backend::Postgres => "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_job_limit_admitted'",
            _ => "SELECT sql FROM sqlite_master WHERE name = 'ix_job_limit_admitted'",
        };
        one_text(&settings, sql).await
    };
    let limit = Limit { key: "operation:ping".into(), max_running: Some(2), rate: None };
    // Two admitted and one of them claimed: both count, the next is held. Both ended: the
    // release admits the held one, and one more fits beside it.
    let admits_as_it_allows = || async {
        let submit = || async {
            let job = store.submit(NewJob { limit: Some(limit.clone()), ..NewJob::new("ping") }).await.unwrap().job;
            (job.id, job.held_since.is_none())
        };
        let ((first, true), (second, true)) = (submit().await, submit().await) else { panic!("not admitted") };
        let claimed = store.claim(first, "test", Duration::from_secs(60)).await.unwrap().unwrap();
        let (held, false) = submit().await else { panic!("admitted beside a claimed job and a queued one") };
        let done = Completion::Succeeded { result: serde_json::json!({}) };
        store.finish(RunRef::from(&claimed), &done).await.unwrap().unwrap();
        store.cancel(second).await.unwrap();
        let released = store.release(&limit).await.unwrap();
        assert_eq!(released.jobs.iter().map(|job| job.id).collect::<Vec<_>>(), [held], "ended jobs still counted");
        let (fourth, true) = submit().await else { panic!("not admitted beside one job") };
        let (fifth, false) = submit().await else { panic!("admitted beside two jobs") };
        for id in [held, fourth, fifth] {
            store.cancel(id).await.unwrap();
        }
    };
    if backend == Backend::Postgres {
        assert!(definition().await.contains("status"), "{}", definition().await);
        admits_as_it_allows().await;
        Migrator::down(&db, Some(steps_back_to("000036"))).await.unwrap();
        Migrator::up(&db, None).await.unwrap();
        assert!(definition().await.contains("status"), "{}", definition().await);
        admits_as_it_allows().await;
    } else {
        let planned = "SELECT CAST(COUNT(*) AS TEXT) FROM sqlite_stat1 WHERE idx = 'ix_job_limit_admitted'";
        // The count's look, planned on a connection opened after the schema changed.
        let counted_from_the_index = || async {
            let sql = "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM job WHERE limit_key IS NOT NULL \
                       AND held_since IS NULL AND finished_at IS NULL AND status IN ('queued', 'running') \
                       AND limit_key = 'operation:ping'";
            let fresh = yardmaster::store::connect(&settings).await.unwrap();
            let rows = fresh.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql)).await.unwrap();
            let plan: Vec<String> = rows.iter().map(|row| row.try_get::<String>("", "detail").unwrap()).collect();
            fresh.close().await.unwrap();
            assert!(plan.iter().any(|step| step.contains("INDEX ix_job_limit_admitted")), "{plan:?}");
            assert_eq!(one_text(&settings, planned).await, "1");
        };
        assert!(definition().await.ends_with("finished_at IS NULL"), "{}", definition().await);
        counted_from_the_index().await;
        admits_as_it_allows().await;
        Migrator::down(&db, Some(steps_back_to("000036"))).await.unwrap();
        assert!(definition().await.ends_with("status IN ('queued', 'running')"), "{}", definition().await);
        counted_from_the_index().await;
        admits_as_it_allows().await;
        Migrator::up(&db, None).await.unwrap();
        assert!(definition().await.ends_with("finished_at IS NULL"), "{}", definition().await);
        counted_from_the_index().await;
        admits_as_it_allows().await;
    }
    db.close().await.unwrap();
}

/// Migration 33: on SQLite a running batch parent's count is kept beside its row; going down
/// folds it into the row, and up again counts on from there. PostgreSQL counts on the row
/// throughout, and the migration leaves it as it is.
async fn batch_counts_fold_into_the_row_going_down(backend: Backend) {
    use std::time::Duration;
    use yardmaster::domain::{BatchOutcome, BatchResult, FanOutForm, NewJob};
    use yardmaster::store::{JobCommands as _, JobReads as _, RunRef, RunWrites as _};

    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let (db, store) = crate::helpers::migrated_store(&settings.url).await;
    let registry = || std::sync::Arc::new(yardmaster::ops::OperationRegistry::builtin());
    let parent = store.submit(NewJob::new("sum_squares")).await.unwrap().job;
    let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    assert!(store.fan_out(run, 5, FanOutForm::Batches).await.unwrap().is_some());
    let outcome = |index: i64| BatchOutcome {
        parent_job_id: run.id,
        attempt: run.attempt,
        index,
        result: BatchResult::Succeeded { output: serde_json::json!({ "sum": index }) },
    };
    for index in 0..2 {
        store.record_batch(outcome(index), registry()).await.unwrap();
    }
    let on_row = "SELECT CAST(progress_current AS TEXT) FROM job";
    let beside = "SELECT CAST(COUNT(*) AS TEXT) FROM sqlite_master WHERE name = 'job_fan_in'";
    if backend == Backend::Sqlite {
        assert_eq!(one_text(&settings, on_row).await, "0", "counted beside the row");
    }
    Migrator::down(&db, Some(steps_back_to("000033"))).await.unwrap();
    assert_eq!(one_text(&settings, on_row).await, "2", "the count went onto the row");
    if backend == Backend::Sqlite {
        assert_eq!(one_text(&settings, beside).await, "0");
    }
    Migrator::up(&db, None).await.unwrap();
    store.record_batch(outcome(2), registry()).await.unwrap();
    assert_eq!(store.get(run.id).await.unwrap().unwrap().progress_current, 3, "counted on from the row");
    db.close().await.unwrap();
}

/// Migration 34: on SQLite the count beside a batch parent's row carries the run's total, so
/// counting a batch reads no counter of the row. A parent that fanned out before it (a count
/// with no total) is counted from its row as before, and still closes exactly at its total.
async fn batch_counts_started_without_a_total_count_on(backend: Backend) {
    use std::time::Duration;
    use yardmaster::domain::{BatchOutcome, BatchResult, FanOutForm, JobStatus, NewJob};
    use yardmaster::store::{BatchRecorded, JobCommands as _, JobReads as _, RunRef, RunWrites as _};

    let (_database, url) = TestDatabase::create(backend).await;
    let settings = StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let (db, store) = crate::helpers::migrated_store(&settings.url).await;
    let registry = || std::sync::Arc::new(yardmaster::ops::OperationRegistry::builtin());
    let outcome = |run: RunRef, index: i64| BatchOutcome {
        parent_job_id: run.id,
        attempt: run.attempt,
        index,
        result: BatchResult::Succeeded { output: serde_json::json!({ "sum": index }) },
    };
    // One parent fans out and counts a batch; migration 34 goes down and up under it (its
    // count, kept, has no total then, as one started before the migration); one fans out after.
    let mut runs = Vec::new();
    for _ in 0..2 {
        let parent = store.submit(NewJob::new("sum_squares")).await.unwrap().job;
        let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
        assert!(store.fan_out(run, 3, FanOutForm::Batches).await.unwrap().is_some());
        if runs.is_empty() {
            store.record_batch(outcome(run, 0), registry()).await.unwrap();
            Migrator::down(&db, Some(steps_back_to("000034"))).await.unwrap();
            Migrator::up(&db, None).await.unwrap();
        }
        runs.push(run);
    }
    if backend == Backend::Sqlite {
        let totals =
            "SELECT group_concat(COALESCE(total, 'none'), ',') FROM (SELECT total FROM job_fan_in ORDER BY job_id)";
        assert_eq!(one_text(&settings, totals).await, "none,3");
    }
    for run in &runs {
        let first = match run == &runs[0] {
            true => 1,
            false => 0,
        };
        for index in first..3 {
            let recorded = store.record_batch(outcome(*run, index), registry()).await.unwrap();
            let closed = match index {
                2 => Some(JobStatus::Succeeded),
                _ => None,
            };
            assert_eq!(recorded, BatchRecorded::Counted { closed }, "batch {index} of {}", run.id);
        }
        let parent = store.get(run.id).await.unwrap().unwrap();
        assert_eq!((parent.status, parent.progress_current), (JobStatus::Succeeded, 3));
    }
    db.close().await.unwrap();
}

on_both_backends!(
    rooms_go_down_and_up_again,
    limited_jobs_stored_before_rate_keys_keep_counting,
    events_hold_no_key_to_their_job_on_postgres,
    id_keyed_indexes_leave_room_on_postgres,
    status_indexes_leave_succeeded_jobs_out,
    admitted_jobs_are_counted_until_they_end,
    batch_counts_fold_into_the_row_going_down,
    batch_counts_started_without_a_total_count_on
);
