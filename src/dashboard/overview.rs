//! `GET /ui`: every queue at a glance: running or paused, jobs waiting and running, jobs
//! that succeeded and failed in the last minute, and how long the longest-waiting job has
//! been due; under it, each queue's last hour as charts (`charts`, from the per-minute
//! rollup). Counted over indexes (status; the time jobs ended), so it answers as fast with
//! a million jobs of history as with none; refreshed every few seconds. `POST
//! /ui/queues/{name}` pauses or resumes a queue (admins, with the form's CSRF token).

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use chrono::Duration;
use maud::html;
use serde::Deserialize;

use super::charts;
use super::html::{self, age, enc, shown};
use super::session::Viewer;
use crate::flow::QueuePauses;
use crate::http::AppState;
use crate::jobs::settings::JobsSettings;
use crate::store::{clock, overview};

/// Seconds between refreshes of the page.
const REFRESH_SECONDS: u32 = 5;

pub async fn page(
    state: web::Data<AppState>,
    pauses: web::Data<QueuePauses>,
    jobs: web::Data<JobsSettings>,
    viewer: Viewer,
) -> HttpResponse {
    let now = clock::now();
    let paused = match pauses.all().await {
        Ok(paused) => paused,
        Err(err) => return unavailable(&viewer, &err.to_string()),
    };
    let admin = viewer.caller().is_admin() && viewer.writes();
    let rooms = viewer.caller().visible_rooms();
    let queues: Vec<String> = pauses.names().iter().cloned().collect();
    let mut figures = match state.store.queue_figures(&queues, rooms.as_deref()).await {
        Ok(figures) => figures,
        Err(err) => return unavailable(&viewer, &err.to_string()),
    };
    if let Err(err) = overview::ended_since(&state.db, now - Duration::minutes(1), rooms.as_deref(), &mut figures).await
    {
        return unavailable(&viewer, &err.to_string());
    }
    let hour = match crate::flow::rollup::hour(&state.db, now, rooms.as_deref()).await {
        Ok(hour) => hour,
        Err(err) => return unavailable(&viewer, &err.to_string()),
    };
    let scoped = viewer.caller().visible_rooms().is_some();
    let body = html! {
        h1 { "Queues" }
        table class="queues" {
            thead { tr {
                th { "Queue" } th { "State" } th class="n" { "Waiting" } th class="n" { "Running" }
                th class="n" { "Succeeded / min" } th class="n" { "Failed / min" } th class="n" { "Oldest waiting" }
                @if admin { th {} }
            } }
            tbody {
                @for (queue, figures) in &figures {
                    @let oldest = figures.oldest_due.map_or_else(|| "–".to_owned(), |due| age((now - due).num_seconds().max(0)));
                    @let link = |status: &str| format!("/ui/jobs?queue={}&status={status}", enc(queue));
                    @let pause = paused.get(queue);
                    tr data-queue=(queue) data-queued=(figures.queued) data-state=(if pause.is_some() { "paused" } else { "running" }) {
                        td { a href={ "/ui/jobs?queue=" (enc(queue)) } { (queue) } }
                        td {
                            @match pause {
                                Some(pause) => span class="status paused" title={ "paused at " (pause.at.to_rfc3339()) " by " (shown(pause.by.as_deref().unwrap_or("?"))) } { "paused" },
                                None => span class="status running" { "running" },
                            }
                        }
                        td class="n" { a href=(link("queued")) { (figures.queued) } }
                        td class="n" { a href=(link("running")) { (figures.running) } }
                        td class="n ok" { (figures.succeeded) }
                        td class="n bad" { a href=(link("failed")) { (figures.failed) } }
                        td class="n" { (oldest) }
                        @if admin {
                            td {
                                form method="post" action={ "/ui/queues/" (enc(queue)) } class="inline" {
                                    input type="hidden" name="csrf" value=(viewer.csrf());
                                    @if pause.is_some() {
                                        input type="hidden" name="action" value="resume";
                                        button type="submit" { "Resume" }
                                    } @else {
                                        input type="hidden" name="action" value="pause";
                                        button type="submit" { "Pause" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if scoped { p class="hint" { "Counts of the rooms this token may read." } }
        h2 { "The last hour" }
        section class="charts" {
            @for queue in figures.keys() {
                @let minutes = hour.get(queue).cloned().unwrap_or_else(|| vec![Default::default(); crate::flow::rollup::MINUTES]);
                // A limit partitioned by a concurrency key bounds each key, not the queue's line.
                @let max_running = jobs.queues.get(queue).filter(|defaults| defaults.concurrency_key.is_none()).and_then(|defaults| defaults.max_running);
                (charts::queue(queue, &minutes, max_running))
            }
        }
    };
    let refresh = html! { meta http-equiv="refresh" content=(REFRESH_SECONDS); };
    html::page_with(Some(&viewer), "Queues", body, refresh)
}

#[derive(Debug, Deserialize)]
pub struct QueueForm {
    csrf: String,
    action: String,
}

/// Pauses or resumes a queue (admins), then shows the queues again.
pub async fn act(
    pauses: web::Data<QueuePauses>,
    viewer: Viewer,
    name: web::Path<String>,
    form: web::Form<QueueForm>,
) -> HttpResponse {
    if let Err(refused) = viewer.check_csrf(&form.csrf) {
        return refused;
    }
    if !viewer.caller().is_admin() || !viewer.writes() {
        return html::problem(Some(&viewer), StatusCode::FORBIDDEN, "Admins only", "only an admin token pauses queues");
    }
    if !pauses.names().contains(name.as_str()) {
        return html::problem(
            Some(&viewer),
            StatusCode::NOT_FOUND,
            "No such queue",
            "it is not a queue of this deployment",
        );
    }
    let user = viewer.caller().identity().user.clone();
    let changed = match form.action.as_str() {
        "pause" => pauses.pause(&name, &user).await,
        "resume" => pauses.resume(&name).await,
        _ => return html::problem(Some(&viewer), StatusCode::BAD_REQUEST, "No such action", "pause or resume"),
    };
    if let Err(err) = changed {
        return unavailable(&viewer, &err.to_string());
    }
    tracing::info!(queue = %name, action = %form.action, %user, "queue changed from the dashboard");
    html::see_other("/ui")
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
