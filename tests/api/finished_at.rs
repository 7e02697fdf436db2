//! A job's `finished_at` says whether it has ended: set by every ending, cleared by a retry
//! by hand, absent while QUEUED or RUNNING, on both stores, through every way in and out of
//! those states (an ending, a failure, a cancel while queued and while running, a requeue,
//! a retry by hand); and what a limit counts as its admitted jobs is the live ones it
//! admitted. The chaos run checks the same rule over all its jobs.

use std::time::Duration;

use sea_orm::{ConnectionTrait as _, DatabaseConnection, Statement};
use yardmaster::domain::{Limit, NewJob};
use yardmaster::store::{Completion, JobCommands as _, Requeue, RunRef, RunWrites as _};

use crate::helpers::{migrated_store, Backend, TestDatabase};

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

const LEASE: Duration = Duration::from_secs(60);

async fn every_way_in_and_out_keeps_finished_at_in_step(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let (db, store) = migrated_store(&url).await;
    let limit = Limit { key: "operation:ping".into(), max_running: Some(100), rate: None };
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(store.submit(NewJob { limit: Some(limit.clone()), ..NewJob::new("ping") }).await.unwrap().job.id);
    }
    let run = |job: &yardmaster::domain::Job| RunRef::from(job);
    let claim = |n: usize| store.claim(ids[n], "test", LEASE);
    let failed = Completion::Failed { error_code: "boom".into(), message: "boom".into() };

    let job = claim(0).await.unwrap().unwrap();
    store.finish(run(&job), &Completion::Succeeded { result: serde_json::json!({}) }).await.unwrap().unwrap();
    let job = claim(1).await.unwrap().unwrap();
    store.finish(run(&job), &failed).await.unwrap().unwrap();
    store.cancel(ids[2]).await.unwrap();
    claim(3).await.unwrap().unwrap();
    store.cancel(ids[3]).await.unwrap();
    let job = claim(4).await.unwrap().unwrap();
    let later = Requeue::RetryLater { delay: Duration::ZERO, reason: "busy".into() };
    store.requeue(run(&job), &later).await.unwrap().unwrap();
    let job = claim(5).await.unwrap().unwrap();
    store.finish(run(&job), &failed).await.unwrap().unwrap();
    store.retry(ids[5]).await.unwrap();
    claim(6).await.unwrap().unwrap();
    // 7 stays QUEUED.

    let ended = "status IN ('succeeded', 'failed', 'cancelled')";
    let live = "status IN ('queued', 'running')";
    assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM job WHERE {ended}")).await, 4);
    assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM job WHERE {live}")).await, 4);
    let out_of_step = format!(
        "SELECT COUNT(*) FROM job WHERE ({ended} AND finished_at IS NULL) OR ({live} AND finished_at IS NOT NULL)"
    );
    assert_eq!(count(&db, &out_of_step).await, 0, "a job whose finished_at says otherwise than its status");
    // What the limit counts: the live jobs it admitted (5, retried by hand, is held again),
    // by the term of its index on either engine (migration 36).
    for live in [live, "finished_at IS NULL"] {
        let admitted =
            format!("SELECT COUNT(*) FROM job WHERE limit_key IS NOT NULL AND held_since IS NULL AND {live}");
        assert_eq!(count(&db, &admitted).await, 3, "{live}");
    }
}

on_both_backends!(every_way_in_and_out_keeps_finished_at_in_step);
