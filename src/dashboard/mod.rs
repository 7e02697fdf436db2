//! The web dashboard at `/ui`, served from the binary (its script and styles are compiled
//! in: no CDN, works offline): queues at a glance with their last hour drawn, jobs filtered and paged by keyset, a job
//! with its live progress and timeline, cancel and retry one by one or everything a filter
//! matches, and dead letters (admins). It signs in with the API's tokens and shows a
//! token's rooms only; a read-only token sees no buttons.
//!
//! - [`session`]: the login cookie, CSRF, and the guard around every page.
//! - [`overview`], [`jobs`], [`job`], [`schedules`], [`dead_letters`], [`login`]: the pages.
//! - [`charts`]: the queues' charts, SVG drawn from the per-minute rollup.
//! - [`html`]: escaping and the layout.

// A refusal is the page that says so: an `HttpResponse` in `Err`, on paths that are rare.
#![allow(clippy::result_large_err)]

pub mod charts;
pub mod dead_letters;
pub mod html;
pub mod job;
pub mod jobs;
pub mod login;
pub mod overview;
pub mod schedules;
pub mod session;

use actix_web::http::header;
use actix_web::{middleware, web, HttpResponse};

/// Most bytes of a dashboard form (a login, a filter).
const FORM_LIMIT: usize = 64 * 1024;

/// The compiled-in assets: name, content type, bytes.
const ASSETS: [(&str, &str, &str); 2] = [
    ("dashboard.css", "text/css; charset=utf-8", include_str!("assets/dashboard.css")),
    ("dashboard.js", "text/javascript; charset=utf-8", include_str!("assets/dashboard.js")),
];

/// Registers `/ui` and everything under it.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/ui/", web::get().to(|| async { html::see_other("/ui") })).service(
        web::scope("/ui")
            .app_data(web::FormConfig::default().limit(FORM_LIMIT))
            .wrap(middleware::from_fn(session::guard))
            .route("", web::get().to(overview::page))
            .route("/queues/{name}", web::post().to(overview::act))
            .route("/login", web::get().to(login::page))
            .route("/login", web::post().to(login::submit))
            .route("/logout", web::post().to(login::logout))
            .route("/jobs", web::get().to(jobs::list))
            .route("/bulk", web::get().to(jobs::confirm))
            .route("/bulk", web::post().to(jobs::apply))
            .route("/jobs/{id}", web::get().to(job::page))
            .route("/jobs/{id}/cancel", web::post().to(job::cancel))
            .route("/jobs/{id}/retry", web::post().to(job::retry))
            .route("/jobs/{id}/stream", web::get().to(crate::jobs::stream::job_events))
            .route("/schedules", web::get().to(schedules::page))
            .route("/schedules/{id}", web::post().to(schedules::act))
            .route("/dead-letters", web::get().to(dead_letters::page))
            .route("/dead-letters", web::post().to(dead_letters::settle))
            .route("/assets/{name}", web::get().to(asset))
            .default_service(web::to(not_found)),
    );
}

async fn asset(name: web::Path<String>) -> HttpResponse {
    match ASSETS.iter().find(|(asset, _, _)| *asset == name.as_str()) {
        Some((_, content_type, body)) => HttpResponse::Ok()
            .content_type(*content_type)
            .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .body(*body),
        None => HttpResponse::NotFound().finish(),
    }
}

async fn not_found(viewer: Option<session::Viewer>) -> HttpResponse {
    html::problem(viewer.as_ref(), actix_web::http::StatusCode::NOT_FOUND, "Not found", "no such page")
}
