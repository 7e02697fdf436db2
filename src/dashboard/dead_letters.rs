//! `GET /ui/dead-letters` (admins): each queue's dead letters, by reason, with samples;
//! `POST /ui/dead-letters` replays or purges those of one queue (and reason), after the
//! browser's confirmation.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use maud::{html, Markup};

use super::html::{self, enc, shown};
use super::session::Viewer;
use crate::dead_letters::{self, Selection};
use crate::domain::QueueName;
use crate::http::AppState;

/// Letters looked at per queue for the summary.
const SUMMARY_LIMIT: usize = 1000;
/// Letters one action settles at most.
const ACTION_LIMIT: usize = 10_000;

#[derive(Debug, Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
    queue: Option<String>,
    acted: Option<usize>,
}

#[derive(Debug, Deserialize)]
pub struct SettleForm {
    csrf: String,
    queue: String,
    action: String,
    reason: Option<String>,
}

fn admins_only(viewer: &Viewer) -> Result<(), HttpResponse> {
    match viewer.caller().is_admin() {
        true => Ok(()),
        false => Err(html::problem(
            Some(viewer),
            StatusCode::FORBIDDEN,
            "Admins only",
            "dead letters span every room: an admin token is needed",
        )),
    }
}

pub async fn page(state: web::Data<AppState>, viewer: Viewer, query: web::Query<DoneQuery>) -> HttpResponse {
    if let Err(refused) = admins_only(&viewer) {
        return refused;
    }
    let done = match (query.done.as_deref(), query.queue.as_deref(), query.acted) {
        (Some(done), Some(queue), Some(acted)) => {
            Some((if done == "purge" { "purged" } else { "replayed" }, queue, acted))
        }
        _ => None,
    };
    let mut summaries = Vec::new();
    for queue in &state.job_queues {
        summaries.push((queue, dead_letters::summarise(state.transport.as_ref(), queue, SUMMARY_LIMIT).await));
    }
    let any = summaries.iter().any(|(_, summary)| summary.as_ref().is_ok_and(|summary| summary.total > 0));
    let body = html! {
        h1 { "Dead letters" }
        @if let Some((verb, queue, acted)) = done {
            p class="notice ok" role="status" { (acted) " letters of " (queue) " " (verb) "." }
        }
        @for (queue, summary) in &summaries {
            @match summary {
                Err(err) => { h2 { (queue) } p class="notice error" { "not read: " (err) } }
                Ok(summary) if summary.total == 0 => {}
                Ok(summary) => {
                    section class="dead-letters" data-queue=(queue) {
                        h2 { (queue) ": " (summary.total) " letters" }
                        table {
                            thead { tr { th { "Reason" } th class="n" { "Letters" } th {} } }
                            tbody {
                                @for (reason, count) in &summary.by_reason {
                                    tr {
                                        td { (reason) }
                                        td class="n" { (count) }
                                        td {
                                            (settle_button(&viewer, queue, Some(reason), "replay", "Replay")) " "
                                            (settle_button(&viewer, queue, Some(reason), "purge", "Purge"))
                                        }
                                    }
                                }
                            }
                        }
                        p {
                            (settle_button(&viewer, queue, None, "replay", "Replay all")) " "
                            (settle_button(&viewer, queue, None, "purge", "Purge all"))
                        }
                        @if !summary.samples.is_empty() {
                            details {
                                summary { "Samples" }
                                ul { @for sample in &summary.samples { li { b { (sample.reason) } " " code { (shown(&sample.body)) } } } }
                            }
                        }
                    }
                }
            }
        }
        @if !any { p class="empty" { "No dead letters in any queue." } }
    };
    html::page(Some(&viewer), "Dead letters", body)
}

fn settle_button(viewer: &Viewer, queue: &str, reason: Option<&str>, action: &str, label: &str) -> Markup {
    let what = reason.map_or_else(
        || format!("every dead letter of {queue}"),
        |reason| format!("the dead letters of {queue} ({reason})"),
    );
    let class = if action == "purge" { "danger" } else { "" };
    html! {
        form method="post" action="/ui/dead-letters" class="inline" data-confirm=(format!("{label}: {what}?")) {
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="queue" value=(queue);
            input type="hidden" name="action" value=(action);
            @if let Some(reason) = reason { input type="hidden" name="reason" value=(reason); }
            button type="submit" class=(class) { (label) }
        }
    }
}

pub async fn settle(state: web::Data<AppState>, viewer: Viewer, form: web::Form<SettleForm>) -> HttpResponse {
    if let Err(refused) = admins_only(&viewer).and_then(|()| viewer.check_csrf(&form.csrf)) {
        return refused;
    }
    let queue = match QueueName::parse(&form.queue) {
        Ok(queue) => queue,
        Err(err) => return html::problem(Some(&viewer), StatusCode::BAD_REQUEST, "No such queue", &err.to_string()),
    };
    let reason = form.reason.clone().filter(|reason| !reason.is_empty());
    let selection = Selection { reason, limit: ACTION_LIMIT, dry_run: false };
    let transport = state.transport.as_ref();
    let settled = match form.action.as_str() {
        "replay" => dead_letters::replay(transport, queue.as_str(), &selection).await,
        "purge" => dead_letters::purge(transport, queue.as_str(), &selection).await,
        _ => {
            return html::problem(
                Some(&viewer),
                StatusCode::BAD_REQUEST,
                "No such action",
                "action must be replay or purge",
            )
        }
    };
    match settled {
        Ok(settled) => {
            let user = &viewer.caller().identity().user;
            tracing::info!(queue = queue.as_str(), action = %form.action, acted = settled.acted, %user, "dead letters settled from the dashboard");
            html::see_other(&format!(
                "/ui/dead-letters?done={}&queue={}&acted={}",
                enc(&form.action),
                enc(queue.as_str()),
                settled.acted
            ))
        }
        Err(err) => {
            html::problem(Some(&viewer), StatusCode::SERVICE_UNAVAILABLE, "Transport unavailable", &err.to_string())
        }
    }
}
