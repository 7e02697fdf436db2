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
pub mod openapi;
mod outage;
mod prefer;
pub mod stream;
mod tokens;

use std::sync::Arc;

use actix_web::{guard, middleware, web, HttpResponse};

pub use body_guard::{is_body_timeout, BodyGuard};
pub use client_limit::ClientLimit;
pub use error::{ApiError, Code, Problem};
pub use extract::{required_whole_number, room_id, whole_number};
pub use outage::{fail_fast, Outage};
pub use prefer::wait as prefer_wait;

use crate::auth::{self, Access, Authenticator};
use crate::dispatch::Dispatcher;
use crate::ops::OperationRegistry;
use crate::remote;
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
    /// Verifies bearer tokens (cached).
    pub auth: Arc<Authenticator>,
    /// Wakes long-polls and event streams when their job changes.
    pub waiters: Arc<crate::live::JobWaiters>,
    /// The longest `Prefer: wait` honoured (`server.max_wait_seconds`).
    pub max_wait: std::time::Duration,
    /// Registered types and remote workers.
    pub remote: Arc<crate::remote::Remote>,
    /// Uploaded `run.sh` jobs: their files and services.
    pub uploads: Arc<crate::uploads::Uploads>,
    /// Cancelled when the process starts draining (SIGTERM): long-polls answer, event
    /// streams end (their clients resume with `Last-Event-ID`), held claims answer empty.
    pub closing: tokio_util::sync::CancellationToken,
}

/// One resource of the API: its path, the methods it takes, who may call it, and its
/// handlers. [`ROUTES`] is the whole router: `configure` registers exactly these, each
/// behind the guard its `access` names, and the tests walk the same table.
pub struct Route {
    pub path: &'static str,
    /// The methods it takes (its 405's `Allow`).
    pub allow: &'static str,
    pub access: Access,
    handlers: fn(actix_web::Resource) -> actix_web::Resource,
}

pub const ROUTES: &[Route] = &[
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
    Route {
        path: "/jobs",
        allow: READ_WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(jobs::submit)).route(read().to(jobs::list)),
    },
    Route {
        path: "/jobs:batch",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(jobs::submit_batch)),
    },
    Route { path: "/jobs/{id}", allow: READ, access: Access::Member, handlers: |r| r.route(read().to(jobs::get)) },
    Route {
        path: "/jobs/{id}/cancel",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(jobs::cancel)),
    },
    Route {
        path: "/jobs/{id}/retry",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(jobs::retry)),
    },
    Route {
        path: "/jobs/{id}/children",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(jobs::children)),
    },
    Route {
        path: "/jobs/{id}/events",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(jobs::events)),
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
    Route {
        path: "/uploads",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(crate::uploads::api::upload)),
    },
    Route {
        path: "/jobs/{id}/result",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(crate::uploads::api::result)),
    },
    Route {
        path: "/jobs/{id}/files/{path:.*}",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(crate::uploads::api::file)),
    },
    Route {
        path: "/embeddings/{set}",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(crate::inference::api::get)),
    },
    Route {
        path: "/types",
        allow: READ_WRITE,
        access: Access::Any,
        handlers: |r| r.route(web::post().to(remote::register_type)).route(read().to(remote::list_types)),
    },
    Route {
        path: "/workers",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(remote::register_worker)),
    },
    Route {
        path: "/workers/{id}",
        allow: DELETE,
        access: Access::Worker,
        handlers: |r| r.route(web::delete().to(remote::deregister_worker)),
    },
    Route {
        path: "/workers/{id}/heartbeat",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(remote::heartbeat)),
    },
    Route {
        path: "/tasks/claim",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(remote::claim)),
    },
    Route {
        path: "/tasks/{id}",
        allow: PATCH,
        access: Access::Worker,
        handlers: |r| r.route(web::patch().to(remote::report)),
    },
    Route {
        path: "/scripts/claim",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(crate::uploads::hosts::claim)),
    },
    Route {
        path: "/tasks/{id}/files/{path:.*}",
        allow: READ,
        access: Access::Worker,
        handlers: |r| r.route(read().to(crate::uploads::hosts::task_file)),
    },
    Route {
        path: "/tasks/{id}/result",
        allow: READ_PUT,
        access: Access::Worker,
        handlers: |r| {
            r.route(web::put().to(crate::uploads::hosts::put_result))
                .route(read().to(crate::uploads::hosts::result_progress))
        },
    },
    Route {
        path: "/metrics",
        allow: READ,
        access: Access::Admin,
        handlers: |r| r.route(read().to(crate::telemetry::scrape::metrics)),
    },
    Route {
        path: "/admin/dead-letters",
        allow: READ,
        access: Access::Admin,
        handlers: |r| r.route(read().to(admin::summary)),
    },
    Route {
        path: "/admin/dead-letters/replay",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(admin::replay)),
    },
    Route {
        path: "/admin/dead-letters/purge",
        allow: WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(admin::purge)),
    },
    Route {
        path: "/admin/tokens",
        allow: READ_WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(tokens::create)).route(read().to(tokens::list)),
    },
    Route {
        path: "/admin/tokens/{id}",
        allow: DELETE,
        access: Access::Admin,
        handlers: |r| r.route(web::delete().to(tokens::revoke)),
    },
];

/// Registers every route of [`ROUTES`] and the extractor settings. Every resource answers
/// the methods it does not take with 405 and `Allow`; every GET also answers HEAD.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize, document: Arc<String>) {
    cfg.app_data(web::Data::new(document))
        .app_data(extract::json_config(max_body_bytes))
        .app_data(web::PayloadConfig::default().limit(max_body_bytes))
        .app_data(extract::query_config())
        .app_data(extract::path_config());
    for route in ROUTES {
        let access = route.access;
        let resource = (route.handlers)(resource(route.path, route.allow));
        cfg.service(resource.wrap(middleware::from_fn(move |req, next| auth::authorize(access, req, next))));
    }
}

/// The `Allow` values of the resources.
const READ: &str = "GET, HEAD";
const WRITE: &str = "POST";
const READ_WRITE: &str = "GET, HEAD, POST";
const DELETE: &str = "DELETE";
const PATCH: &str = "PATCH";
const READ_PUT: &str = "GET, HEAD, PUT";

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
