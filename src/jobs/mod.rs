//! The jobs API: submit (one or a batch), read, list, cancel and retry jobs; their children
//! and events; and the event streams of a job and of a room.

mod handlers;
pub mod stream;

use actix_web::web;
use utoipa::OpenApi;

use crate::http::{read, Access, Route, Surface, READ, READ_WRITE, WRITE};

pub use handlers::{
    check_idempotency_key, find, idempotency_header, parse_submission, EventsQuery, ListQuery, Submissions,
};

pub const ROUTES: &[Route] = &[
    Route {
        path: "/jobs",
        allow: READ_WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(handlers::submit)).route(read().to(handlers::list)),
    },
    Route {
        path: "/jobs:batch",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(handlers::submit_batch)),
    },
    Route { path: "/jobs/{id}", allow: READ, access: Access::Member, handlers: |r| r.route(read().to(handlers::get)) },
    Route {
        path: "/jobs/{id}/cancel",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(handlers::cancel)),
    },
    Route {
        path: "/jobs/{id}/retry",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(handlers::retry)),
    },
    Route {
        path: "/jobs/{id}/children",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(handlers::children)),
    },
    Route {
        path: "/jobs/{id}/events",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(handlers::events)),
    },
    Route {
        path: "/jobs/{id}/events/stream",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(stream::job_events)),
    },
    Route {
        path: "/rooms/{room}/events/stream",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(stream::room_events)),
    },
];

#[derive(OpenApi)]
#[openapi(
    paths(
        handlers::submit,
        handlers::submit_batch,
        handlers::list,
        handlers::get,
        handlers::cancel,
        handlers::retry,
        handlers::children,
        handlers::events,
        stream::job_events,
        stream::room_events,
    ),
    tags((name = "jobs", description = "Submit, read, list, cancel and retry jobs; their children and events"))
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as OpenApi>::openapi };
