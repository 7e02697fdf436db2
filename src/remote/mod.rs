//! Registered job types and remote workers: operations whose code lives outside the server.
//!
//! A worker anywhere (no broker, no database, only HTTPS and a `worker` token) registers a
//! **type** `room:category:name` with a JSON Schema ([`types`]), registers itself with the
//! types it serves ([`workers`]), claims **tasks** (jobs of those types) oldest first with a
//! compare-and-set, holding the request with `Prefer: wait=N` until one arrives ([`tasks`]),
//! and reports progress and the outcome. Tasks are ordinary job rows on the `@remote`
//! queue: the same events, leases, retries, cancellation, rooms and reaper as every job.
//! The [`sweeper`] marks silent workers gone and soft-deletes types nobody serves.

pub mod api;
pub mod entity;
pub mod names;
pub mod schema;
pub mod settings;
pub mod sweeper;
pub mod tasks;
pub mod tasks_api;
pub mod types;
pub mod workers;

pub use names::TypeName;
pub use types::{Resolved, TypeBook};
pub use workers::WorkerBook;

use std::sync::Arc;
use std::time::Duration;

use actix_web::web;

use crate::http::{read, Access, Route, Surface, DELETE, READ_PATCH, READ_WRITE, WRITE};
use crate::live::TaskWaiters;
pub use settings::RemoteSettings;

/// Everything the remote-worker endpoints and submissions of registered types use.
pub struct Remote {
    pub types: TypeBook,
    pub workers: WorkerBook,
    /// Claimers waiting for tasks, by type.
    pub claimers: Arc<TaskWaiters>,
    /// How long a claim leases its task.
    pub lease: Duration,
    /// Whether a submission to a type with no live worker queues when it does not say.
    pub queue_without_worker: bool,
    /// The upload services a script host may register for (`uploads.services`).
    pub services: std::collections::BTreeSet<String>,
}

impl Remote {
    /// `services`: the upload services a script host may name when it registers.
    pub fn new(
        db: sea_orm::DatabaseConnection,
        gate: crate::store::WriteGate,
        settings: &RemoteSettings,
        claimers: Arc<TaskWaiters>,
        services: std::collections::BTreeSet<String>,
    ) -> Self {
        Remote {
            types: TypeBook::new(db.clone(), settings.categories.iter().cloned().collect()),
            workers: WorkerBook::new(db, gate, Duration::from_secs(settings.worker_ttl_seconds.max(1))),
            claimers,
            lease: Duration::from_secs(settings.lease_seconds.max(1)),
            queue_without_worker: settings.queue_without_worker,
            services,
        }
    }
}

/// The remote API: registered types, workers, and the tasks they claim and report.
pub const ROUTES: &[Route] = &[
    Route {
        path: "/types",
        allow: READ_WRITE,
        access: Access::Any,
        handlers: |r| r.route(web::post().to(api::register_type)).route(read().to(api::list_types)),
    },
    Route {
        path: "/workers",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(api::register_worker)),
    },
    Route {
        path: "/workers/{id}",
        allow: DELETE,
        access: Access::Worker,
        handlers: |r| r.route(web::delete().to(api::deregister_worker)),
    },
    Route {
        path: "/workers/{id}/heartbeat",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(api::heartbeat)),
    },
    Route {
        path: "/tasks/claim",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(tasks_api::claim)),
    },
    Route {
        path: "/tasks:report",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(tasks_api::report_many)),
    },
    Route {
        path: "/tasks/{id}",
        allow: READ_PATCH,
        access: Access::WorkerWrites,
        handlers: |r| r.route(read().to(tasks_api::get)).route(web::patch().to(tasks_api::report)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        api::list_types,
        api::register_type,
        api::register_worker,
        api::heartbeat,
        api::deregister_worker,
        tasks_api::claim,
        tasks_api::get,
        tasks_api::report,
        tasks_api::report_many,
    ),
    tags((name = "remote", description = "Registered job types, and remote workers that claim and report their tasks over HTTP"))
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
