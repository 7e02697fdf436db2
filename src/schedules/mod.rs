//! Schedules: recurring submissions (`/schedules`: `api`, its bodies in `bodies`), fired by a scheduler in every process
//! with no leader: each tick is decided once in the store and its job keyed by (schedule,
//! tick time). Cron expressions in a time zone or periods (`spec`), the table and its
//! compare-and-sets (`book`), the decisions and firing (`fire`), the pass (`scheduler`),
//! the schedules of `config.toml` (`declared`).

mod api;
mod bodies;
mod book;
pub mod declared;
pub mod entity;
mod fire;
pub mod scheduler;
mod service;
pub mod settings;
pub mod spec;

use actix_web::web;

use crate::http::{read, Access, Route, Surface, READ, READ_PATCH_DELETE, READ_WRITE, WRITE};

pub use fire::Fired;
pub use scheduler::Scheduler;
pub use service::{tick_key, Parts, Schedules};

pub const ROUTES: &[Route] = &[
    Route {
        path: "/schedules",
        allow: READ_WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(api::create)).route(read().to(api::list)),
    },
    Route {
        path: "/schedules/{id}",
        allow: READ_PATCH_DELETE,
        access: Access::Member,
        handlers: |r| {
            r.route(read().to(api::get)).route(web::patch().to(api::update)).route(web::delete().to(api::delete))
        },
    },
    Route {
        path: "/schedules/{id}/run",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(api::run_now)),
    },
    Route {
        path: "/schedules/{id}/ticks",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(api::ticks)),
    },
    Route {
        path: "/schedules/{id}/jobs",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(api::jobs)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(api::create, api::list, api::get, api::update, api::delete, api::run_now, api::ticks, api::jobs),
    tags((name = "schedules", description = "Recurring submissions: cron or a period, in a time zone"))
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
