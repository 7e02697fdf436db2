//! `GET /ui/schedules`: the schedules of the viewer's rooms with their times, next tick,
//! last tick and its job; `POST /ui/schedules/{id}` pauses, resumes or runs one now (with
//! the form's CSRF token), for those who may write to its room.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use maud::html;
use serde::Deserialize;
use uuid::Uuid;

use super::html::{self, enc, maybe_time, shown};
use super::session::Viewer;
use crate::schedules::entity::schedule;
use crate::schedules::Schedules;

/// Schedules shown at most.
const PAGE: u64 = 500;

#[derive(Debug, Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ActionForm {
    csrf: String,
    action: String,
}

fn when(s: &schedule::Model) -> String {
    match (&s.cron, s.every_seconds) {
        (Some(cron), _) => format!("{cron} ({})", s.timezone),
        (None, Some(every)) => format!("every {every} s"),
        (None, None) => String::new(),
    }
}

pub async fn page(schedules: web::Data<Schedules>, viewer: Viewer, query: web::Query<DoneQuery>) -> HttpResponse {
    let rooms = viewer.caller().visible_rooms();
    let listed = match schedules.book.list(rooms.as_deref(), None, PAGE).await {
        Ok(listed) => listed,
        Err(err) => {
            return html::problem(Some(&viewer), StatusCode::SERVICE_UNAVAILABLE, "Store unavailable", &err.to_string())
        }
    };
    let done = query.done.as_deref().zip(query.name.as_deref());
    let body = html! {
        h1 { "Schedules" }
        @if let Some((done, name)) = done {
            p class="notice ok" role="status" { "Schedule " (shown(name)) " " (done) "." }
        }
        @if listed.is_empty() {
            p class="empty" { "No schedules. Create one with " code { "yardmaster schedule create" } " or " code { "POST /schedules" } "." }
        } @else {
            table class="schedules" {
                thead { tr { th { "Name" } th { "Room" } th { "When" } th { "Next tick" } th { "Last tick" } th { "Last job" } th {} } }
                tbody {
                    @for s in &listed {
                        tr data-schedule=(s.id) {
                            td { (shown(&s.name)) @if s.source == "config" { " " span class="tag" { "config" } } }
                            td { (shown(&s.room)) }
                            td { code { (shown(&when(s))) } }
                            td {
                                @if s.paused { span class="status paused" { "paused" } }
                                @else { (html::time(&s.next_fire_at)) }
                            }
                            td { (maybe_time(s.last_tick_at.as_ref())) }
                            td {
                                @match s.last_job_id {
                                    Some(job) => a href={ "/ui/jobs/" (job) } { (job.to_string()[..8]) "…" },
                                    None => "–",
                                }
                            }
                            td {
                                @if viewer.writes() && viewer.caller().may_write(&s.room).is_ok() {
                                    @let toggle = if s.paused { ("resume", "Resume") } else { ("pause", "Pause") };
                                    @for (action, label) in [toggle, ("run", "Run now")] {
                                        form method="post" action={ "/ui/schedules/" (s.id) } class="inline" {
                                            input type="hidden" name="csrf" value=(viewer.csrf());
                                            input type="hidden" name="action" value=(action);
                                            button type="submit" { (label) }
                                        }
                                        " "
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    html::page(Some(&viewer), "Schedules", body)
}

pub async fn act(
    schedules: web::Data<Schedules>,
    viewer: Viewer,
    id: web::Path<Uuid>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    if let Err(refused) = viewer.check_csrf(&form.csrf) {
        return refused;
    }
    let found = schedules.book.get(*id).await.ok().flatten().filter(|s| viewer.caller().can_read(&s.room));
    let Some(s) = found else {
        return html::problem(
            Some(&viewer),
            StatusCode::NOT_FOUND,
            "No such schedule",
            "it was deleted, or is another room's",
        );
    };
    if let Err(err) = viewer.caller().may_write(&s.room) {
        return html::problem(Some(&viewer), StatusCode::FORBIDDEN, "Not yours to change", &err.detail);
    }
    let user = &viewer.caller().identity().user;
    let done = match form.action.as_str() {
        "pause" | "resume" => match schedules.set_paused(&s, form.action == "pause").await {
            Ok(Some(_)) => {
                if form.action == "pause" {
                    "paused"
                } else {
                    "resumed"
                }
            }
            Ok(None) => {
                return html::problem(Some(&viewer), StatusCode::CONFLICT, "Changed meanwhile", "reload and try again")
            }
            Err(err) => return html::problem(Some(&viewer), err.code.status(), err.code.title(), &err.detail),
        },
        "run" => match schedules.run_now(&s).await {
            Ok(job) => {
                tracing::info!(schedule = %s.id, job_id = %job.id, %user, "schedule run now from the dashboard");
                return html::see_other(&format!("/ui/jobs/{}", job.id));
            }
            Err(err) => return html::problem(Some(&viewer), err.code.status(), err.code.title(), &err.detail),
        },
        _ => return html::problem(Some(&viewer), StatusCode::BAD_REQUEST, "No such action", "pause, resume or run"),
    };
    tracing::info!(schedule = %s.id, action = %form.action, %user, "schedule changed from the dashboard");
    html::see_other(&format!("/ui/schedules?done={done}&name={}", enc(&s.name)))
}
