//! The HTTP server: every surface, the dashboard and the middleware around them, and the
//! first admin token of a new store.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tracing::info;

use crate::api;
use crate::auth::{self, Authenticator, FirstToken};
use crate::config::Settings;
use crate::http::{self, AppState};

/// Stores the deployment's bootstrap token, or on a store with no token makes an admin
/// token and prints it, once, on standard output (never to the log: it is not stored in
/// clear anywhere).
pub(super) async fn first_admin_token(db: &DatabaseConnection, settings: &Settings) -> anyhow::Result<()> {
    let first =
        auth::ensure_admin(db, settings.auth.bootstrap_token.as_ref()).await.context("the first admin token")?;
    match first {
        FirstToken::Existing => {}
        FirstToken::Registered => info!("stored the bootstrap admin token"),
        FirstToken::Created(token) => {
            println!("yardmaster: this store had no API token; here is its admin token, shown this once:");
            println!();
            println!("    {}", token.expose());
            println!();
            println!("Send it as `Authorization: Bearer TOKEN`, log in with it on the dashboard (/ui), or give");
            println!("it to the command line (YARDMASTER_TOKEN); make more with `yardmaster token create`.");
            info!("made the first admin token and printed it on standard output");
        }
    }
    Ok(())
}

/// The state of the capabilities beside [`AppState`], each its own `web::Data`.
pub(super) struct Capabilities {
    pub(super) auth: web::Data<Authenticator>,
    pub(super) jobs: web::Data<crate::jobs::settings::JobsSettings>,
    pub(super) remote: web::Data<crate::remote::Remote>,
    pub(super) uploads: web::Data<crate::uploads::Uploads>,
    pub(super) schedules: web::Data<crate::schedules::Schedules>,
    pub(super) pauses: web::Data<crate::flow::QueuePauses>,
}

pub(super) fn serve_api(settings: &Settings, state: AppState, parts: Capabilities) -> anyhow::Result<(u16, Server)> {
    let state = web::Data::new(state);
    let listener = TcpListener::bind(&settings.server.bind)
        .with_context(|| format!("cannot listen on {}", settings.server.bind))?;
    let port = listener.local_addr()?.port();
    let server_settings = settings.server.clone();
    let max_body = server_settings.max_body_bytes;
    let body_timeout = Duration::from_secs(server_settings.body_timeout_seconds);
    let upload_timeout = parts.uploads.body_timeout;
    let clients = http::ClientLimit::new(server_settings.max_connections_per_client);
    let document = api::openapi::document(&api::openapi::Deployment {
        max_page_size: server_settings.max_page_size,
        operations: state.registry.names().collect(),
        job_queues: state.job_queues.iter().map(String::as_str).collect(),
        categories: settings.remote.categories.iter().map(String::as_str).collect(),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(parts.auth.clone())
            .app_data(parts.jobs.clone())
            .app_data(parts.remote.clone())
            .app_data(parts.uploads.clone())
            .app_data(parts.schedules.clone())
            .app_data(parts.pauses.clone())
            .configure(|cfg| api::configure(cfg, max_body, document.clone()))
            .configure(crate::dashboard::configure)
            .default_service(web::to(api::not_found))
            .wrap(actix_web::middleware::from_fn(http::fail_fast))
            .wrap(actix_web::middleware::from_fn(crate::telemetry::http::observe))
            .wrap(actix_web::middleware::from_fn(crate::telemetry::requests::request_id_header))
            .wrap(tracing_actix_web::TracingLogger::<crate::telemetry::requests::RequestSpan>::new())
            // Outermost, so it holds an unread body until the response is written.
            .wrap(http::BodyGuard::new(body_timeout).longer_for("/uploads", upload_timeout))
    })
    .workers(server_settings.http_workers.max(1))
    .max_connections(server_settings.max_connections)
    .keep_alive(http::KEEP_ALIVE)
    .on_connect(move |connection, data| clients.on_connect(connection, data))
    // Long requests drain within the same budget as jobs; the guard owns the signals.
    .shutdown_timeout(settings.worker.grace_seconds)
    .disable_signals()
    .listen(listener)?
    .run();
    Ok((port, server))
}
