//! `GET /ui/dead-letters` (admins): each queue's dead letters, by reason, with samples;
//! `POST /ui/dead-letters` replays or purges those of one queue (and reason), after the
//! browser's confirmation.

use std::fmt::Write as _;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::html::{self, enc, esc};
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
    let mut body = String::from("<h1>Dead letters</h1>");
    if let (Some(done), Some(queue), Some(acted)) = (query.done.as_deref(), query.queue.as_deref(), query.acted) {
        let verb = if done == "purge" { "purged" } else { "replayed" };
        let _ = write!(body, r#"<p class="notice ok" role="status">{acted} letters of {} {verb}.</p>"#, esc(queue));
    }
    let mut any = false;
    for queue in &state.job_queues {
        let summary = match dead_letters::summarise(state.transport.as_ref(), queue, SUMMARY_LIMIT).await {
            Ok(summary) => summary,
            Err(err) => {
                let _ = write!(
                    body,
                    r#"<h2>{}</h2><p class="notice error">not read: {}</p>"#,
                    esc(queue),
                    esc(&err.to_string())
                );
                continue;
            }
        };
        if summary.total == 0 {
            continue;
        }
        any = true;
        let _ = write!(
            body,
            r#"<section class="dead-letters" data-queue="{q}"><h2>{q}: {} letters</h2><table><thead><tr><th>Reason</th><th class="n">Letters</th><th></th></tr></thead><tbody>"#,
            summary.total,
            q = esc(queue)
        );
        for (reason, count) in &summary.by_reason {
            let _ = write!(
                body,
                r#"<tr><td>{}</td><td class="n">{count}</td><td>{} {}</td></tr>"#,
                esc(reason),
                settle_button(&viewer, queue, Some(reason), "replay", "Replay"),
                settle_button(&viewer, queue, Some(reason), "purge", "Purge"),
            );
        }
        let _ = write!(
            body,
            r#"</tbody></table><p>{} {}</p>"#,
            settle_button(&viewer, queue, None, "replay", "Replay all"),
            settle_button(&viewer, queue, None, "purge", "Purge all"),
        );
        if !summary.samples.is_empty() {
            body.push_str("<details><summary>Samples</summary><ul>");
            for sample in &summary.samples {
                let _ = write!(body, "<li><b>{}</b> <code>{}</code></li>", esc(&sample.reason), esc(&sample.body));
            }
            body.push_str("</ul></details>");
        }
        body.push_str("</section>");
    }
    if !any {
        body.push_str(r#"<p class="empty">No dead letters in any queue.</p>"#);
    }
    html::page(Some(&viewer), "Dead letters", &body)
}

fn settle_button(viewer: &Viewer, queue: &str, reason: Option<&str>, action: &str, label: &str) -> String {
    let reason_field = reason
        .map(|reason| format!(r#"<input type="hidden" name="reason" value="{}">"#, esc(reason)))
        .unwrap_or_default();
    let what = reason.map_or_else(
        || format!("every dead letter of {queue}"),
        |reason| format!("the dead letters of {queue} ({reason})"),
    );
    let class = if action == "purge" { "danger" } else { "" };
    format!(
        r#"<form method="post" action="/ui/dead-letters" class="inline" data-confirm="{}"><input type="hidden" name="csrf" value="{}"><input type="hidden" name="queue" value="{}"><input type="hidden" name="action" value="{action}">{reason_field}<button type="submit" class="{class}">{label}</button></form>"#,
        esc(&format!("{label}: {what}?")),
        esc(viewer.csrf()),
        esc(queue),
    )
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
