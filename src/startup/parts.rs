//! The steps of a start that open what the instance runs on: the database and its clock,
//! the store with its observers, the transport, and the background passes.

use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Supervisor};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;
use tracing::info;

use crate::actors::{ClockSync, DispatchSweeper, Periodic, Reaper, CLOCK_SYNC_INTERVAL};
use crate::config::{Settings, StoreSettings, TransportKind};
use crate::dispatch::Dispatcher;
use crate::live::Notifier;
use crate::store::{self, JobStore, SeaStore, WriteGate};
use crate::transport::{AmqpTransport, InProcessTransport, Transport};

use super::Live;

/// The group-commit writer's connections on PostgreSQL, shared by the statements of the
/// batches in flight (a batch's claims, outcomes and lease renewals run side by side).
const WRITER_CONNECTIONS: u32 = 4;

/// Connects, migrates if configured, and reads the database clock (kept in step by an
/// actor from then on): the pool, the clock's offset in ms, and the actor.
pub(super) async fn open_database(settings: &Settings) -> anyhow::Result<(DatabaseConnection, i64, Addr<ClockSync>)> {
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
/// whatever waits for the jobs it changed. With it, the gate its writers take turns at.
pub(super) async fn open_store(
    settings: &Settings,
    db: &DatabaseConnection,
    live: &Live,
    hook: Option<Arc<dyn crate::store::Hook>>,
    watches: Vec<Arc<dyn crate::store::Observer>>,
) -> anyhow::Result<(Arc<dyn JobStore>, WriteGate)> {
    let notifier = Notifier::new(live.waiters.clone(), live.claimers.clone()).with_stop_runs(live.stop_runs.clone());
    let mut sea = match settings.store.group_commit() {
        1 => SeaStore::new(db.clone()),
        batch => {
            // SQLite commits one batch at a time on one connection; PostgreSQL runs a batch's
            // statements side by side (`autocommit.rs`).
            let connections = match store::Backend::of_url(&settings.store.url)? {
                store::Backend::Sqlite => 1,
                store::Backend::Postgres => WRITER_CONNECTIONS,
            };
            let writer_settings = StoreSettings { max_connections: connections, ..settings.store.clone() };
            let writer_db = store::connect(&writer_settings).await?;
            SeaStore::new(db.clone()).with_group_commit_on(batch, writer_db)
        }
    }
    .observed_by(Arc::new(crate::telemetry::metrics::JobMetrics::default()))
    .observed_by(Arc::new(notifier));
    for watch in watches {
        sea = sea.observed_by(watch);
    }
    if let Some(hook) = hook {
        sea = sea.with_hook(hook);
    }
    if settings.retention.enabled && store::Backend::of_url(&settings.store.url)? == store::Backend::Sqlite {
        sea = sea.pruning_on(store::connect_for_pruning(&settings.store).await?);
    }
    let gate = sea.write_gate();
    Ok((Arc::new(sea), gate))
}

/// The background passes this process runs.
pub(super) struct Upkeep {
    pub(super) sweeper: Option<Addr<Periodic<DispatchSweeper>>>,
    pub(super) reaper: Option<Addr<Periodic<Reaper>>>,
    pub(super) cleaner: Option<Addr<Periodic<crate::retention::Cleaner>>>,
    pub(super) remote_sweeper: Option<Addr<Periodic<crate::remote::sweeper::RemoteSweeper>>>,
    pub(super) scheduler: Option<Addr<Periodic<crate::schedules::Scheduler>>>,
}

/// The capabilities whose passes run in the background.
pub(super) struct Kept<'a> {
    pub(super) uploads: &'a Arc<crate::uploads::Uploads>,
    pub(super) remote: &'a Arc<crate::remote::Remote>,
    pub(super) schedules: &'a Arc<crate::schedules::Schedules>,
}

/// Starts the dispatch sweep (after the start-up dispatch), the reaper, the cleaner, the
/// remote sweeper and the scheduler, each where its settings ask for it.
pub(super) async fn start_upkeep(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    dispatcher: &Dispatcher,
    db: &DatabaseConnection,
    Kept { uploads, remote, schedules }: Kept<'_>,
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
    // Every process may fire schedules: each tick is decided once, in the store.
    let scheduler = settings.scheduler.enabled.then(|| {
        let scheduler = crate::schedules::Scheduler::new(schedules.clone());
        Supervisor::start(move |_| Periodic::new(scheduler))
    });
    Ok(Upkeep { sweeper, reaper, cleaner, remote_sweeper, scheduler })
}

pub(super) fn build_transport(settings: &Settings) -> anyhow::Result<Arc<dyn Transport>> {
    Ok(match settings.transport.kind {
        TransportKind::InProcess => Arc::new(InProcessTransport::new()),
        TransportKind::Amqp => Arc::new(AmqpTransport::new(settings.transport.amqp.clone())?),
    })
}

/// Re-dispatches what start-up finds QUEUED, then starts the periodic sweep.
pub(super) async fn start_sweeper(
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
