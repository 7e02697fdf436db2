//! The HTTP API: routes, shared state, and the error mapping. Handlers live by resource.

mod admin;
mod error;
mod extract;
mod health;
mod jobs;

use std::sync::Arc;

use actix_web::{web, HttpResponse};

pub use error::{ApiError, Code};

use crate::dispatch::Dispatcher;
use crate::ops::OperationRegistry;
use crate::store::JobStore;
use crate::transport::Transport;

/// What every handler can reach.
pub struct AppState {
    pub store: Arc<dyn JobStore>,
    pub transport: Arc<dyn Transport>,
    pub dispatcher: Dispatcher,
    pub registry: Arc<OperationRegistry>,
    pub max_page_size: u64,
}

/// Registers every route and extractor setting.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize) {
    cfg.app_data(extract::json_config(max_body_bytes))
        .app_data(web::PayloadConfig::default().limit(max_body_bytes))
        .app_data(extract::query_config())
        .app_data(extract::path_config())
        .service(health::healthz)
        .service(health::readyz)
        .service(resource("/jobs").route(web::post().to(jobs::submit)).route(web::get().to(jobs::list)))
        .service(resource("/jobs:batch").route(web::post().to(jobs::submit_batch)))
        .service(resource("/jobs/{id}").route(web::get().to(jobs::get)))
        .service(resource("/jobs/{id}/cancel").route(web::post().to(jobs::cancel)))
        .service(resource("/jobs/{id}/retry").route(web::post().to(jobs::retry)))
        .service(resource("/jobs/{id}/children").route(web::get().to(jobs::children)))
        .service(resource("/admin/dead-letters").route(web::get().to(admin::summary)))
        .service(resource("/admin/dead-letters/replay").route(web::post().to(admin::replay)))
        .service(resource("/admin/dead-letters/purge").route(web::post().to(admin::purge)))
        .service(resource("/jobs/{id}/events").route(web::get().to(jobs::events)));
}

/// A resource that answers 405 problem+json to methods it has no route for.
fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// The answer for paths no route matches.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(Code::NotFound, "no endpoint at this path"))
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(Code::MethodNotAllowed, "this endpoint does not take this method"))
}
