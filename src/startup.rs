//! Building and running an instance: `main` and the tests start the app the same way.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tracing::info;

use crate::actors::QueueConsumer;
use crate::api::{self, AppState};
use crate::config::{Settings, TransportKind};
use crate::dispatch::Dispatcher;
use crate::ops::OperationRegistry;
use crate::store::{self, JobStore, SeaStore};
use crate::transport::{InProcessTransport, Transport};
use crate::worker::{Executor, ExecutorConfig};

type StoreWrapper = Box<dyn FnOnce(Arc<dyn JobStore>) -> Arc<dyn JobStore>>;

/// A running instance: the HTTP server, and the queue consumers when workers are enabled.
pub struct Application {
    port: u16,
    server: Server,
    store: Arc<dyn JobStore>,
    db: DatabaseConnection,
    transport: Arc<dyn Transport>,
    consumers: Vec<Addr<QueueConsumer>>,
}

/// Options beyond the settings: what tests and embedders swap in.
pub struct ApplicationBuilder {
    settings: Settings,
    registry: OperationRegistry,
    wrap_store: Option<StoreWrapper>,
    transport: Option<Arc<dyn Transport>>,
}

impl ApplicationBuilder {
    /// Operations offered instead of the built-in ones.
    pub fn registry(mut self, registry: OperationRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Wraps the store, for example to inject faults in tests.
    pub fn wrap_store(
        mut self,
        wrap: impl FnOnce(Arc<dyn JobStore>) -> Arc<dyn JobStore> + 'static,
    ) -> Self {
        self.wrap_store = Some(Box::new(wrap));
        self
    }

    /// A transport shared with something else (for example a test that publishes directly).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Connects, migrates if configured, starts consumers, re-dispatches QUEUED jobs and
    /// binds the listener. Must run inside an actix `System`.
    pub async fn build(self) -> anyhow::Result<Application> {
        let settings = self.settings;
        let db = store::connect(&settings.store).await?;
        if settings.store.migrate_on_start {
            store::migrate(&db).await?;
        }
        let mut store: Arc<dyn JobStore> = Arc::new(SeaStore::new(db.clone()));
        if let Some(wrap) = self.wrap_store {
            store = wrap(store);
        }
        let transport = self
            .transport
            .unwrap_or_else(|| match settings.transport.kind {
                TransportKind::InProcess => Arc::new(InProcessTransport::new()),
            });
        let registry = Arc::new(self.registry);
        let dispatcher = Dispatcher::new(store.clone(), transport.clone());
        let consumers = match settings.worker.enabled {
            true => {
                start_workers(&settings, &store, &transport, &registry, &db, &dispatcher).await?
            }
            false => Vec::new(),
        };
        let state = web::Data::new(AppState {
            store: store.clone(),
            transport: transport.clone(),
            dispatcher,
            registry,
            max_page_size: settings.server.max_page_size,
        });
        let listener = TcpListener::bind(&settings.server.bind)
            .with_context(|| format!("cannot listen on {}", settings.server.bind))?;
        let port = listener.local_addr()?.port();
        let max_body = settings.server.max_body_bytes;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .configure(|cfg| api::configure(cfg, max_body))
                .default_service(web::to(api::not_found))
        })
        .workers(settings.server.http_workers.max(1))
        .shutdown_timeout(settings.server.shutdown_timeout_seconds)
        .listen(listener)?
        .run();
        info!(port, store = ?store::Backend::of_url(&settings.store.url)?, transport = transport.kind(), "serving");
        Ok(Application {
            port,
            server,
            store,
            db,
            transport,
            consumers,
        })
    }
}

async fn start_workers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
    dispatcher: &Dispatcher,
) -> anyhow::Result<Vec<Addr<QueueConsumer>>> {
    let config = ExecutorConfig {
        owner: settings.worker_id(),
        lease: Duration::from_secs(settings.worker.lease_seconds),
    };
    let executor = Arc::new(Executor::new(
        store.clone(),
        registry.clone(),
        db.clone(),
        config,
    ));
    let mut consumers = Vec::new();
    for (queue, queue_settings) in &settings.queues {
        let consumer = QueueConsumer::new(
            queue.clone(),
            queue_settings.concurrency,
            transport.clone(),
            executor.clone(),
        );
        consumers.push(consumer.start_supervised());
    }
    for queue in settings.queues.keys() {
        dispatcher
            .sweep(queue)
            .await
            .context("re-dispatching queued jobs")?;
    }
    Ok(consumers)
}

impl Application {
    pub fn builder(settings: Settings) -> ApplicationBuilder {
        ApplicationBuilder {
            settings,
            registry: OperationRegistry::builtin(),
            wrap_store: None,
            transport: None,
        }
    }

    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        Self::builder(settings).build().await
    }

    /// The port the API listens on (useful when bound to port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    /// The database pool the store uses.
    pub fn db(&self) -> DatabaseConnection {
        self.db.clone()
    }

    pub fn transport(&self) -> Arc<dyn Transport> {
        self.transport.clone()
    }

    /// How many queue consumers this instance runs.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// Serves until the server is stopped (SIGTERM or SIGINT).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}
