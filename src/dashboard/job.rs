//! `GET /ui/jobs/{id}`: one job: its state and progress (live, from its event stream), its
//! facts, payload, result and error, its children or batches, and its event timeline; cancel and retry
//! for a token that may write its room. `POST /ui/jobs/{id}/cancel|retry` act and come
//! back. `GET /ui/jobs/{id}/stream` is the API's event stream, for the page's script.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::Value;
use uuid::Uuid;

use maud::{html, Markup};

use super::html::{self, shown};
use super::jobs::table;
use super::login::CsrfForm;
use super::session::Viewer;
use crate::domain::{Job, JobStatus};
use crate::http::AppState;
use crate::store::{overview, JobFilter, StoreError};

/// Events shown on the page (the stream adds what comes after).
const EVENTS: u64 = 1000;
/// Children shown on the page.
const CHILDREN: u64 = 50;
/// Batches shown on the page.
const BATCHES: u64 = 50;

/// The job, if `viewer` may see it; a job of another room is answered as a missing one.
async fn visible(state: &AppState, viewer: &Viewer, id: Uuid) -> Result<Job, HttpResponse> {
    match state.store.get(id).await {
        Ok(Some(job)) if viewer.caller().can_read(&job.room) => Ok(job),
        Ok(_) => {
            Err(html::problem(Some(viewer), StatusCode::NOT_FOUND, "No such job", &format!("no job with id {id}")))
        }
        Err(err) => Err(unavailable(viewer, &err)),
    }
}

fn unavailable(viewer: &Viewer, err: &StoreError) -> HttpResponse {
    tracing::warn!(error = %err, "dashboard job page not read");
    html::problem(
        Some(viewer),
        StatusCode::SERVICE_UNAVAILABLE,
        "Store unavailable",
        "the job could not be read; try again in a moment",
    )
}

fn pretty(value: &Value) -> String {
    shown(&serde_json::to_string_pretty(value).unwrap_or_default())
}

/// The job id of a path; anything else is a page that is not there.
fn job_id(viewer: &Viewer, text: &str) -> Result<Uuid, HttpResponse> {
    text.parse().map_err(|_| html::problem(Some(viewer), StatusCode::NOT_FOUND, "No such job", "that is not a job id"))
}

pub async fn page(state: web::Data<AppState>, viewer: Viewer, id: web::Path<String>) -> HttpResponse {
    let id = match job_id(&viewer, &id) {
        Ok(id) => id,
        Err(response) => return response,
    };
    let job = match visible(&state, &viewer, id).await {
        Ok(job) => job,
        Err(response) => return response,
    };
    let events = match state.store.events(id, None, EVENTS).await {
        Ok(events) => events,
        Err(err) => return unavailable(&viewer, &err),
    };
    let children = JobFilter {
        rooms: viewer.caller().visible_rooms(),
        parent_job_id: Some(id),
        limit: CHILDREN,
        ..Default::default()
    };
    let children = match state.store.list(&children).await {
        Ok(page) => page,
        Err(err) => return unavailable(&viewer, &err),
    };
    let batches = match job.fan_out.as_deref() {
        Some("batches") => match batches(&state, &job).await {
            Ok(section) => Some(section),
            Err(err) => return unavailable(&viewer, &err),
        },
        _ => None,
    };
    let links = match job.on_dependency_failure.is_some() || job.has_dependents {
        true => match state.store.links(id).await {
            Ok(links) => links,
            Err(err) => return unavailable(&viewer, &err),
        },
        false => Default::default(),
    };
    let (current, total) = (job.progress_current, job.progress_total);
    let percent = total.filter(|total| *total > 0).map(|total| current.clamp(0, total) * 100 / total);
    let count = match (total, percent) {
        (Some(total), Some(percent)) => format!("{current}/{total} ({percent}%)"),
        _ => current.to_string(),
    };
    let after = events.last().map_or(0, |event| event.id);
    let body = html! {
        h1 { span class="operation" { (shown(&job.operation)) } " " span id="status" { (html::status(job.status.as_str())) } }
        p class="id" { (id) }
        div class="progress" id="progress" data-current=(current) data-total=(total.map_or_else(String::new, |total| total.to_string())) {
            progress max=(total.unwrap_or(0).max(1)) value=(current) {}
            " "
            span class="count" { (count) }
        }
        @if let Some(buttons) = buttons(&viewer, &job) { div class="actions" { (buttons) } }
        (facts(&job))
        @if let Some(code) = &job.error_code {
            h2 { "Error" }
            p class="notice error" { code { (shown(code)) } " " (shown(job.error_message.as_deref().unwrap_or(""))) }
        }
        h2 { "Payload" }
        pre class="json" { (pretty(&job.payload)) }
        @if let Some(result) = &job.result {
            h2 { "Result" }
            pre class="json" id="result" { (pretty(result)) }
        }
        @if !children.jobs.is_empty() {
            h2 {
                "Children"
                @if children.next_cursor.is_some() {
                    " " a href={ "/ui/jobs?parent=" (id) } { "(first " (CHILDREN) "; all)" }
                }
            }
            (table(&children.jobs))
        }
        @if let Some(batches) = batches { (batches) }
        @if !links.dependencies.is_empty() {
            h2 { "Waits for" }
            (linked("dependencies", &links.dependencies))
        }
        @if !links.dependents.is_empty() {
            h2 { "Waited for by" }
            (linked("dependents", &links.dependents))
        }
        h2 { "Events" }
        ol class="timeline" id="timeline" data-stream={ "/ui/jobs/" (id) "/stream?after=" (after) } data-ended=(job.status.is_terminal()) {
            @for event in &events { (event_item(event)) }
        }
    };
    html::page(Some(&viewer), &format!("{} {}", job.operation, id), body)
}

/// A coordinator's batches of this run: how many ended, by outcome, and the first
/// [`BATCHES`] of them, failures first.
async fn batches(state: &AppState, job: &Job) -> Result<Markup, StoreError> {
    let (rows, counts) = overview::batches(&state.db, job.id, job.attempts, BATCHES).await?;
    let ended: i64 = counts.values().sum();
    let total = job.progress_total.map_or_else(|| "?".to_owned(), |total| total.to_string());
    let by_status = counts.iter().map(|(status, count)| format!("{count} {status}")).collect::<Vec<_>>().join(", ");
    Ok(html! {
        h2 { "Batches" }
        p class="batches" { (ended) " of " (total) " ended" @if !by_status.is_empty() { ": " (by_status) } }
        @if !rows.is_empty() {
            table class="batches" {
                thead { tr { th class="n" { "Batch" } th { "Status" } th { "Error" } th { "Ended" } } }
                tbody {
                    @for row in &rows {
                        tr {
                            td class="n" { (row.batch) }
                            td { (html::status(&row.status)) }
                            td {
                                @if let Some(code) = &row.error_code {
                                    code { (shown(code)) } " " (shown(row.error_message.as_deref().unwrap_or("")))
                                }
                            }
                            td { (html::time(&row.finished_at)) }
                        }
                    }
                }
            }
        }
    })
}

/// Cancel and retry, as the job's state and the viewer's rights allow.
fn buttons(viewer: &Viewer, job: &Job) -> Option<Markup> {
    if !viewer.writes() || viewer.caller().may_write(&job.room).is_err() {
        return None;
    }
    let action = |verb: &str| format!("/ui/jobs/{}/{verb}", job.id);
    match job.status {
        JobStatus::Queued | JobStatus::Running => Some(html::button(
            viewer,
            &action("cancel"),
            "Cancel",
            "danger",
            Some("Cancel this job (and its unfinished children)?"),
        )),
        JobStatus::Failed | JobStatus::Cancelled if job.cleaned_at.is_none() => {
            Some(html::button(viewer, &action("retry"), "Retry", "", None))
        }
        _ => None,
    }
}

/// The limit a job counts under, with its concurrency key.
fn limit(job: &Job) -> Option<String> {
    let (rule, key) = crate::domain::Limit::split(job.limit_key.as_deref()?);
    Some(match key {
        Some(key) => format!("{} (key {})", shown(rule), shown(key)),
        None => shown(rule),
    })
}

fn facts(job: &Job) -> Markup {
    let queued = |at: Option<chrono::DateTime<chrono::Utc>>| at.filter(|_| job.status == JobStatus::Queued);
    let waiting = queued(job.waiting_since);
    let held = queued(job.held_since).filter(|_| waiting.is_none());
    let optional = [
        (
            "Priority",
            Some(match job.effective_priority == job.priority {
                true => job.priority.to_string(),
                false => format!("{} (raised to {} by waiting)", job.priority, job.effective_priority),
            }),
        ),
        ("Limit", limit(job)),
        ("Held by its limit since", held.as_ref().map(html::time)),
        ("Waiting for its dependencies since", waiting.as_ref().map(html::time)),
        ("If a dependency fails", job.on_dependency_failure.as_deref().map(shown)),
        ("Run after", job.run_after.as_ref().map(html::time)),
        ("Timeout", job.timeout_seconds.map(|seconds| format!("{seconds} s"))),
        ("Expires at", job.expires_at.as_ref().map(html::time)),
        ("Owner", job.owner.as_deref().map(shown)),
        ("Leased until", job.leased_until.as_ref().map(html::time)),
        ("Idempotency key", job.idempotency_key.as_deref().map(shown)),
        ("Submitted by", job.submitted_by.as_deref().map(shown)),
        ("Service", job.service.as_deref().map(shown)),
    ];
    html! {
        dl class="facts" {
            dt { "Queue" } dd { (shown(&job.queue)) }
            dt { "Room" } dd { (shown(&job.room)) }
            dt { "Attempts" } dd { (job.attempts) " of " (job.max_retries + 1) }
            dt { "Created" } dd { (html::time(&job.created_at)) }
            dt { "Started" } dd { (html::maybe_time(job.started_at.as_ref())) }
            dt { "Finished" } dd { (html::maybe_time(job.finished_at.as_ref())) }
            @if let Some(parent) = job.parent_job_id {
                dt { "Parent" } dd { a href={ "/ui/jobs/" (parent) } { (parent) } }
            }
            @for (name, value) in &optional {
                @if let Some(value) = value { dt { (name) } dd { (value) } }
            }
        }
    }
}

/// A job's dependencies or dependents: each linked, with its state.
fn linked(class: &str, jobs: &[crate::store::Linked]) -> Markup {
    html! {
        table class={ "links " (class) } {
            thead { tr { th { "Job" } th { "Operation" } th { "Status" } } }
            tbody {
                @for job in jobs {
                    tr {
                        td { a href={ "/ui/jobs/" (job.id) } { (job.id) } }
                        td { (shown(&job.operation)) }
                        td {
                            (html::status(job.status.as_str()))
                            @if job.waiting_since.is_some() && job.status == JobStatus::Queued { " waiting" }
                        }
                    }
                }
            }
        }
    }
}

/// One event on the timeline (the script adds later ones in the same shape).
fn event_item(event: &crate::domain::JobEvent) -> Markup {
    let fields = match &event.fields {
        Value::Object(map) if map.is_empty() => None,
        Value::Null => None,
        fields => Some(shown(&fields.to_string())),
    };
    html! {
        li class=(event.level.as_str()) data-id=(event.id) {
            time { (html::time(&event.ts)) }
            " "
            b { (shown(&event.event)) }
            " "
            (shown(event.message.as_deref().unwrap_or("")))
            @if let Some(fields) = fields { " " code class="fields" { (fields) } }
        }
    }
}

pub async fn cancel(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    act(&state, &viewer, &id, &form.csrf, "cancel").await
}

pub async fn retry(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    act(&state, &viewer, &id, &form.csrf, "retry").await
}

async fn act(state: &AppState, viewer: &Viewer, id: &str, csrf: &str, verb: &str) -> HttpResponse {
    if let Err(refused) = viewer.check_csrf(csrf) {
        return refused;
    }
    let id = match job_id(viewer, id) {
        Ok(id) => id,
        Err(response) => return response,
    };
    let job = match visible(state, viewer, id).await {
        Ok(job) => job,
        Err(response) => return response,
    };
    if let Err(err) = viewer.caller().may_write(&job.room) {
        return html::problem(Some(viewer), StatusCode::FORBIDDEN, "Not allowed", &err.detail);
    }
    let user = &viewer.caller().identity().user;
    let done = match verb {
        "cancel" => state
            .store
            .cancel(id)
            .await
            .map(|_| tracing::info!(job_id = %id, %user, "job cancelled from the dashboard")),
        _ => match state.store.retry(id).await {
            Ok(job) => {
                tracing::info!(job_id = %id, %user, "job queued again from the dashboard");
                state.dispatcher.publish(&job).await;
                Ok(())
            }
            Err(err) => Err(err),
        },
    };
    match done {
        Ok(()) => html::see_other(&format!("/ui/jobs/{id}")),
        Err(StoreError::InvalidTransition(err)) => {
            html::problem(Some(viewer), StatusCode::CONFLICT, "Not now", &format!("job {id}: {err}"))
        }
        Err(err) => unavailable(viewer, &err),
    }
}
