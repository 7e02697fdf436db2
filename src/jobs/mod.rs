//! The jobs API: submit (one or a batch), read, list, cancel and retry jobs; their children
//! and events; and the event streams of a job and of a room.

mod control;
mod read;
mod rules;
pub mod settings;
pub mod stream;
mod submit;
mod times;

use actix_web::web;
use utoipa::OpenApi;

use crate::http::{read, Access, Route, Surface, READ, READ_WRITE, WRITE};

pub use read::{find, EventsQuery, ListQuery};
pub use rules::{
    admit_type, check_idempotency_key, idempotency_header, parse_submission, validate_submission, Submissions,
    SubmitRequest,
};

pub const ROUTES: &[Route] = &[
    Route {
        path: "/jobs",
        allow: READ_WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(submit::submit)).route(read().to(read::list)),
    },
    Route {
        path: "/jobs:batch",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(submit::submit_batch)),
    },
    Route { path: "/jobs/{id}", allow: READ, access: Access::Member, handlers: |r| r.route(read().to(read::get)) },
    Route {
        path: "/jobs/{id}/cancel",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(control::cancel)),
    },
    Route {
        path: "/jobs/{id}/retry",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(control::retry)),
    },
    Route {
        path: "/jobs/{id}/children",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(read::children)),
    },
    Route {
        path: "/jobs/{id}/dependencies",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(read::dependencies)),
    },
    Route {
        path: "/jobs/{id}/events",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(read::events)),
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
        submit::submit,
        submit::submit_batch,
        read::list,
        read::get,
        control::cancel,
        control::retry,
        read::children,
        read::dependencies,
        read::events,
        stream::job_events,
        stream::room_events,
    ),
    tags((name = "jobs", description = "Submit, read, list, cancel and retry jobs; their children, dependencies and events"))
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as OpenApi>::openapi };
