//! Operator endpoints (admins only): the dead letters of a queue (summary, replay, purge)
//! and the metrics in Prometheus text. The queues themselves are `flow`'s.

mod dead_letters;
pub mod metrics;

use actix_web::web;

use crate::http::{read, Access, Route, Surface, READ, WRITE};

pub use dead_letters::SummaryQuery;

pub const ROUTES: &[Route] = &[
    Route { path: "/metrics", allow: READ, access: Access::Admin, handlers: |r| r.route(read().to(metrics::metrics)) },
    Route {
        path: "/admin/dead-letters",
        allow: READ,
        access: Access::Admin,
        handlers: |r| r.route(read().to(dead_letters::summary)),
    },
    Route {
        path: "/admin/dead-letters/replay",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(dead_letters::replay)),
    },
    Route {
        path: "/admin/dead-letters/purge",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(dead_letters::purge)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(dead_letters::summary, dead_letters::replay, dead_letters::purge, metrics::metrics),
    tags(
        (name = "admin", description = "Dead letters and tokens: admins only"),
        (name = "operations", description = "Metrics in Prometheus text: admins only"),
    )
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
