//! SQLite plans the store's looks for live jobs on their partial indexes, not by reading
//! every QUEUED row through `ix_job_status_id`: migration 24 tells its planner the table's
//! shape, and every index of `job` has its line there.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait as _, DatabaseConnection, DbBackend, Statement};

use crate::helpers::{Backend, TestDatabase};

async fn texts(db: &DatabaseConnection, sql: &str) -> Vec<String> {
    let rows = db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql)).await.unwrap();
    rows.iter().map(|row| row.try_get_by_index::<String>(0).unwrap()).collect()
}

/// The plan's details, one line per step.
async fn plan(db: &DatabaseConnection, sql: &str) -> String {
    let rows = db.query_all_raw(Statement::from_string(DbBackend::Sqlite, format!("EXPLAIN QUERY PLAN {sql}"))).await;
    let rows = rows.unwrap_or_else(|err| panic!("{sql}: {err}"));
    rows.iter().map(|row| row.try_get::<String>("", "detail").unwrap()).collect::<Vec<_>>().join("; ")
}

#[actix_rt::test]
async fn live_jobs_are_found_through_their_partial_indexes() {
    let (_database, url) = TestDatabase::create(Backend::Sqlite).await;
    let settings = yardmaster::config::StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let db = yardmaster::store::connect(&settings).await.unwrap();
    yardmaster::store::migrate(&db).await.unwrap();
    // Plans made on connections opened after the migration (an EXPLAIN checks no schema
    // version, so an older connection would show the plans it made before).
    db.close().await.unwrap();
    let db = yardmaster::store::connect(&settings).await.unwrap();

    let indexes: BTreeSet<String> =
        texts(&db, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'job'")
            .await
            .into_iter()
            .collect();
    let described: BTreeSet<String> =
        texts(&db, "SELECT idx FROM sqlite_stat1 WHERE tbl = 'job' AND idx IS NOT NULL").await.into_iter().collect();
    assert_eq!(
        indexes.difference(&described).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "indexes of job without a line in sqlite_stat1 (add one to the planner's statistics)"
    );

    // The predicates as the store writes them, each with the index it must read.
    for (sql, index) in [
        (
            "SELECT id FROM job WHERE held_since IS NOT NULL AND waiting_since IS NULL AND status = 'queued' \
             AND limit_key = 'operation:ping' LIMIT 1",
            "ix_job_limit_held",
        ),
        (
            "SELECT id FROM job WHERE status = 'queued' AND ages_at IS NOT NULL AND ages_at <= '2026-11-27' \
             ORDER BY ages_at LIMIT 100",
            "ix_job_aging",
        ),
        (
            "SELECT MIN(run_after) FROM job WHERE status = 'queued' AND published_at IS NULL \
             AND run_after IS NOT NULL AND run_after > '2026-11-27'",
            "ix_job_waiting",
        ),
        (
            "SELECT id FROM job WHERE status = 'queued' AND published_at IS NULL AND run_after IS NULL \
             AND created_at <= '2026-11-27' ORDER BY created_at LIMIT 100",
            "ix_job_undispatched",
        ),
        (
            "SELECT id FROM job WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= '2026-11-27' \
             ORDER BY expires_at LIMIT 100",
            "ix_job_expiring",
        ),
        (
            "SELECT id FROM job WHERE status = 'running' AND leased_until < '2026-11-27' ORDER BY leased_until LIMIT 100",
            "ix_job_running_lease",
        ),
        (
            "SELECT id FROM job WHERE waiting_since IS NOT NULL AND status = 'queued' ORDER BY waiting_since LIMIT 100",
            "ix_job_waiting_deps",
        ),
        (
            "SELECT id FROM job WHERE limit_key IS NOT NULL AND held_since IS NULL AND finished_at IS NULL \
             AND status IN ('queued', 'running') AND limit_key = 'operation:ping' LIMIT 1000",
            "ix_job_limit_admitted",
        ),
        (
            "SELECT started_at FROM job WHERE rate_key IS NOT NULL AND started_at IS NOT NULL \
             AND rate_key = 'operation:ping' AND started_at > '2026-11-27' ORDER BY started_at",
            "ix_job_rate_started",
        ),
    ] {
        let plan = plan(&db, sql).await;
        assert!(plan.contains(&format!("INDEX {index} ")), "{sql}\nis planned as: {plan}");
    }
    // Looks by queued, failed or cancelled read the status indexes, which hold no succeeded
    // or running job (migrations 35 and 37), given their term besides: a listing by status
    // in id order, one of a tenant's rooms, and the queues' figures.
    let queued = yardmaster::store::of_status(yardmaster::domain::JobStatus::Queued);
    let failed = yardmaster::store::of_status(yardmaster::domain::JobStatus::Failed);
    assert!(queued.contains(yardmaster::store::STATUS_INDEXED), "{queued}");
    let plan_of = |sql: String| {
        let db = db.clone();
        async move { plan(&db, &sql).await }
    };
    let plan = plan_of(format!("SELECT id FROM job WHERE {queued} ORDER BY id DESC LIMIT 50")).await;
    assert!(plan.contains("INDEX ix_job_status_id ") && !plan.contains("TEMP B-TREE"), "{plan}");
    let plan = plan_of(format!("SELECT id FROM job WHERE room IN ('a') AND {failed} ORDER BY id DESC LIMIT 50")).await;
    assert!(plan.contains("INDEX ix_job_room_status_id ") && !plan.contains("TEMP B-TREE"), "{plan}");
    for rooms in ["", "room IN ('a', 'b') AND "] {
        let figures = format!(
            "SELECT queue, COUNT(*), MIN(COALESCE(run_after, created_at)) FROM job WHERE {rooms}{queued} GROUP BY queue"
        );
        let plan = plan_of(figures).await;
        assert!(plan.contains("INDEX ix_job_status_id ") || plan.contains("INDEX ix_job_room_status_id "), "{plan}");
    }
    // The dispatch sweep's look by status, a literal with the term.
    let sql = format!("UPDATE job SET published_at = NULL WHERE {queued} AND published_at IS NOT NULL");
    let plan = plan_of(sql.clone()).await;
    assert!(plan.starts_with("SEARCH job USING "), "{sql}\nis planned as: {plan}");
    // Running jobs are found through the index of their leases, whatever else a look
    // filters by (each other column written `(+column)` on SQLite, as sea-query renders
    // it): never by walking a room's, a queue's or the whole table's history in id order.
    let running = yardmaster::store::of_status(yardmaster::domain::JobStatus::Running);
    for sql in [
        format!("SELECT id FROM job WHERE {running} ORDER BY id DESC LIMIT 50"),
        format!(
            "SELECT id FROM job WHERE (+room) IN ('a', 'b') AND (+queue) = 'q' AND (+operation) = 'o' \
             AND {running} AND (+id) < 'x' AND (+id) >= 'a' ORDER BY id DESC LIMIT 50"
        ),
        format!("SELECT queue, COUNT(*) FROM job WHERE (+room) IN ('a', 'b') AND {running} GROUP BY queue"),
        format!("SELECT queue, room, COUNT(*) FROM job WHERE {running} GROUP BY queue, room"),
        format!("SELECT id, attempts FROM job WHERE {running} AND fan_out = 'batches' ORDER BY started_at LIMIT 100"),
    ] {
        let plan = plan_of(sql.clone()).await;
        assert!(plan.contains("INDEX ix_job_running_lease"), "{sql}\nis planned as: {plan}");
    }
    // Succeeded jobs are listed in id order, from the table or a room's index.
    let plan = plan_of("SELECT id FROM job WHERE status = 'succeeded' ORDER BY id DESC LIMIT 50".into()).await;
    assert!(!plan.contains("TEMP B-TREE") && !plan.contains("ix_job_status_id"), "{plan}");
}
