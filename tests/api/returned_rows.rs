//! The job a claim or an outcome hands back is its row as stored, column for column, on
//! both stores, with and without group commit: those statements decode the rows they moved
//! with the store's own decoder (`store::sea::decode`), the rest with SeaORM's, and the two
//! must read NULL and every value alike.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use yardmaster::domain::{Job, Limit, NewJob, Unique};
use yardmaster::store::{Completion, JobCommands as _, JobReads as _, RunRef, RunWrites as _, SeaStore};

use crate::helpers::{migrated_store, Backend, TestDatabase};

/// A submission that fills every column a submission can fill.
fn full_job() -> NewJob {
    NewJob {
        payload: json!({"n": 1, "text": "a"}),
        max_retries: 0,
        idempotency_key: Some(format!("key-{}", uuid::Uuid::new_v4())),
        submitted_by: Some("someone".into()),
        service: Some("a-service".into()),
        timeout_seconds: Some(30.5),
        expires_at: Some(Utc::now() + chrono::Duration::hours(1)),
        priority: 3,
        ages_at: Some(Utc::now() + chrono::Duration::hours(1)),
        limit: Some(Limit { key: "operation:ping".into(), max_running: Some(100), rate: None }),
        unique: Some(Unique { key: "u".into(), window: Duration::from_secs(60), states: Vec::new() }),
        ..NewJob::new("ping")
    }
}

async fn stored(store: &SeaStore, job: &Job) -> Job {
    store.get(job.id).await.unwrap().expect("the job's row")
}

async fn claims_and_outcomes_return_their_rows_as_stored(backend: Backend) {
    for grouped in [false, true] {
        let (_database, url) = TestDatabase::create(backend).await;
        let (_db, store) = migrated_store(&url).await;
        let store: SeaStore = if grouped { store.with_group_commit(64) } else { store };
        let lease = Duration::from_secs(60);

        // Most columns NULL: a bare job, claimed and succeeded with a JSON null result.
        let bare = store.submit(NewJob::new("ping")).await.unwrap().job;
        let claimed = store.claim(bare.id, "worker-a", lease).await.unwrap().expect("claimed");
        assert_eq!(claimed, stored(&store, &bare).await, "grouped: {grouped}");
        assert!(claimed.result.is_none() && claimed.finished_at.is_none() && claimed.owner.is_some());
        let done = Completion::Succeeded { result: json!(null) };
        let succeeded = store.finish(RunRef::from(&claimed), &done).await.unwrap().expect("finished");
        assert_eq!(succeeded, stored(&store, &bare).await, "grouped: {grouped}");
        assert_eq!(succeeded.result, Some(json!(null)), "a JSON null result is a value, not SQL NULL");

        // Most columns set: claimed, then failed with an error.
        let full = store.submit(full_job()).await.unwrap().job;
        let claimed = store.claim(full.id, "worker-b", lease).await.unwrap().expect("claimed");
        assert_eq!(claimed, stored(&store, &full).await, "grouped: {grouped}");
        assert_eq!(claimed.timeout_seconds, Some(30.5));
        assert!(claimed.limit_key.is_some() && claimed.unique_key.is_some() && claimed.idempotency_key.is_some());
        let failed = Completion::Failed { error_code: "Broken".into(), message: "it broke".into() };
        let ended = store.finish(RunRef::from(&claimed), &failed).await.unwrap().expect("finished");
        assert_eq!(ended, stored(&store, &full).await, "grouped: {grouped}");
        assert_eq!((ended.error_code.as_deref(), ended.error_message.as_deref()), (Some("Broken"), Some("it broke")));
        assert!(ended.leased_until.is_none() && ended.finished_at.is_some());
    }
}

on_both_backends!(claims_and_outcomes_return_their_rows_as_stored);
