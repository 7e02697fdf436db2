//! A deployment of worker processes whose API is down: what the API process would do for
//! the rest, they still do (sweeping silent remote workers).

use std::time::Duration;

use sea_orm::ConnectionTrait as _;

use serde_json::json;
use yardmaster::config::RemoteSettings;
use yardmaster::startup::Application;

use crate::helpers::{Backend, TestApp, TestOptions};

/// The API's own sweeper sleeps for an hour: only the worker process can sweep.
async fn a_worker_process_sweeps_silent_remote_workers(backend: Backend) {
    let idle = RemoteSettings { sweep_interval_ms: 3_600_000, ..RemoteSettings::default() };
    let api =
        TestApp::spawn_with(backend, TestOptions { workers: false, remote: Some(idle), ..Default::default() }).await;
    let (status, worker) =
        read_json(api.client.post(api.url("/workers")).json(&json!({ "services": ["default"] }))).await;
    assert_eq!(status, 201, "{worker}");
    // It went silent long ago.
    let expired = api.db.execute_unprepared("UPDATE remote_worker SET expires_at = registered_at").await.unwrap();
    assert_eq!(expired.rows_affected(), 1);

    let mut settings = yardmaster::config::Settings::default();
    settings.store.url = api.store_url.clone();
    settings.remote.sweep_interval_ms = 100;
    settings.uploads.dir = api.uploads.0.display().to_string();
    let worker_process = Application::builder(settings).without_api().build().await.expect("the worker starts");
    api.wait_for_count("SELECT COUNT(*) FROM remote_worker WHERE gone_at IS NOT NULL", 1, Duration::from_secs(30))
        .await;
    drop(worker_process);
}

async fn read_json(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    crate::helpers::read(request.send().await.unwrap()).await
}

on_both_backends!(a_worker_process_sweeps_silent_remote_workers);
