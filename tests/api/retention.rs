//! The cleaner on both stores: uploaded files removed past their service's age with the
//! job's row and events kept (results then 410), directories nothing refers to removed, and
//! the history of long finished jobs deleted, exactly those past their age, a parent only
//! with its children and never while one of them still waits or runs.

use std::time::Duration;

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use uuid::Uuid;
use yardmaster::config::{RetentionSettings, UploadSettings};
use yardmaster::domain::NewJob;
use yardmaster::retention::cleaner::run_once;
use yardmaster::store::entity::{job, job_dependency, job_event};
use yardmaster::uploads::Uploads;

use crate::helpers::{read, Backend, TestApp, TestOptions, PARKED};

/// Moves job `id`'s end `days` into the past.
async fn ended_ago(app: &TestApp, id: &str, days: i64) {
    let then = yardmaster::store::clock::now() - chrono::Duration::days(days);
    let id: Uuid = id.parse().unwrap();
    let update = job::Entity::update_many().col_expr(job::Column::FinishedAt, Expr::value(then));
    update.filter(job::Column::Id.eq(id)).exec(&app.db).await.unwrap();
}

/// Every descendant of job `id`, level by level.
async fn descendants(app: &TestApp, id: &str) -> Vec<String> {
    let (mut found, mut level) = (Vec::new(), vec![id.to_owned()]);
    while let Some(parent) = level.pop() {
        let (_, children) = app.get(&format!("/jobs/{parent}/children")).await;
        for child in children["jobs"].as_array().unwrap() {
            let child = child["id"].as_str().unwrap().to_owned();
            level.insert(0, child.clone());
            found.push(child);
        }
    }
    found
}

fn uploads_of(app: &TestApp) -> Uploads {
    let settings = UploadSettings { dir: app.uploads.0.display().to_string(), ..UploadSettings::default() };
    Uploads::open(app.db.clone(), &settings).unwrap()
}

async fn upload(app: &TestApp, script: &str) -> String {
    let form = reqwest::multipart::Form::new()
        .text("service", "default")
        .part("file", reqwest::multipart::Part::bytes(script.as_bytes().to_vec()).file_name("run.sh"));
    let (status, job) = read(app.client.post(app.url("/uploads")).multipart(form).send().await.unwrap()).await;
    assert_eq!(status, 201, "{job}");
    job["id"].as_str().unwrap().to_owned()
}

async fn ended(app: &TestApp, id: &str) -> serde_json::Value {
    let response = app.client.get(app.url(&format!("/jobs/{id}"))).header("Prefer", "wait=30").send().await.unwrap();
    let (_, job) = read(response).await;
    assert!(["succeeded", "failed", "cancelled"].contains(&job["status"].as_str().unwrap()), "{job}");
    job
}

/// Sets a directory's modification time `ago` into the past.
fn modified_ago(path: &std::path::Path, ago: Duration) {
    let dir = std::fs::File::open(path).unwrap();
    dir.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

async fn old_files_go_and_the_history_stays(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let uploads = uploads_of(&app);
    let old = upload(&app, "echo old > out.txt\n").await;
    let young = upload(&app, "echo young > out.txt\n").await;
    ended(&app, &old).await;
    ended(&app, &young).await;
    // The default service keeps files 48 hours.
    ended_ago(&app, &old, 3).await;
    // A staging directory a crash left, and files of a job that never got its row.
    let jobs = app.uploads.0.join("jobs");
    let (stray, staging, fresh) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for dir in
        [jobs.join(stray.to_string()), jobs.join(format!("{staging}.partial")), jobs.join(format!("{fresh}.partial"))]
    {
        std::fs::create_dir_all(&dir).unwrap();
    }
    modified_ago(&jobs.join(stray.to_string()), Duration::from_secs(7200));
    modified_ago(&jobs.join(format!("{staging}.partial")), Duration::from_secs(7200));
    // Runs' working directories live apart from the blobs: an old job's go with its files,
    // and a run of a job whose row is gone is an orphan too.
    let runs = app.uploads.0.join("runs");
    let lost_run = Uuid::now_v7();
    std::fs::create_dir_all(runs.join(lost_run.to_string()).join("1").join("work")).unwrap();
    modified_ago(&runs.join(lost_run.to_string()), Duration::from_secs(7200));
    assert!(runs.join(&old).join("1").join("work").join("out.txt").exists() && runs.join(&young).exists());
    let settings = RetentionSettings::default();
    let counts = run_once(app.store.as_ref(), &app.db, &uploads, &settings).await.unwrap();
    assert_eq!((counts.files_cleaned, counts.orphans_removed, counts.jobs_pruned), (1, 3, 0), "{counts:?}");
    assert!(!jobs.join(&old).exists() && jobs.join(&young).exists());
    assert!(!runs.join(&old).exists() && runs.join(&young).exists(), "runs go with their job's files");
    assert!(!runs.join(lost_run.to_string()).exists());
    assert!(!jobs.join(stray.to_string()).exists() && !jobs.join(format!("{staging}.partial")).exists());
    assert!(jobs.join(format!("{fresh}.partial")).exists(), "an upload may still be arriving");
    let (status, job) = app.get(&format!("/jobs/{old}")).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("succeeded")), "the row stays: {job}");
    assert!(job["cleaned_at"].is_string(), "{job}");
    let events: Vec<String> = app.events(&old).await.iter().map(|e| e["event"].as_str().unwrap().to_owned()).collect();
    assert!(events.contains(&"job.cleaned".to_owned()) && events.contains(&"job.succeeded".to_owned()), "{events:?}");
    let (status, body) = app.get(&format!("/jobs/{old}/result")).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("result_cleaned")), "{body}");
    let (status, body) = app.get(&format!("/jobs/{old}/files/out.txt")).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("result_cleaned")), "{body}");
    let response = app.client.get(app.url(&format!("/jobs/{young}/result"))).send().await.unwrap();
    assert_eq!(response.status(), 200, "a young job keeps its result");
    // A second pass has nothing to do.
    let again = run_once(app.store.as_ref(), &app.db, &uploads, &settings).await.unwrap();
    assert_eq!(again.total(), 0, "{again:?}");
}

async fn history_past_its_age_is_pruned_in_batches(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let uploads = uploads_of(&app);
    let mut old_succeeded = Vec::new();
    for _ in 0..5 {
        let (_, job) = app.submit(json!({ "operation": "count" })).await;
        old_succeeded.push(job["id"].as_str().unwrap().to_owned());
    }
    let (_, young) = app.submit(json!({ "operation": "count" })).await;
    let (_, failed) =
        app.submit(json!({ "operation": "fail", "payload": { "error_class": "Boom", "message": "no" } })).await;
    let (_, group) = app
        .submit(json!({ "operation": "group", "payload": { "jobs": [{ "operation": "count" }, { "operation": "count" }] } }))
        .await;
    let (_, cancelled) = app.submit(json!({ "operation": "count", "queue": PARKED })).await;
    app.post(&format!("/jobs/{}/cancel", cancelled["id"].as_str().unwrap())).await;
    for id in
        old_succeeded.iter().chain([&young, &failed, &group].map(|job| job["id"].as_str().unwrap().to_owned()).iter())
    {
        app.wait_for_status(id, if id == failed["id"].as_str().unwrap() { "failed" } else { "succeeded" }).await;
    }
    // An old parent whose child still waits: kept, child and all.
    let (_, waiting_parent) = app.submit(json!({ "operation": "count" })).await;
    let waiting_parent = waiting_parent["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&waiting_parent, "succeeded").await;
    let child = NewJob {
        parent_job_id: Some(waiting_parent.parse().unwrap()),
        queue: yardmaster::domain::QueueName::parse(PARKED).unwrap(),
        ..NewJob::new("count")
    };
    app.store.submit(child).await.unwrap();
    let group_id = group["id"].as_str().unwrap().to_owned();
    let children = app.get(&format!("/jobs/{group_id}/children")).await.1["jobs"].as_array().unwrap().len();
    assert_eq!(children, 2);
    // Families two levels deep: one ended whole, one whose great-grandchild still waits.
    let nested = json!({ "operation": "group", "payload": { "jobs": [
        { "operation": "group", "payload": { "jobs": [{ "operation": "count" }, { "operation": "count" }] } },
        { "operation": "count" },
    ] } });
    let deep = app.submit(nested.clone()).await.1["id"].as_str().unwrap().to_owned();
    let deep_kept = app.submit(nested).await.1["id"].as_str().unwrap().to_owned();
    for id in [&deep, &deep_kept] {
        app.wait_for_status(id, "succeeded").await;
    }
    let deep_family = descendants(&app, &deep).await;
    let deep_kept_family = descendants(&app, &deep_kept).await;
    assert_eq!((deep_family.len(), deep_kept_family.len()), (4, 4), "{deep_family:?}");
    let grandchild = deep_kept_family.last().unwrap().parse().unwrap();
    let great_grandchild = NewJob {
        parent_job_id: Some(grandchild),
        queue: yardmaster::domain::QueueName::parse(PARKED).unwrap(),
        ..NewJob::new("count")
    };
    app.store.submit(great_grandchild).await.unwrap();
    assert_eq!(descendants(&app, &deep_kept).await.len(), 5);
    // A dependency edge: `dependent` waited for `dependency`, and only the latter is old.
    let dependency = app.submit(json!({ "operation": "count" })).await.1["id"].as_str().unwrap().to_owned();
    let dependent = app.submit(json!({ "operation": "count", "depends_on": [dependency] })).await;
    let dependent = dependent.1["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&dependent, "succeeded").await;
    // The oldest is a family kept for its child, which does not stop the jobs behind it; the
    // one kept for a great-grandchild is found by the walk, and ends the pass, so it comes last.
    for id in
        [&waiting_parent].into_iter().chain(old_succeeded.iter()).chain([&group_id, &deep, &dependency, &deep_kept])
    {
        ended_ago(&app, id, 8).await;
    }
    // Failed history is kept 30 days by default, cancelled 7.
    ended_ago(&app, failed["id"].as_str().unwrap(), 8).await;
    ended_ago(&app, cancelled["id"].as_str().unwrap(), 8).await;
    let before = job::Entity::find().count(&app.db).await.unwrap();
    let settings = RetentionSettings { batch: 2, ..RetentionSettings::default() };
    let counts = run_once(app.store.as_ref(), &app.db, &uploads, &settings).await.unwrap();
    // 5 old succeeded, the old group, the deep family's root, the old dependency and the old
    // cancelled; the group's 2 children and the deep family's 4 descendants with them.
    assert_eq!((counts.jobs_pruned, counts.children_pruned), (9, 6), "{counts:?}");
    let after = job::Entity::find().count(&app.db).await.unwrap();
    assert_eq!(before - after, 15);
    let gone = [group_id.clone(), deep, dependency.clone(), cancelled["id"].as_str().unwrap().to_owned()];
    for id in old_succeeded.iter().chain(gone.iter()).chain(deep_family.iter()) {
        let (status, _) = app.get(&format!("/jobs/{id}")).await;
        assert_eq!(status, 404, "{id} pruned");
        let id: Uuid = id.parse().unwrap();
        let events = job_event::Entity::find().filter(job_event::Column::JobId.eq(id)).count(&app.db).await.unwrap();
        assert_eq!(events, 0, "its events with it");
    }
    let kept = [young["id"].as_str().unwrap(), failed["id"].as_str().unwrap(), &waiting_parent, &dependent, &deep_kept];
    for id in kept.into_iter().chain(deep_kept_family.iter().map(String::as_str)) {
        let (status, job) = app.get(&format!("/jobs/{id}")).await;
        assert_eq!(status, 200, "{id} kept: {job}");
    }
    let dependency: Uuid = dependency.parse().unwrap();
    let edges = job_dependency::Entity::find().filter(job_dependency::Column::DependencyId.eq(dependency));
    assert_eq!(edges.count(&app.db).await.unwrap(), 0, "the edge to a pruned job goes with it");
    let (status, _) = app.get(&format!("/jobs/{dependent}/dependencies")).await;
    assert_eq!(status, 200);
    let again = run_once(app.store.as_ref(), &app.db, &uploads, &settings).await.unwrap();
    assert_eq!(again.total(), 0, "{again:?}");
}

async fn a_cleaned_job_cannot_be_retried(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions::default()).await;
    let uploads = uploads_of(&app);
    let id = upload(&app, "exit 1\n").await;
    assert_eq!(ended(&app, &id).await["status"], "failed");
    ended_ago(&app, &id, 3).await;
    run_once(app.store.as_ref(), &app.db, &uploads, &RetentionSettings::default()).await.unwrap();
    let (status, body) = app.post(&format!("/jobs/{id}/retry")).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("result_cleaned")), "{body}");
    let job = app.store.get(id.parse().unwrap()).await.unwrap().unwrap();
    assert!(app.store.retry(job.id).await.is_err(), "the store refuses it too");
}

on_both_backends!(
    old_files_go_and_the_history_stays,
    history_past_its_age_is_pruned_in_batches,
    a_cleaned_job_cannot_be_retried,
);
