//! Upload-and-run jobs (seed 004): a client uploads files including `run.sh` for a named
//! service; a script host runs it in a sandbox; the outputs come back as a ZIP.
//!
//! An upload streams into the blob store ([`files`]) under the service's limits ([`api`],
//! [`names`]) and becomes a `run_script` job on the `@scripts` queue, in the caller's room,
//! recording the user and the service. Script hosts claim those jobs under the service's
//! quotas ([`quota`], [`host`]) and run them in their [`workspace`] with the lifecycle's
//! executor ([`run_script`], [`sandbox`], [`archive`]): the same events, leases, heartbeats,
//! cancellation, retries and shutdown requeue as every job.

pub mod api;
pub mod archive;
pub mod files;
pub mod host_api;
pub mod local_host;
pub mod names;
pub mod quota;
pub mod remote_host;
pub mod run_script;
pub mod sandbox;
pub mod settings;
pub mod workspace;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use files::{BlobStore, LocalFiles};
pub use local_host::{HostParts, ScriptHost};
pub use quota::Quotas;
pub use run_script::RunScript;
pub use workspace::Workspace;

use actix_web::web;

use crate::http::{read, Access, Route, Surface, READ, READ_PUT, WRITE};
use crate::ops::OperationRegistry;
pub use settings::{ServiceSettings, UploadSettings};

/// Everything the upload endpoints and script hosts share.
pub struct Uploads {
    /// The uploaded files and result archives.
    pub blobs: Arc<dyn BlobStore>,
    /// Where this process's script hosts run them.
    pub workspace: Workspace,
    pub services: Arc<BTreeMap<String, ServiceSettings>>,
    pub quotas: Arc<Quotas>,
    /// How long an upload's body may take, and stall.
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Uploads {
    pub fn open(db: sea_orm::DatabaseConnection, settings: &UploadSettings) -> std::io::Result<Self> {
        let services = Arc::new(settings.services.clone());
        Ok(Uploads {
            blobs: Arc::new(LocalFiles::open(&settings.dir)?),
            workspace: Workspace::open(&settings.dir)?,
            quotas: Arc::new(Quotas::new(db, services.clone())),
            services,
            body_timeout: Duration::from_secs(settings.body_timeout_seconds.max(1)),
            idle_timeout: Duration::from_secs(settings.idle_timeout_seconds.max(1)),
        })
    }

    /// The registry with `run_script`, which runs this deployment's services.
    pub fn register(&self, registry: OperationRegistry) -> OperationRegistry {
        registry.with(RunScript::new(self.blobs.clone(), self.workspace.clone(), self.services.clone()))
    }
}

/// A service name: 1-64 characters of `[A-Za-z0-9._-]`.
pub fn check_service_name(name: &str) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(valid) {
        return Err(format!("service name {name:?} must be 1-64 characters of letters, digits, '.', '_' or '-'"));
    }
    Ok(())
}

/// The uploads API: uploads and their results and files, and the protocol of remote script
/// hosts (claim a run, fetch its files, send back its result).
pub const ROUTES: &[Route] = &[
    Route {
        path: "/uploads",
        allow: WRITE,
        access: Access::Member,
        handlers: |r| r.route(web::post().to(api::upload)),
    },
    Route {
        path: "/jobs/{id}/result",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(api::result)),
    },
    Route {
        path: "/jobs/{id}/files/{path:.*}",
        allow: READ,
        access: Access::Member,
        handlers: |r| r.route(read().to(api::file)),
    },
    Route {
        path: "/scripts/claim",
        allow: WRITE,
        access: Access::Worker,
        handlers: |r| r.route(web::post().to(host_api::claim)),
    },
    Route {
        path: "/tasks/{id}/files/{path:.*}",
        allow: READ,
        access: Access::Worker,
        handlers: |r| r.route(read().to(host_api::task_file)),
    },
    Route {
        path: "/tasks/{id}/result",
        allow: READ_PUT,
        access: Access::Worker,
        handlers: |r| r.route(web::put().to(host_api::put_result)).route(read().to(host_api::result_progress)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(api::upload, api::result, api::file, host_api::claim, host_api::task_file, host_api::put_result, host_api::result_progress),
    tags((name = "uploads", description = "Upload files with run.sh for a service; download the ZIP of what it made"))
)]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
