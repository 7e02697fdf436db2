//! The HTTP server's table: every capability's [`Surface`] merged into one router and one
//! OpenAPI document, with the server's own routes (health, the document, its docs page).
//!
//! A capability's endpoints are its own (`jobs::ROUTES`, `remote::ROUTES`, …); this module
//! only lists the capabilities. Shared HTTP types live in [`crate::http`].

#[doc(hidden)]
pub mod fuzzing;
mod health;
pub mod openapi;

use std::sync::Arc;

use actix_web::{middleware, web, HttpResponse};

use crate::auth;
use crate::http::{self, read, Access, ApiError, Code, Route, Surface, READ};

/// The server's own routes: health, the OpenAPI document and its docs page.
const SERVER_ROUTES: &[Route] = &[
    Route { path: "/healthz", allow: READ, access: Access::Public, handlers: |r| r.route(read().to(health::healthz)) },
    Route { path: "/readyz", allow: READ, access: Access::Public, handlers: |r| r.route(read().to(health::readyz)) },
    Route {
        path: "/openapi.json",
        allow: READ,
        access: Access::Public,
        handlers: |r| r.route(read().to(openapi::spec)),
    },
    Route { path: "/docs", allow: READ, access: Access::Public, handlers: |r| r.route(read().to(openapi::docs_root)) },
    Route {
        path: "/docs/{file:.*}",
        allow: READ,
        access: Access::Public,
        handlers: |r| r.route(read().to(openapi::docs)),
    },
];

/// Every surface the server serves: its own, then each capability's.
pub const SURFACES: &[Surface] = &[
    Surface { routes: SERVER_ROUTES, document: openapi::server_document },
    crate::jobs::SURFACE,
    crate::uploads::SURFACE,
    crate::inference::SURFACE,
    crate::remote::SURFACE,
    crate::admin::SURFACE,
    crate::flow::SURFACE,
    crate::schedules::SURFACE,
    crate::auth::SURFACE,
];

/// Every route of every surface: the whole router.
pub fn routes() -> impl Iterator<Item = &'static Route> {
    SURFACES.iter().flat_map(|surface| surface.routes)
}

/// Registers every route and the extractor settings. Every resource answers the methods it
/// does not take with 405 and `Allow`; every GET also answers HEAD; every route is behind
/// the guard its `access` names.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize, document: Arc<String>) {
    cfg.app_data(web::Data::new(document))
        .app_data(http::json_config(max_body_bytes))
        .app_data(web::PayloadConfig::default().limit(max_body_bytes))
        .app_data(http::query_config())
        .app_data(http::path_config());
    for route in routes() {
        let access = route.access;
        cfg.service(route.resource().wrap(middleware::from_fn(move |req, next| auth::authorize(access, req, next))));
    }
}

/// The answer for paths no route matches.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(Code::NotFound, "no endpoint at this path"))
}
