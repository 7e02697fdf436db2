//! Building and running an instance: `main` and the tests start the app the same way.

pub mod allocator;
mod consumers;
mod parts;
mod server;

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor as _, Addr};
use actix_web::dev::Server;
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tokio::sync::oneshot;
use tracing::info;

use crate::actors::{ClockSync, DispatchSweeper, Periodic, Reaper, RunNow, ShutdownGuard};
use crate::auth::{self, Authenticator};
use crate::config::Settings;
use crate::dispatch::Dispatcher;
use crate::http::{self, AppState};
use crate::live::{self, JobWaiters, TaskWaiters};
use crate::ops::OperationRegistry;
use crate::store::{self, JobStore};
use crate::transport::Transport;
use crate::worker::InFlight;

use self::consumers::{start_consumers, Consumers};
use self::parts::{build_transport, open_database, open_store, start_upkeep, Kept, Upkeep};
use self::server::{first_admin_token, serve_api, Capabilities};

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
    /// Fires the ticks of schedules (in every process where `scheduler.enabled`).
    scheduler: Option<Addr<Periodic<crate::schedules::Scheduler>>>,
    /// Keeps the database clock offset fresh.
    clock: Addr<ClockSync>,
    /// The paused queues this process's consumers follow: held for the life of the
    /// application (its view ends with it).
    _pauses: Arc<crate::flow::QueuePauses>,
    /// Adds this process's counts to the queues' rollup; flushed once more at the end.
    rollup: Arc<crate::flow::Rollup>,
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
        let (limit_watch, limit_keys) = crate::dispatch::LimitWatch::new();
        let (dependency_watch, ended) = crate::dispatch::DependencyWatch::new();
        let (rollup_watch, counted) = crate::flow::RollupWatch::new();
        let watches: Vec<Arc<dyn crate::store::Observer>> =
            vec![Arc::new(limit_watch), Arc::new(dependency_watch), Arc::new(rollup_watch)];
        let (store, gate) = open_store(&settings, &db, &live, self.hook, watches).await?;
        let transport = match self.transport {
            Some(transport) => transport,
            None => build_transport(&settings)?,
        };
        let uploads = Arc::new(
            crate::uploads::Uploads::open(db.clone(), &settings.uploads)
                .with_context(|| format!("opening the upload directory {}", settings.uploads.dir))?,
        );
        let registry = Arc::new(uploads.register(crate::inference::register(self.registry, &settings.inference)));
        let grouping = settings.queues.iter().map(|(name, queue)| (name.clone(), queue.per_message())).collect();
        let dispatcher =
            Dispatcher::new(store.clone(), transport.clone()).with_grouping(grouping).with_aging(settings.jobs.aging());
        let remote = Arc::new(crate::remote::Remote::new(
            db.clone(),
            gate.clone(),
            &settings.remote,
            live.claimers.clone(),
            settings.uploads.services.keys().cloned().collect(),
        ));
        let recheck = Duration::from_millis(settings.reaper.interval_ms);
        crate::dispatch::Releaser::new(dispatcher.clone(), settings.jobs.limit_rules(), recheck).start(limit_keys);
        crate::dispatch::Settler::new(dispatcher.clone(), recheck).start(ended);
        let pauses =
            crate::flow::QueuePauses::open(db.clone(), gate.clone(), &settings.job_queues(), dispatcher.waiting_bell())
                .await
                .context("reading the paused queues")?;
        pauses.follow(live.queues.clone());
        let rollup = crate::flow::Rollup::new(db.clone(), gate.clone(), counted);
        rollup.start(self.api.then(|| pauses.clone()));
        let schedules = Arc::new(crate::schedules::Schedules::new(crate::schedules::Parts {
            db: db.clone(),
            gate,
            dispatcher: dispatcher.clone(),
            store: store.clone(),
            registry: registry.clone(),
            job_queues: settings.job_queues(),
            jobs: settings.jobs.clone(),
            remote: remote.clone(),
            settings: settings.scheduler.clone(),
        }));
        crate::schedules::declared::apply(&schedules, &settings.schedules)
            .await
            .context("the [schedules] of the configuration")?;
        let upkeep = start_upkeep(
            &settings,
            &store,
            &dispatcher,
            &db,
            Kept { uploads: &uploads, remote: &remote, schedules: &schedules },
            self.api,
        )
        .await?;
        // Waiting clients (API) and script hosts are woken across processes by NOTIFY, and
        // workers hear of cancels made elsewhere: listening before the first claim, so no
        // run starts before its cancel could reach it.
        if self.api || settings.worker.enabled {
            let (waiters, claimers, stop_runs) = (live.waiters.clone(), live.claimers.clone(), live.stop_runs.clone());
            live::listen(&settings.store.url, waiters, claimers, stop_runs, live.queues.clone())
                .await
                .context("starting the listener")?;
        }
        let paused = pauses.watch();
        let consumers =
            start_consumers(&settings, &store, &transport, &registry, &db, &live, &dispatcher, &uploads, &paused)?;
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
                let parts = Capabilities {
                    auth: auth.into(),
                    jobs: actix_web::web::Data::new(settings.jobs.clone()),
                    remote: remote.into(),
                    uploads: uploads.clone().into(),
                    schedules: schedules.into(),
                    pauses: pauses.clone().into(),
                };
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
        let Upkeep { sweeper, reaper, cleaner, remote_sweeper, scheduler } = upkeep;
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
            scheduler,
            clock,
            _pauses: pauses,
            rollup,
            stopped,
        })
    }
}

/// What wakes and stops in this process when the store commits: the waiters of jobs and of
/// tasks, and the runs in flight (a cancel stops this process's run of its job at once).
pub(super) struct Live {
    pub(super) waiters: Arc<JobWaiters>,
    pub(super) claimers: Arc<TaskWaiters>,
    pub(super) in_flight: Arc<InFlight>,
    pub(super) stop_runs: live::StopRuns,
    /// Rung when another process paused or resumed a queue: the paused queues are read again.
    pub(super) queues: Arc<tokio::sync::Notify>,
}

impl Live {
    fn new() -> Self {
        let in_flight = InFlight::new();
        let stop_runs: live::StopRuns = {
            let in_flight = in_flight.clone();
            Arc::new(move |id| in_flight.stop_job(id))
        };
        let queues = Arc::default();
        Live { waiters: JobWaiters::new(), claimers: TaskWaiters::new(), in_flight, stop_runs, queues }
    }
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

    /// Runs one scheduler pass now (tests); `None` where the scheduler does not run.
    pub async fn run_scheduler(&self) -> Option<crate::schedules::Fired> {
        let scheduler = self.scheduler.as_ref()?;
        scheduler.send(RunNow::default()).await.ok().map(|pass| pass.fired)
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
        let Application { server, consumers, sweeper, reaper, remote_sweeper, cleaner, clock, stopped, rollup, .. } =
            self;
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
        // What the last seconds counted reaches the charts.
        if let Err(err) = rollup.flush().await {
            tracing::warn!(error = %err, "the queues' last counts not added");
        }
        // Runs that did not stop in time do not outlive the process.
        crate::uploads::sandbox::kill_all();
        Ok(code)
    }
}
