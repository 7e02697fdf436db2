//! Building and running an instance: `main` and the tests start the app the same way.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor as _, Addr, Supervisor};
use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tokio::sync::oneshot;
use tracing::info;

use crate::actors::{
    BatchWrites, ClockSync, DispatchSweeper, JobMessages, OperationConsumer, OperationMessages, Periodic,
    QueueConsumer, Reaper, RunNow, ShutdownGuard, StopIntake, WriteConsumer, CLOCK_SYNC_INTERVAL,
};
use crate::api;
use crate::auth::{self, Authenticator, FirstToken};
use crate::config::{QueueKind, Settings, StoreSettings, TransportKind};
use crate::dispatch::Dispatcher;
use crate::http::{self, AppState};
use crate::live::{self, JobWaiters, Notifier, TaskWaiters};
use crate::ops::{OperationRegistry, Services};
use crate::store::{self, JobStore, SeaStore};
use crate::transport::{AmqpTransport, InProcessTransport, Transport};
use crate::worker::{Executor, ExecutorConfig, InFlight};

/// A running instance: the HTTP server (unless worker-only), the queue consumers when
/// workers are enabled, the dispatch sweeper, the reaper, and the shutdown guard.
pub struct Application {
    port: Option<u16>,
    server: Option<Server>,
    store: Arc<dyn JobStore>,
    db: DatabaseConnection,
    transport: Arc<dyn Transport>,
    /// Queue consumers, each supervised on this arbiter.
    consumers: Consumers,
    sweeper: Option<Addr<Periodic<DispatchSweeper>>>,
    reaper: Option<Addr<Periodic<Reaper>>>,
    /// Marks silent remote workers gone and soft-deletes orphaned types (with the API).
    remote_sweeper: Option<Addr<Periodic<crate::remote::sweeper::RemoteSweeper>>>,
    cleaner: Option<Addr<Periodic<crate::retention::Cleaner>>>,
    /// Keeps the database clock offset fresh.
    clock: Addr<ClockSync>,
    /// Resolves with the exit code when the shutdown guard is done.
    stopped: Option<oneshot::Receiver<i32>>,
}

/// Which parts run in this process, and what tests and embedders swap in.
pub struct ApplicationBuilder {
    settings: Settings,
    registry: OperationRegistry,
    hook: Option<Arc<dyn crate::store::Hook>>,
    transport: Option<Arc<dyn Transport>>,
    api: bool,
    signals: bool,
    /// False only in benchmarks: see [`ApplicationBuilder::without_token_checks_for_benchmarks`].
    check_tokens: bool,
}

impl ApplicationBuilder {
    /// Operations offered instead of the built-in ones.
    pub fn registry(mut self, registry: OperationRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// A hook the store asks before every call and after every commit (tests inject faults).
    pub fn hook(mut self, hook: Arc<dyn crate::store::Hook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// A transport shared with something else (for example a test that publishes directly).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Runs no HTTP server: a worker or reaper process.
    pub fn without_api(mut self) -> Self {
        self.api = false;
        self
    }

    /// Takes every request as an admin's without reading a token: the baseline the benchmark
    /// prices token checks against. Never reachable from the command line or configuration.
    #[doc(hidden)]
    pub fn without_token_checks_for_benchmarks(mut self) -> Self {
        self.check_tokens = false;
        self
    }

    /// Lets the shutdown guard own SIGTERM and SIGINT (the command line does; tests do not).
    pub fn handle_signals(mut self) -> Self {
        self.signals = true;
        self
    }

    /// Connects, migrates if configured, re-dispatches QUEUED jobs, starts consumers, the
    /// sweeper, the reaper and the guard, and binds the listener. Must run inside an actix
    /// `System`.
    pub async fn build(self) -> anyhow::Result<Application> {
        let settings = self.settings;
        // Caught from now on: a consumer may claim a job long before the guard exists.
        let signals = self.signals.then(crate::actors::Signals::listen);
        // Recording from the first claim on.
        crate::telemetry::metrics::handle();
        let (db, offset_ms, clock) = open_database(&settings).await?;
        let live = Live::new();
        let store = open_store(&settings, &db, &live, self.hook).await?;
        let transport = match self.transport {
            Some(transport) => transport,
            None => build_transport(&settings)?,
        };
        let uploads = Arc::new(
            crate::uploads::Uploads::open(db.clone(), &settings.uploads)
                .with_context(|| format!("opening the upload directory {}", settings.uploads.dir))?,
        );
        let registry = Arc::new(uploads.register(crate::inference::register(self.registry, &settings.inference)));
        let grouping = settings.queues.iter().map(|(name, queue)| (name.clone(), queue.ids_per_message)).collect();
        let dispatcher = Dispatcher::new(store.clone(), transport.clone()).with_grouping(grouping);
        let remote = Arc::new(crate::remote::Remote::new(
            db.clone(),
            &settings.remote,
            live.claimers.clone(),
            settings.uploads.services.keys().cloned().collect(),
        ));
        let upkeep = start_upkeep(&settings, &store, &dispatcher, &db, &uploads, &remote, self.api).await?;
        // Waiting clients (API) and script hosts are woken across processes by NOTIFY, and
        // workers hear of cancels made elsewhere: listening before the first claim, so no
        // run starts before its cancel could reach it.
        if self.api || settings.worker.enabled {
            live::listen(&settings.store.url, live.waiters.clone(), live.claimers.clone(), live.stop_runs.clone())
                .await
                .context("starting the listener")?;
        }
        let consumers = start_consumers(&settings, &store, &transport, &registry, &db, &live, &dispatcher, &uploads)?;
        let closing = tokio_util::sync::CancellationToken::new();
        let (port, server) = match self.api {
            true => {
                first_admin_token(&db, &settings).await?;
                let state = AppState {
                    store: store.clone(),
                    db: db.clone(),
                    transport: transport.clone(),
                    dispatcher: dispatcher.clone(),
                    registry,
                    max_page_size: settings.server.max_page_size,
                    job_queues: settings.job_queues(),
                    outage: http::Outage::default(),
                    waiters: live.waiters.clone(),
                    max_wait: Duration::from_secs(settings.server.max_wait_seconds),
                    closing: closing.clone(),
                };
                let auth = match self.check_tokens {
                    true => Authenticator::new(db.clone(), Duration::from_secs(settings.auth.cache_seconds)),
                    false => Authenticator::trusting(db.clone(), auth::Caller::admin_for_benchmarks()),
                };
                let parts = Capabilities { auth: auth.into(), remote: remote.into(), uploads: uploads.clone().into() };
                let (port, server) = serve_api(&settings, state, parts)?;
                (Some(port), Some(server))
            }
            false => (None, None),
        };
        let stopped = signals.map(|signals| {
            let (done, stopped) = oneshot::channel();
            let grace = Duration::from_secs(settings.worker.grace_seconds);
            let handle = server.as_ref().map(Server::handle);
            let intake = consumers.intake();
            ShutdownGuard::new(live.in_flight, store.clone(), dispatcher, grace, intake, handle, done, signals)
                .closing(closing.clone())
                .start();
            stopped
        });
        let backend = store::Backend::of_url(&settings.store.url)?;
        info!(port, store = ?backend, transport = transport.kind(), consumers = consumers.len(), offset_ms, "started");
        if let Some(port) = port {
            let host = settings.server.bind.rsplit_once(':').map_or("127.0.0.1", |(host, _)| host);
            info!("dashboard at http://{host}:{port}/ui");
        }
        let Upkeep { sweeper, reaper, cleaner, remote_sweeper } = upkeep;
        Ok(Application {
            port,
            server,
            store,
            db,
            transport,
            consumers,
            sweeper,
            reaper,
            remote_sweeper,
            cleaner,
            clock,
            stopped,
        })
    }
}

/// What wakes and stops in this process when the store commits: the waiters of jobs and of
/// tasks, and the runs in flight (a cancel stops this process's run of its job at once).
struct Live {
    waiters: Arc<JobWaiters>,
    claimers: Arc<TaskWaiters>,
    in_flight: Arc<InFlight>,
    stop_runs: live::StopRuns,
}

impl Live {
    fn new() -> Self {
        let in_flight = InFlight::new();
        let stop_runs: live::StopRuns = {
            let in_flight = in_flight.clone();
            Arc::new(move |id| in_flight.stop_job(id))
        };
        Live { waiters: JobWaiters::new(), claimers: TaskWaiters::new(), in_flight, stop_runs }
    }
}

/// Connects, migrates if configured, and reads the database clock (kept in step by an
/// actor from then on): the pool, the clock's offset in ms, and the actor.
async fn open_database(settings: &Settings) -> anyhow::Result<(DatabaseConnection, i64, Addr<ClockSync>)> {
    let db = store::connect(&settings.store).await?;
    if settings.store.migrate_on_start {
        store::migrate(&db).await?;
    }
    let offset_ms = store::clock::sync(&db).await.context("reading the database clock")?;
    let clock = Supervisor::start({
        let db = db.clone();
        move |_| ClockSync::new(db, CLOCK_SYNC_INTERVAL)
    });
    Ok((db, offset_ms, clock))
}

/// The store, with group commit as configured; every commit is counted, then wakes
/// whatever waits for the jobs it changed.
async fn open_store(
    settings: &Settings,
    db: &DatabaseConnection,
    live: &Live,
    hook: Option<Arc<dyn crate::store::Hook>>,
) -> anyhow::Result<Arc<dyn JobStore>> {
    let notifier = Notifier::new(live.waiters.clone(), live.claimers.clone()).with_stop_runs(live.stop_runs.clone());
    let mut sea = match settings.store.group_commit() {
        1 => SeaStore::new(db.clone()),
        batch => {
            let writer_db = store::connect(&StoreSettings { max_connections: 1, ..settings.store.clone() }).await?;
            SeaStore::new(db.clone()).with_group_commit_on(batch, writer_db)
        }
    }
    .observed_by(Arc::new(crate::telemetry::metrics::JobMetrics))
    .observed_by(Arc::new(notifier));
    if let Some(hook) = hook {
        sea = sea.with_hook(hook);
    }
    Ok(Arc::new(sea))
}

/// The background passes this process runs.
struct Upkeep {
    sweeper: Option<Addr<Periodic<DispatchSweeper>>>,
    reaper: Option<Addr<Periodic<Reaper>>>,
    cleaner: Option<Addr<Periodic<crate::retention::Cleaner>>>,
    remote_sweeper: Option<Addr<Periodic<crate::remote::sweeper::RemoteSweeper>>>,
}

/// Starts the dispatch sweep (after the start-up dispatch), the reaper, the cleaner and the
/// remote sweeper, each where its settings ask for it.
async fn start_upkeep(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    dispatcher: &Dispatcher,
    db: &DatabaseConnection,
    uploads: &Arc<crate::uploads::Uploads>,
    remote: &Arc<crate::remote::Remote>,
    api: bool,
) -> anyhow::Result<Upkeep> {
    let sweeper = start_sweeper(settings, dispatcher).await?;
    let reaper = settings.reaper.enabled.then(|| {
        let reaper = Reaper::new(store.clone(), dispatcher.clone(), settings.reaper.clone());
        Supervisor::start(move |_| Periodic::new(reaper))
    });
    let cleaner = settings.retention.enabled.then(|| {
        let cleaner =
            crate::retention::Cleaner::new(store.clone(), db.clone(), uploads.clone(), settings.retention.clone());
        Supervisor::start(move |_| Periodic::new(cleaner))
    });
    // Silent remote workers are swept wherever the API or the reaper runs, so workers with
    // their API down still give up the tasks of a worker that went away (each sweep is a
    // compare-and-set: sweepers in many processes mark a worker gone once).
    let remote_sweeper = (api || settings.reaper.enabled).then(|| {
        let (remote, interval) = (remote.clone(), Duration::from_millis(settings.remote.sweep_interval_ms));
        Supervisor::start(move |_| Periodic::new(crate::remote::sweeper::RemoteSweeper::new(remote, interval)))
    });
    Ok(Upkeep { sweeper, reaper, cleaner, remote_sweeper })
}

/// The queue consumers and the local script host, where this process runs jobs.
#[allow(clippy::too_many_arguments)]
fn start_consumers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
    live: &Live,
    dispatcher: &Dispatcher,
    uploads: &crate::uploads::Uploads,
) -> anyhow::Result<Consumers> {
    if !settings.worker.enabled {
        return Ok(Consumers::default());
    }
    let mut consumers = start_workers(settings, store, transport, registry, db, &live.in_flight, dispatcher);
    if settings.uploads.host_slots > 0 {
        let parts = crate::uploads::HostParts {
            executor: consumers.executor.clone().context("the executor")?,
            store: store.clone(),
            in_flight: live.in_flight.clone(),
            claimers: live.claimers.clone(),
            quotas: uploads.quotas.clone(),
            heartbeat: Duration::from_millis(settings.worker.heartbeat_ms),
        };
        consumers.scripts = Some(crate::uploads::ScriptHost::new(parts, settings.uploads.host_slots).start());
    }
    Ok(consumers)
}

/// Stores the deployment's bootstrap token, or on a store with no token makes an admin
/// token and prints it, once, on standard output (never to the log: it is not stored in
/// clear anywhere).
async fn first_admin_token(db: &DatabaseConnection, settings: &Settings) -> anyhow::Result<()> {
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

fn build_transport(settings: &Settings) -> anyhow::Result<Arc<dyn Transport>> {
    Ok(match settings.transport.kind {
        TransportKind::InProcess => Arc::new(InProcessTransport::new()),
        TransportKind::Amqp => Arc::new(AmqpTransport::new(settings.transport.amqp.clone())?),
    })
}

/// Re-dispatches what start-up finds QUEUED, then starts the periodic sweep.
async fn start_sweeper(
    settings: &Settings,
    dispatcher: &Dispatcher,
) -> anyhow::Result<Option<Addr<Periodic<DispatchSweeper>>>> {
    if !settings.dispatch.enabled {
        return Ok(None);
    }
    let sent = dispatcher.recover(settings.dispatch.batch).await.context("re-dispatching queued jobs")?;
    info!(sent, "start-up dispatch done");
    let sweeper = DispatchSweeper::new(dispatcher.clone(), &settings.dispatch);
    Ok(Some(Supervisor::start(move |_| Periodic::new(sweeper))))
}

/// The state of the capabilities beside [`AppState`], each its own `web::Data`.
struct Capabilities {
    auth: web::Data<Authenticator>,
    remote: web::Data<crate::remote::Remote>,
    uploads: web::Data<crate::uploads::Uploads>,
}

fn serve_api(settings: &Settings, state: AppState, parts: Capabilities) -> anyhow::Result<(u16, Server)> {
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
            .app_data(parts.remote.clone())
            .app_data(parts.uploads.clone())
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
    .on_connect(move |connection, data| clients.on_connect(connection, data))
    // Long requests drain within the same budget as jobs; the guard owns the signals.
    .shutdown_timeout(settings.worker.grace_seconds)
    .disable_signals()
    .listen(listener)?
    .run();
    Ok((port, server))
}

/// The addresses of the running consumers. A supervisor restarts a stopped actor only
/// while its address is alive, so these are held for the life of the application.
#[derive(Default)]
struct Consumers {
    jobs: Vec<Addr<QueueConsumer>>,
    operations: Vec<Addr<OperationConsumer>>,
    writes: Vec<Addr<WriteConsumer>>,
    /// The script host, when this process runs uploaded scripts.
    scripts: Option<Addr<crate::uploads::ScriptHost>>,
    /// The executor the job consumers share (and the script host).
    executor: Option<Arc<Executor>>,
}

impl Consumers {
    fn len(&self) -> usize {
        self.intake().len()
    }

    /// Where to send [`StopIntake`] at shutdown.
    fn intake(&self) -> Vec<actix::Recipient<StopIntake>> {
        let jobs = self.jobs.iter().map(|addr| addr.clone().recipient());
        let operations = self.operations.iter().map(|addr| addr.clone().recipient());
        let writes = self.writes.iter().map(|addr| addr.clone().recipient());
        let scripts = self.scripts.iter().map(|addr| addr.clone().recipient());
        jobs.chain(operations).chain(writes).chain(scripts).collect()
    }
}

/// Starts a supervised consumer per configured queue, of the queue's kind.
fn start_workers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
    in_flight: &Arc<InFlight>,
    dispatcher: &Dispatcher,
) -> Consumers {
    let config = ExecutorConfig { owner: settings.worker_id(), lease: Duration::from_millis(settings.worker.lease_ms) };
    let services = Services {
        store: store.clone(),
        db: db.clone(),
        transport: transport.clone(),
        dispatcher: dispatcher.clone(),
        registry: registry.clone(),
    };
    let executor = Arc::new(Executor::new(services.clone(), registry.clone(), config));
    let heartbeat = Duration::from_millis(settings.worker.heartbeat_ms);
    let ack_running_after = Duration::from_millis(settings.transport.amqp.ack_running_after_ms);
    let jobs =
        Arc::new(JobMessages::new(executor.clone(), store.clone(), in_flight.clone(), heartbeat, ack_running_after));
    let operations = Arc::new(OperationMessages::new(registry.clone(), services));
    let writes = Arc::new(BatchWrites::new(store.clone(), registry.clone()));
    let mut consumers = Consumers { executor: Some(executor), ..Consumers::default() };
    for (queue, queue_settings) in settings.consumed_queues() {
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
            QueueKind::Writes => {
                let consumer = WriteConsumer::new(queue, queue_settings, transport, writes.clone());
                consumers.writes.push(consumer.start_supervised());
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
            hook: None,
            transport: None,
            api: true,
            signals: false,
            check_tokens: true,
        }
    }

    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        Self::builder(settings).build().await
    }

    /// Runs one remote sweep now (tests); `None` where neither the API nor the reaper runs.
    pub async fn sweep_remote(&self) -> Option<crate::remote::sweeper::SweepCounts> {
        let sweeper = self.remote_sweeper.as_ref()?;
        sweeper.send(RunNow::default()).await.ok()
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

    /// Runs until stopped and returns the exit code. With the shutdown guard: until it has
    /// drained (143). Without: until the HTTP server stops, or a signal for a worker (0).
    pub async fn run_until_stopped(self) -> std::io::Result<i32> {
        // Consumers, sweeper and reaper stay addressable (so supervisable) until the end.
        let Application { server, consumers, sweeper, reaper, remote_sweeper, cleaner, clock, stopped, .. } = self;
        let code = match (stopped, server) {
            (Some(stopped), server) => {
                if let Some(server) = server {
                    actix_rt::spawn(server);
                }
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
                stopped.await.unwrap_or(crate::actors::EXIT_CODE)
            }
            (None, Some(server)) => server.await.map(|()| 0)?,
            (None, None) => {
                tokio::signal::ctrl_c().await?;
                0
            }
        };
        drop((consumers, sweeper, reaper, remote_sweeper, cleaner, clock));
        // Runs that did not stop in time do not outlive the process.
        crate::uploads::sandbox::kill_all();
        Ok(code)
    }
}
