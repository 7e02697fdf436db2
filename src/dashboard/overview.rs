//! `GET /ui`: every queue at a glance: jobs waiting and running, jobs that succeeded and
//! failed in the last minute, and how long the longest-waiting job has been due. Counted
//! over indexes (status; the time jobs ended), so it answers as fast with a million jobs
//! of history as with none; refreshed every few seconds.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use chrono::Duration;

use maud::html;

use super::html::{self, age, enc};
use super::session::Viewer;
use crate::http::AppState;
use crate::store::{clock, overview};

/// Seconds between refreshes of the page.
const REFRESH_SECONDS: u32 = 5;

pub async fn page(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    let now = clock::now();
    let rooms = viewer.caller().visible_rooms();
    let queues: Vec<String> = state.job_queues.iter().cloned().collect();
    let mut figures = match state.store.queue_figures(&queues, rooms.as_deref()).await {
        Ok(figures) => figures,
        Err(err) => return unavailable(&viewer, &err.to_string()),
    };
    if let Err(err) = overview::ended_since(&state.db, now - Duration::minutes(1), rooms.as_deref(), &mut figures).await
    {
        return unavailable(&viewer, &err.to_string());
    }
    let scoped = viewer.caller().visible_rooms().is_some();
    let body = html! {
        h1 { "Queues" }
        table class="queues" {
            thead { tr {
                th { "Queue" } th class="n" { "Waiting" } th class="n" { "Running" }
                th class="n" { "Succeeded / min" } th class="n" { "Failed / min" } th class="n" { "Oldest waiting" }
            } }
            tbody {
                @for (queue, figures) in &figures {
                    @let oldest = figures.oldest_due.map_or_else(|| "–".to_owned(), |due| age((now - due).num_seconds().max(0)));
                    @let link = |status: &str| format!("/ui/jobs?queue={}&status={status}", enc(queue));
                    tr data-queue=(queue) data-queued=(figures.queued) {
                        td { a href={ "/ui/jobs?queue=" (enc(queue)) } { (queue) } }
                        td class="n" { a href=(link("queued")) { (figures.queued) } }
                        td class="n" { a href=(link("running")) { (figures.running) } }
                        td class="n ok" { (figures.succeeded) }
                        td class="n bad" { a href=(link("failed")) { (figures.failed) } }
                        td class="n" { (oldest) }
                    }
                }
            }
        }
        @if scoped { p class="hint" { "Counts of the rooms this token may read." } }
    };
    let refresh = html! { meta http-equiv="refresh" content=(REFRESH_SECONDS); };
    html::page_with(Some(&viewer), "Queues", body, refresh)
}

fn unavailable(viewer: &Viewer, detail: &str) -> HttpResponse {
    tracing::warn!(error = detail, "queue overview not read");
    html::problem(
        Some(viewer),
        StatusCode::SERVICE_UNAVAILABLE,
        "Store unavailable",
        "the queues could not be read; try again in a moment",
    )
}
