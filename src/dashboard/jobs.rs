//! `GET /ui/jobs`: jobs newest first, filtered by status, operation, queue, room and a
//! creation time range, or found by id or idempotency key; a page at a time by keyset (the
//! id of the last row), so the hundredth page costs what the first does. `GET /ui/bulk` and
//! `POST /ui/bulk`: cancel or retry everything a filter matches, after a confirmation that
//! says how many.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use maud::{html, Markup};

use super::html::{self, enc, shown};
use super::session::Viewer;
use crate::domain::{JobStatus, JobSummary};
use crate::http::AppState;
use crate::store::{JobFilter, StoreError};

/// Jobs per page.
const PAGE: u64 = 50;
/// Most jobs one bulk action changes; past it, the page says to run it again.
pub const BULK_MAX: usize = 10_000;

/// The list's query: every field optional, an empty one the same as none.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    operation: Option<String>,
    queue: Option<String>,
    room: Option<String>,
    /// Children of this job.
    parent: Option<String>,
    /// Created at or after (`YYYY-MM-DDTHH:MM`, UTC).
    from: Option<String>,
    /// Created before.
    to: Option<String>,
    /// A job id (opens it) or an idempotency key.
    q: Option<String>,
    cursor: Option<Uuid>,
    /// What a bulk action just did: `cancel` or `retry`, with counts.
    done: Option<String>,
    changed: Option<usize>,
    skipped: Option<usize>,
}

/// A filter as read from the query, checked.
#[derive(Debug, Default, Clone)]
pub struct Filters {
    status: Option<JobStatus>,
    operation: Option<String>,
    queue: Option<String>,
    room: Option<String>,
    parent: Option<Uuid>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    key: Option<String>,
    /// The raw texts, to fill the form and the links again.
    texts: Vec<(&'static str, String)>,
}

fn given(value: &Option<String>) -> Option<String> {
    value.as_deref().map(str::trim).filter(|value| !value.is_empty()).map(str::to_owned)
}

fn parse_time(name: &str, text: &str) -> Result<DateTime<Utc>, String> {
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .or_else(|| chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|day| day.and_hms_opt(0, 0, 0)))
        .map(|naive| naive.and_utc())
        .ok_or_else(|| format!("{name}: {text:?} is not a time (YYYY-MM-DDTHH:MM, UTC)"))
}

impl Filters {
    /// The filters of `query`; a value no job could match is an error to show.
    pub fn parse(query: &ListQuery) -> Result<Filters, String> {
        let mut filters = Filters::default();
        let fields = [
            ("status", &query.status),
            ("operation", &query.operation),
            ("queue", &query.queue),
            ("room", &query.room),
            ("parent", &query.parent),
            ("from", &query.from),
            ("to", &query.to),
            ("q", &query.q),
        ];
        for (name, value) in fields {
            let Some(value) = given(value) else { continue };
            if value.contains('\0') || value.chars().count() > 255 {
                return Err(format!("{name}: no job has such a value (a NUL character, or over 255 characters)"));
            }
            match name {
                "status" => {
                    let status = JobStatus::ALL.into_iter().find(|status| status.as_str() == value);
                    filters.status = Some(status.ok_or_else(|| format!("status: {value:?} is not a status"))?);
                }
                "operation" => filters.operation = Some(value.clone()),
                "queue" => filters.queue = Some(value.clone()),
                "room" => filters.room = Some(value.clone()),
                "parent" => {
                    filters.parent = Some(value.parse().map_err(|_| format!("parent: {value:?} is not a job id"))?);
                }
                "from" => filters.from = Some(parse_time(name, &value)?),
                "to" => filters.to = Some(parse_time(name, &value)?),
                _ => filters.key = Some(value.clone()),
            }
            filters.texts.push((name, value));
        }
        Ok(filters)
    }

    pub fn text(&self, name: &str) -> &str {
        self.texts.iter().find(|(field, _)| *field == name).map_or("", |(_, value)| value.as_str())
    }

    /// The filters as a query string (`&`-joined, each value percent-encoded).
    pub fn query(&self) -> String {
        self.texts.iter().map(|(name, value)| format!("{name}={}", enc(value))).collect::<Vec<_>>().join("&")
    }

    /// The store's filter for `viewer`: the room asked for if it may read it, else every
    /// room it may.
    pub fn for_store(
        &self,
        viewer: &Viewer,
        status: Option<JobStatus>,
        before: Option<Uuid>,
        limit: u64,
    ) -> Result<JobFilter, String> {
        let rooms = match &self.room {
            Some(room) if viewer.caller().can_read(room) => Some(vec![room.clone()]),
            Some(room) => return Err(format!("room {room:?}: this token may not read it")),
            None => viewer.caller().visible_rooms(),
        };
        // Ids are UUIDv7: a creation time bounds them.
        let to = self.to.map(floor_id);
        let before = match (before, to) {
            (Some(cursor), Some(to)) => Some(cursor.min(to)),
            (cursor, to) => cursor.or(to),
        };
        Ok(JobFilter {
            rooms,
            status: status.or(self.status),
            operation: self.operation.clone(),
            queue: self.queue.clone(),
            parent_job_id: self.parent,
            before,
            not_before: self.from.map(floor_id),
            idempotency_key: self.key.clone(),
            limit,
        })
    }

    pub fn status(&self) -> Option<JobStatus> {
        self.status
    }
}

/// The smallest UUIDv7 of millisecond `at`: every id made at or after it is not smaller.
fn floor_id(at: DateTime<Utc>) -> Uuid {
    let millis = u128::try_from(at.timestamp_millis().max(0)).unwrap_or(0);
    Uuid::from_u128(millis << 80)
}

pub async fn list(state: web::Data<AppState>, viewer: Viewer, query: web::Query<ListQuery>) -> HttpResponse {
    // An id opens the job.
    if let Some(id) = given(&query.q).and_then(|q| q.parse::<Uuid>().ok()) {
        return html::see_other(&format!("/ui/jobs/{id}"));
    }
    let filters = Filters::parse(&query);
    let done = match (query.done.as_deref(), query.changed) {
        (Some(done), Some(changed)) => {
            Some((changed, if done == "retry" { "queued again" } else { "cancelled" }, query.skipped.unwrap_or(0)))
        }
        _ => None,
    };
    let head = html! {
        h1 { "Jobs" }
        (filter_form(&state, filters.as_ref().ok()))
        @if let Some((changed, verb, skipped)) = done {
            p class="notice ok" role="status" {
                (changed) " jobs " (verb) "; " (skipped) " had moved on and were left as they were."
            }
        }
    };
    let filters = match filters {
        Ok(filters) => filters,
        Err(why) => {
            let body = html! { (head) p class="notice error" role="alert" { (shown(&why)) } };
            let mut response = html::page(Some(&viewer), "Jobs", body);
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return response;
        }
    };
    let filter = match filters.for_store(&viewer, None, query.cursor, PAGE) {
        Ok(filter) => filter,
        Err(why) => return html::problem(Some(&viewer), StatusCode::FORBIDDEN, "Not your room", &why),
    };
    let page = match state.store.list(&filter).await {
        Ok(page) => page,
        Err(err) => return unavailable(&viewer, &err),
    };
    let query_string = filters.query();
    let sep = if query_string.is_empty() { "" } else { "&" };
    let body = html! {
        (head)
        @if page.jobs.is_empty() { p class="empty" { "No jobs match." } } @else { (table(&page.jobs)) }
        nav class="pager" {
            @if query.cursor.is_some() { a href={ "/ui/jobs?" (query_string) } { "« Newest" } }
            @if let Some(next) = page.next_cursor {
                a rel="next" href={ "/ui/jobs?" (query_string) (sep) "cursor=" (next) } { "Older »" }
            }
        }
        @if viewer.writes() {
            section class="bulk" {
                h2 { "Everything this filter matches" }
                a class="button danger" href={ "/ui/bulk?action=cancel&" (query_string) } { "Cancel all matching…" }
                " "
                a class="button" href={ "/ui/bulk?action=retry&" (query_string) } { "Retry all matching…" }
            }
        }
    };
    html::page(Some(&viewer), "Jobs", body)
}

fn filter_form(state: &AppState, filters: Option<&Filters>) -> Markup {
    let text = |name: &str| filters.map_or("", |filters| filters.text(name)).to_owned();
    html! {
        form class="filters" method="get" action="/ui/jobs" {
            label { "Status " select name="status" {
                option value="" { "any status" }
                @for status in JobStatus::ALL {
                    option selected[text("status") == status.as_str()] { (status.as_str()) }
                }
            } }
            " "
            label { "Operation " input name="operation" value=(text("operation")); }
            " "
            label { "Queue " input name="queue" list="queues" value=(text("queue"));
                datalist id="queues" { @for queue in &state.job_queues { option value=(queue); } } }
            " "
            label { "Room " input name="room" value=(text("room")); }
            " "
            label { "Created from " input name="from" type="datetime-local" value=(text("from")); }
            " "
            label { "to " input name="to" type="datetime-local" value=(text("to")); }
            " "
            label { "Id or idempotency key " input name="q" value=(text("q")) size="38"; }
            " "
            button type="submit" { "Filter" }
            " "
            a href="/ui/jobs" { "Clear" }
        }
    }
}

/// Summaries as a table.
pub fn table(jobs: &[JobSummary]) -> Markup {
    html! {
        table class="jobs" {
            thead { tr {
                th { "Id" } th { "Status" } th { "Operation" } th { "Queue" } th { "Room" } th { "Progress" }
                th class="n" { "Attempts" } th { "Created" } th { "Finished" }
            } }
            tbody {
                @for job in jobs {
                    tr data-id=(job.id) {
                        td class="id" { a href={ "/ui/jobs/" (job.id) } { (job.id) } }
                        td {
                            (html::status(job.status.as_str()))
                            // A job that waits for its time says until when.
                            @if let Some(at) = job.run_after.filter(|at| job.status == JobStatus::Queued && *at > crate::store::clock::now()) {
                                " " span class="waits" { "until " (html::time(&at)) }
                            }
                            // A job its dependencies or its limit hold says so.
                            @if job.waiting_since.is_some() && job.status == JobStatus::Queued {
                                " " span class="waits" { "waiting for its dependencies" }
                            } @else if job.held_since.is_some() && job.status == JobStatus::Queued {
                                " " span class="waits" { "held by its limit" }
                            }
                        }
                        td { (shown(&job.operation)) }
                        td { (shown(&job.queue)) }
                        td { (shown(&job.room)) }
                        td { (html::progress(job.progress_current, job.progress_total)) }
                        td class="n" { (job.attempts) }
                        td { (html::time(&job.created_at)) }
                        td { (html::maybe_time(job.finished_at.as_ref())) }
                    }
                }
            }
        }
    }
}

fn unavailable(viewer: &Viewer, err: &StoreError) -> HttpResponse {
    tracing::warn!(error = %err, "dashboard list not read");
    html::problem(
        Some(viewer),
        StatusCode::SERVICE_UNAVAILABLE,
        "Store unavailable",
        "the jobs could not be read; try again in a moment",
    )
}

/// A bulk action: what it does to which states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk {
    Cancel,
    Retry,
}

impl Bulk {
    fn parse(text: Option<&str>) -> Option<Bulk> {
        match text {
            Some("cancel") => Some(Bulk::Cancel),
            Some("retry") => Some(Bulk::Retry),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Bulk::Cancel => "cancel",
            Bulk::Retry => "retry",
        }
    }

    /// The states it moves jobs out of (of those the filter asks for).
    fn sources(self, asked: Option<JobStatus>) -> Vec<JobStatus> {
        let sources = match self {
            Bulk::Cancel => [JobStatus::Queued, JobStatus::Running],
            Bulk::Retry => [JobStatus::Failed, JobStatus::Cancelled],
        };
        sources.into_iter().filter(|status| asked.is_none_or(|asked| asked == *status)).collect()
    }
}

#[derive(Debug, Deserialize)]
pub struct BulkQuery {
    action: Option<String>,
    #[serde(flatten)]
    list: ListQuery,
}

#[derive(Debug, Deserialize)]
pub struct BulkForm {
    action: String,
    csrf: String,
    #[serde(flatten)]
    list: ListQuery,
}

/// The jobs `filters` match in the states `bulk` acts on, at most `max`.
async fn matching(
    state: &AppState,
    viewer: &Viewer,
    filters: &Filters,
    bulk: Bulk,
    max: usize,
) -> Result<Vec<JobSummary>, HttpResponse> {
    let mut found = Vec::new();
    for status in bulk.sources(filters.status()) {
        let mut cursor = None;
        while found.len() < max {
            let limit = (max - found.len()).min(500) as u64;
            let filter = filters
                .for_store(viewer, Some(status), cursor, limit)
                .map_err(|why| html::problem(Some(viewer), StatusCode::FORBIDDEN, "Not your room", &why))?;
            let page = state.store.list(&filter).await.map_err(|err| unavailable(viewer, &err))?;
            found.extend(page.jobs);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    found.truncate(max);
    Ok(found)
}

/// The action and filter of a bulk request, if `viewer` may make it.
fn bulk_request(viewer: &Viewer, action: Option<&str>, list: &ListQuery) -> Result<(Bulk, Filters), HttpResponse> {
    let Some(bulk) = Bulk::parse(action) else {
        return Err(html::problem(
            Some(viewer),
            StatusCode::BAD_REQUEST,
            "No such action",
            "action must be cancel or retry",
        ));
    };
    if !viewer.writes() {
        let detail = "this token may read, not change jobs";
        return Err(html::problem(Some(viewer), StatusCode::FORBIDDEN, "Read-only", detail));
    }
    let filters =
        Filters::parse(list).map_err(|why| html::problem(Some(viewer), StatusCode::BAD_REQUEST, "Bad filter", &why))?;
    Ok((bulk, filters))
}

pub async fn confirm(state: web::Data<AppState>, viewer: Viewer, query: web::Query<BulkQuery>) -> HttpResponse {
    let (bulk, filters) = match bulk_request(&viewer, query.action.as_deref(), &query.list) {
        Ok(request) => request,
        Err(response) => return response,
    };
    let jobs = match matching(&state, &viewer, &filters, bulk, BULK_MAX + 1).await {
        Ok(jobs) => jobs,
        Err(response) => return response,
    };
    let count = if jobs.len() > BULK_MAX { format!("more than {BULK_MAX}") } else { jobs.len().to_string() };
    let states = bulk.sources(filters.status()).iter().map(|status| status.as_str()).collect::<Vec<_>>().join(" or ");
    let what = if bulk == Bulk::Cancel { "Cancel" } else { "Retry" };
    let describe = if filters.texts.is_empty() { "every job".to_owned() } else { describe(&filters) };
    let class = if bulk == Bulk::Cancel { "danger" } else { "" };
    let shown_count = jobs.len().min(BULK_MAX);
    let body = html! {
        h1 { (what) " " (count) " jobs?" }
        p class="confirm-count" data-count=(shown_count) { (count) " jobs match " (shown(&describe)) " and are " (states) "." }
        @if jobs.len() > BULK_MAX { p { "One action changes at most " (BULK_MAX) "; run it again for the rest." } }
        @if jobs.is_empty() {
            p { a href={ "/ui/jobs?" (filters.query()) } { "Back to the jobs" } }
        } @else {
            form method="post" action="/ui/bulk" {
                input type="hidden" name="csrf" value=(viewer.csrf());
                input type="hidden" name="action" value=(bulk.name());
                @for (name, value) in &filters.texts { input type="hidden" name=(name) value=(value); }
                button type="submit" class=(class) { (what) " " (shown_count) " jobs" }
                " "
                a href={ "/ui/jobs?" (filters.query()) } { "Back" }
            }
        }
    };
    html::page(Some(&viewer), &format!("{what} jobs"), body)
}

fn describe(filters: &Filters) -> String {
    filters.texts.iter().map(|(name, value)| format!("{name} = {value}")).collect::<Vec<_>>().join(", ")
}

pub async fn apply(state: web::Data<AppState>, viewer: Viewer, form: web::Form<BulkForm>) -> HttpResponse {
    if let Err(refused) = viewer.check_csrf(&form.csrf) {
        return refused;
    }
    let (bulk, filters) = match bulk_request(&viewer, Some(&form.action), &form.list) {
        Ok(request) => request,
        Err(response) => return response,
    };
    let jobs = match matching(&state, &viewer, &filters, bulk, BULK_MAX).await {
        Ok(jobs) => jobs,
        Err(response) => return response,
    };
    let (mut changed, mut skipped) = (0, 0);
    for job in &jobs {
        if viewer.caller().may_write(&job.room).is_err() {
            skipped += 1;
            continue;
        }
        // Each job is its own compare-and-set: one that moved on since it was listed is
        // left as it is.
        let done = match bulk {
            Bulk::Cancel => state.store.cancel(job.id).await.map(|cancellation| cancellation.changed),
            Bulk::Retry => match state.store.retry(job.id).await {
                Ok(queued) => {
                    state.dispatcher.publish(&queued).await;
                    Ok(true)
                }
                Err(StoreError::InvalidTransition(_)) => Ok(false),
                Err(err) => Err(err),
            },
        };
        match done {
            Ok(true) => changed += 1,
            Ok(false) => skipped += 1,
            Err(err) if err.is_unavailable() => return unavailable(&viewer, &err),
            Err(_) => skipped += 1,
        }
    }
    let identity = viewer.caller().identity();
    tracing::info!(action = bulk.name(), changed, skipped, user = %identity.user, filter = %describe(&filters), "bulk action from the dashboard");
    let query = filters.query();
    let sep = if query.is_empty() { "" } else { "&" };
    html::see_other(&format!("/ui/jobs?{query}{sep}done={}&changed={changed}&skipped={skipped}", bulk.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_bounds_the_ids_made_from_it_on() {
        let at = parse_time("from", "2026-11-25T21:40").unwrap();
        let made = Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, at.timestamp() as u64, 0));
        assert!(floor_id(at) <= made);
        let before = Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, at.timestamp() as u64 - 1, 999_000_000));
        assert!(before < floor_id(at));
    }

    #[test]
    fn filters_refuse_what_no_job_has() {
        let query = |status: &str| ListQuery { status: Some(status.into()), ..Default::default() };
        assert!(Filters::parse(&query("failed")).is_ok());
        assert!(Filters::parse(&query("FAILED")).is_err());
        let nul = ListQuery { operation: Some("a\0b".into()), ..Default::default() };
        assert!(Filters::parse(&nul).unwrap_err().contains("NUL"));
        let time = ListQuery { from: Some("yesterday".into()), ..Default::default() };
        assert!(Filters::parse(&time).is_err());
        let blank = ListQuery { queue: Some("  ".into()), ..Default::default() };
        assert!(Filters::parse(&blank).unwrap().texts.is_empty());
    }
}
