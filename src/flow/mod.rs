//! Flow: steering work once it is submitted. Queues an admin pauses and resumes
//! (`/admin/queues/{name}/pause|resume`, the stored state and each process's view of it in
//! `pauses`), and the queues' list with their state and figures (`queues`). Priorities
//! live in the lifecycle itself (the job's `priority`, the transport's levels, the
//! dispatch sweep's aging).

pub mod entity;
pub mod pauses;
mod queues;
pub mod rollup;

use actix_web::web;

use crate::http::{read, Access, Route, Surface, READ, WRITE};

pub use pauses::{Changed, Pause, Paused, QueuePauses};
pub use queues::{QueueState, QueueView};
pub use rollup::{Rollup, RollupWatch};

pub const ROUTES: &[Route] = &[
    Route { path: "/admin/queues", allow: READ, access: Access::Admin, handlers: |r| r.route(read().to(queues::list)) },
    Route {
        path: "/admin/queues/{name}/pause",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(queues::pause)),
    },
    Route {
        path: "/admin/queues/{name}/resume",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(queues::resume)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(paths(queues::list, queues::pause, queues::resume))]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
