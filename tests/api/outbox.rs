//! The dispatch outbox, on both stores, with and without group commit: a submission for a
//! durable transport writes its startable jobs published and one outbox row naming them
//! (none for a job written unsent); confirming deletes the row; a row older than the grace
//! hands its still-QUEUED jobs back to the sweep, in one compare-and-set that leaves a
//! claimed job alone. The crash tests in `amqp_processes` kill a real API at each side of
//! the publish; the chaos run does the same at random.

use std::time::Duration;

use futures_util::future::join_all;
use sea_orm::{ConnectionTrait as _, DatabaseConnection, Statement};
use serde_json::json;
use uuid::Uuid;
use yardmaster::domain::{JobStatus, NewJob};
use yardmaster::store::{DispatchBook as _, JobCommands as _, JobReads as _, RunWrites as _, SeaStore};

use crate::helpers::{migrated_store, read, Backend, TestApp, TestDatabase};

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

/// A submission's job as the dispatcher writes it for a broker.
fn sent(outbox: Uuid) -> NewJob {
    NewJob { announced: true, outbox: Some(outbox), ..NewJob::new("ping") }
}

async fn outbox_rows(db: &DatabaseConnection) -> i64 {
    count(db, "SELECT COUNT(*) FROM dispatch_outbox").await
}

async fn an_outbox_row_stands_for_a_submission_until_its_messages_are_confirmed(backend: Backend) {
    for grouped in [false, true] {
        let (_database, url) = TestDatabase::create(backend).await;
        let (db, store) = migrated_store(&url).await;
        let store: SeaStore = if grouped { store.with_group_commit(64) } else { store };

        // A batch: two startable jobs and one that waits for its time (written unsent).
        let batch = Uuid::now_v7();
        let later = NewJob { run_after: Some(chrono::Utc::now() + chrono::Duration::hours(1)), ..sent(batch) };
        let made = store.submit_many(vec![sent(batch), later, sent(batch)]).await.unwrap();
        assert!(made[0].job.published_at.is_some() && made[2].job.published_at.is_some());
        assert!(made[1].job.published_at.is_none(), "a job that waits for its time is the sweep's to send");
        let named: String = {
            let sql = "SELECT jobs FROM dispatch_outbox";
            let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap();
            row.expect("the batch's outbox row").try_get_by_index(0).unwrap()
        };
        assert_eq!(named, format!("{}\n{}", made[0].job.id, made[2].job.id), "grouped: {grouped}");

        // One submission alone, on each path a single submit takes (shared or keyed).
        let single = Uuid::now_v7();
        let alone = store.submit(sent(single)).await.unwrap().job;
        let keyed = Uuid::now_v7();
        let with_key = store.submit(NewJob { idempotency_key: Some("k".into()), ..sent(keyed) }).await.unwrap().job;
        assert_eq!(outbox_rows(&db).await, 3, "grouped: {grouped}");
        // A submission that makes no job writes no row: the key answers with its job.
        let again = store.submit(NewJob { idempotency_key: Some("k".into()), ..sent(Uuid::now_v7()) }).await.unwrap();
        assert!(!again.created);
        assert_eq!(outbox_rows(&db).await, 3, "grouped: {grouped}");

        // Confirmed: the row goes, once.
        assert!(store.confirm_outbox(batch).await.unwrap());
        assert!(!store.confirm_outbox(batch).await.unwrap());
        assert_eq!(outbox_rows(&db).await, 2);

        // Not yet older than the grace: nothing handed back.
        assert_eq!(store.reclaim_outbox(Duration::from_secs(3600), 10).await.unwrap(), 0);
        assert_eq!(outbox_rows(&db).await, 2);
        assert!(store.due_for_dispatch(Duration::ZERO, 10).await.unwrap().is_empty());

        // The keyed job is claimed meanwhile; the single one is still QUEUED. Reclaimed, the
        // QUEUED one is the sweep's again and the claimed one is left as it is.
        let claimed = store.claim(with_key.id, "test", Duration::from_secs(60)).await.unwrap();
        assert!(claimed.is_some());
        assert_eq!(store.reclaim_outbox(Duration::ZERO, 10).await.unwrap(), 1, "grouped: {grouped}");
        assert_eq!(outbox_rows(&db).await, 0);
        let due: Vec<Uuid> = store.due_for_dispatch(Duration::ZERO, 10).await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(due, vec![alone.id], "grouped: {grouped}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE status = 'running'").await, 1);
        assert_eq!(store.get(with_key.id).await.unwrap().unwrap().status, JobStatus::Running);
        // And a confirm that comes after the reclaim finds nothing to delete.
        assert!(!store.confirm_outbox(single).await.unwrap());

        // Confirms at once (with group commit, in one statement): each answered for its row.
        let (x, y) = (Uuid::now_v7(), Uuid::now_v7());
        store.submit_many(vec![sent(x), sent(y)]).await.unwrap();
        let confirms = [x, y, Uuid::now_v7()].map(|outbox| store.confirm_outbox(outbox));
        let confirmed: Vec<bool> = join_all(confirms).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(confirmed, [true, true, false], "grouped: {grouped}");
        assert_eq!(outbox_rows(&db).await, 0);
        db.close().await.ok();
    }
}

mod store {
    use super::an_outbox_row_stands_for_a_submission_until_its_messages_are_confirmed;
    on_both_backends!(an_outbox_row_stands_for_a_submission_until_its_messages_are_confirmed);
}

/// Through the API: once a submission is answered its messages are confirmed and its outbox
/// row gone (none is written in process), and its jobs run once.
async fn an_answered_submission_leaves_no_outbox_row(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (code, one) = app.submit(json!({ "operation": "ping" })).await;
    assert_eq!(code, 201, "{one}");
    let batch = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "delay_seconds": 3600 }] });
    let (code, two) = read(app.client.post(app.url("/jobs:batch")).json(&batch).send().await.unwrap()).await;
    assert_eq!(code, 201, "{two}");
    assert_eq!(app.count("SELECT COUNT(*) FROM dispatch_outbox").await, 0);
    for id in [&one["id"], &two["jobs"][0]["id"]] {
        app.wait_for_status(id.as_str().unwrap(), "succeeded").await;
    }
    let published = "SELECT COUNT(*) FROM job WHERE published_at IS NOT NULL";
    assert_eq!(app.count(published).await, 2, "the later job is the sweep's to send when it is due");
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, 2);
}

on_every_backend!(an_answered_submission_leaves_no_outbox_row);
