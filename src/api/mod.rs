//! The HTTP API: routes, shared state, and the error mapping. Handlers live by resource.

mod admin;
mod body_guard;
mod client_limit;
mod error;
mod extract;
#[doc(hidden)]
pub mod fuzzing;
mod health;
pub(crate) mod jobs;
mod outage;

use std::sync::Arc;

use actix_web::{guard, web, HttpResponse};

pub use body_guard::BodyGuard;
pub use client_limit::ClientLimit;
pub use error::{ApiError, Code};
pub use outage::{fail_fast, Outage};

use crate::dispatch::Dispatcher;
use crate::ops::OperationRegistry;
use crate::store::JobStore;
use crate::transport::Transport;

/// What every handler can reach.
pub struct AppState {
    pub store: Arc<dyn JobStore>,
    /// The database pool, for the tables of capabilities beside the job store (stored sets).
    pub db: sea_orm::DatabaseConnection,
    pub transport: Arc<dyn Transport>,
    pub dispatcher: Dispatcher,
    pub registry: Arc<OperationRegistry>,
    pub max_page_size: u64,
    /// The queues a submission may name: the deployment's job queues.
    pub job_queues: std::collections::BTreeSet<String>,
    /// Whether the store was found unreachable a moment ago (answer 503 at once).
    pub outage: Outage,
}

/// Registers every route and extractor setting. Every resource answers the methods it
/// does not take with 405 and `Allow`; every GET also answers HEAD.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize) {
    cfg.app_data(extract::json_config(max_body_bytes))
        .app_data(web::PayloadConfig::default().limit(max_body_bytes))
        .app_data(extract::query_config())
        .app_data(extract::path_config())
        .service(resource("/healthz", READ).route(read().to(health::healthz)))
        .service(resource("/readyz", READ).route(read().to(health::readyz)))
        .service(resource("/jobs", READ_WRITE).route(web::post().to(jobs::submit)).route(read().to(jobs::list)))
        .service(resource("/jobs:batch", WRITE).route(web::post().to(jobs::submit_batch)))
        .service(resource("/jobs/{id}", READ).route(read().to(jobs::get)))
        .service(resource("/jobs/{id}/cancel", WRITE).route(web::post().to(jobs::cancel)))
        .service(resource("/jobs/{id}/retry", WRITE).route(web::post().to(jobs::retry)))
        .service(resource("/jobs/{id}/children", READ).route(read().to(jobs::children)))
        .service(resource("/jobs/{id}/events", READ).route(read().to(jobs::events)))
        .service(resource("/embeddings/{set}", READ).route(read().to(crate::inference::api::get)))
        .service(resource("/admin/dead-letters", READ).route(read().to(admin::summary)))
        .service(resource("/admin/dead-letters/replay", WRITE).route(web::post().to(admin::replay)))
        .service(resource("/admin/dead-letters/purge", WRITE).route(web::post().to(admin::purge)));
}

/// The `Allow` values of the resources.
const READ: &str = "GET, HEAD";
const WRITE: &str = "POST";
const READ_WRITE: &str = "GET, HEAD, POST";

/// A route for GET and HEAD (actix-web sends a HEAD answer's headers without its body).
fn read() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// A resource that answers 405 problem+json with `Allow: allow` to methods it has no
/// route for.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path)
        .default_service(web::to(move || async move { Err::<HttpResponse, _>(ApiError::method_not_allowed(allow)) }))
}

/// The answer for paths no route matches.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(Code::NotFound, "no endpoint at this path"))
}
