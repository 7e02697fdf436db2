//! Building and running an instance: `main` and the tests start the app the same way.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Supervisor};
use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tracing::info;

use crate::actors::{DispatchSweeper, JobMessages, OperationConsumer, OperationMessages, QueueConsumer, Tick};
use crate::api::{self, AppState};
use crate::config::{QueueKind, Settings, TransportKind};
use crate::dispatch::Dispatcher;
use crate::ops::OperationRegistry;
use crate::store::{self, JobStore, SeaStore};
use crate::transport::{AmqpTransport, InProcessTransport, Transport};
use crate::worker::{Executor, ExecutorConfig};

/// Wraps the store, e.g. to inject faults in tests.
pub type StoreWrapper = Box<dyn FnOnce(Arc<dyn JobStore>) -> Arc<dyn JobStore>>;

/// A running instance: the HTTP server (unless worker-only), the queue consumers when
/// workers are enabled, and the dispatch sweeper.
pub struct Application {
    port: Option<u16>,
    server: Option<Server>,
    store: Arc<dyn JobStore>,
    db: DatabaseConnection,
    transport: Arc<dyn Transport>,
    /// Queue consumers, each supervised on this arbiter.
    consumers: Consumers,
    sweeper: Option<Addr<DispatchSweeper>>,
}

/// Options beyond the settings: what tests and embedders swap in.
pub struct ApplicationBuilder {
    settings: Settings,
    registry: OperationRegistry,
    wrap_store: Option<StoreWrapper>,
    transport: Option<Arc<dyn Transport>>,
    api: bool,
}

impl ApplicationBuilder {
    /// Operations offered instead of the built-in ones.
    pub fn registry(mut self, registry: OperationRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Wraps the store, for example to inject faults in tests.
    pub fn wrap_store(mut self, wrap: impl FnOnce(Arc<dyn JobStore>) -> Arc<dyn JobStore> + 'static) -> Self {
        self.wrap_store = Some(Box::new(wrap));
        self
    }

    /// A transport shared with something else (for example a test that publishes directly).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Runs no HTTP server: a worker process.
    pub fn without_api(mut self) -> Self {
        self.api = false;
        self
    }

    /// Connects, migrates if configured, re-dispatches QUEUED jobs, starts consumers and the
    /// sweeper, and binds the listener. Must run inside an actix `System`.
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
        let transport = match self.transport {
            Some(transport) => transport,
            None => build_transport(&settings)?,
        };
        let registry = Arc::new(self.registry);
        let dispatcher = Dispatcher::new(store.clone(), transport.clone());
        let mut sweeper = None;
        if settings.dispatch.enabled {
            let sent = dispatcher.recover(settings.dispatch.batch).await.context("re-dispatching queued jobs")?;
            info!(sent, "start-up dispatch done");
            let actor = DispatchSweeper::new(dispatcher.clone(), &settings.dispatch);
            sweeper = Some(Supervisor::start(move |_| actor));
        }
        let consumers = match settings.worker.enabled {
            true => start_workers(&settings, &store, &transport, &registry, &db),
            false => Consumers::default(),
        };
        let (port, server) = match self.api {
            true => {
                let state = AppState {
                    store: store.clone(),
                    transport: transport.clone(),
                    dispatcher,
                    registry,
                    max_page_size: settings.server.max_page_size,
                };
                let (port, server) = serve_api(&settings, state)?;
                (Some(port), Some(server))
            }
            false => (None, None),
        };
        info!(port, store = ?store::Backend::of_url(&settings.store.url)?, transport = transport.kind(), consumers = consumers.len(), "started");
        Ok(Application { port, server, store, db, transport, consumers, sweeper })
    }
}

fn build_transport(settings: &Settings) -> anyhow::Result<Arc<dyn Transport>> {
    Ok(match settings.transport.kind {
        TransportKind::InProcess => Arc::new(InProcessTransport::new()),
        TransportKind::Amqp => Arc::new(AmqpTransport::new(settings.transport.amqp.clone())?),
    })
}

fn serve_api(settings: &Settings, state: AppState) -> anyhow::Result<(u16, Server)> {
    let state = web::Data::new(state);
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
    Ok((port, server))
}

/// The addresses of the running consumers. A supervisor restarts a stopped actor only
/// while its address is alive, so these are held for the life of the application.
#[derive(Default)]
pub struct Consumers {
    jobs: Vec<Addr<QueueConsumer>>,
    operations: Vec<Addr<OperationConsumer>>,
}

impl Consumers {
    pub fn len(&self) -> usize {
        self.jobs.len() + self.operations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Starts a supervised consumer per configured queue, of the queue's kind.
fn start_workers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
) -> Consumers {
    let config =
        ExecutorConfig { owner: settings.worker_id(), lease: Duration::from_secs(settings.worker.lease_seconds) };
    let executor = Arc::new(Executor::new(store.clone(), registry.clone(), db.clone(), config));
    let jobs = Arc::new(JobMessages::new(executor));
    let operations = Arc::new(OperationMessages::new(registry.clone(), store.clone(), db.clone()));
    let mut consumers = Consumers::default();
    for (queue, queue_settings) in &settings.queues {
        let (queue, queue_settings, transport) = (queue.clone(), queue_settings.clone(), transport.clone());
        match queue_settings.kind {
            QueueKind::Jobs => {
                let consumer = QueueConsumer::new(queue, queue_settings, transport, jobs.clone());
                consumers.jobs.push(consumer.start_supervised());
            }
            QueueKind::Operations => {
                let consumer = OperationConsumer::new(queue, queue_settings, transport, operations.clone());
                consumers.operations.push(consumer.start_supervised());
            }
        }
    }
    consumers
}

impl Application {
    pub fn builder(settings: Settings) -> ApplicationBuilder {
        ApplicationBuilder {
            settings,
            registry: OperationRegistry::builtin(),
            wrap_store: None,
            transport: None,
            api: true,
        }
    }

    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        Self::builder(settings).build().await
    }

    /// The port the API listens on (useful when bound to port 0); `None` for a worker.
    pub fn port(&self) -> Option<u16> {
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

    /// Runs one dispatch sweep now (tests and operators); `None` when the sweeper is off.
    pub async fn sweep_now(&self) -> Option<u64> {
        let sweeper = self.sweeper.as_ref()?;
        sweeper.send(Tick).await.ok()
    }

    /// Runs until stopped: the HTTP server stops on SIGTERM or SIGINT; a worker waits for
    /// one of those signals.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        // Consumers and sweeper stay addressable (so supervisable) until the end.
        let Application { server, consumers, sweeper, .. } = self;
        let result = match server {
            Some(server) => server.await,
            None => wait_for_stop_signal().await,
        };
        drop((consumers, sweeper));
        result
    }
}

async fn wait_for_stop_signal() -> std::io::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => info!("SIGTERM received; stopping"),
        result = tokio::signal::ctrl_c() => {
            result?;
            info!("SIGINT received; stopping");
        }
    }
    Ok(())
}
