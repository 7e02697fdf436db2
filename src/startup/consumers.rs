//! The queue consumers of this process (one supervised actor per consumed queue, of the
//! queue's kind) and the local script host.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor as _, Addr};
use anyhow::Context as _;
use sea_orm::DatabaseConnection;

use crate::actors::{
    BatchWrites, JobMessages, OperationConsumer, OperationMessages, PausedQueues, QueueConsumer, StopIntake,
    WriteConsumer,
};
use crate::config::{QueueKind, Settings};
use crate::dispatch::Dispatcher;
use crate::ops::{OperationRegistry, Services};
use crate::store::JobStore;
use crate::transport::Transport;
use crate::worker::{Executor, ExecutorConfig, InFlight};

use super::Live;

/// The queue consumers and the local script host, where this process runs jobs.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_consumers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
    live: &Live,
    dispatcher: &Dispatcher,
    uploads: &crate::uploads::Uploads,
    paused: &PausedQueues,
) -> anyhow::Result<Consumers> {
    if !settings.worker.enabled {
        return Ok(Consumers::default());
    }
    let mut consumers = start_workers(settings, store, transport, registry, db, &live.in_flight, dispatcher, paused);
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

/// The addresses of the running consumers. A supervisor restarts a stopped actor only
/// while its address is alive, so these are held for the life of the application.
#[derive(Default)]
pub(super) struct Consumers {
    pub(super) jobs: Vec<Addr<QueueConsumer>>,
    pub(super) operations: Vec<Addr<OperationConsumer>>,
    pub(super) writes: Vec<Addr<WriteConsumer>>,
    /// The script host, when this process runs uploaded scripts.
    pub(super) scripts: Option<Addr<crate::uploads::ScriptHost>>,
    /// The executor the job consumers share (and the script host).
    pub(super) executor: Option<Arc<Executor>>,
}

impl Consumers {
    pub(super) fn len(&self) -> usize {
        self.intake().len()
    }

    /// Where to send [`StopIntake`] at shutdown.
    pub(super) fn intake(&self) -> Vec<actix::Recipient<StopIntake>> {
        let jobs = self.jobs.iter().map(|addr| addr.clone().recipient());
        let operations = self.operations.iter().map(|addr| addr.clone().recipient());
        let writes = self.writes.iter().map(|addr| addr.clone().recipient());
        let scripts = self.scripts.iter().map(|addr| addr.clone().recipient());
        jobs.chain(operations).chain(writes).chain(scripts).collect()
    }
}

/// Starts a supervised consumer per configured queue, of the queue's kind; a job queue's
/// takes nothing while `paused` names it.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_workers(
    settings: &Settings,
    store: &Arc<dyn JobStore>,
    transport: &Arc<dyn Transport>,
    registry: &Arc<OperationRegistry>,
    db: &DatabaseConnection,
    in_flight: &Arc<InFlight>,
    dispatcher: &Dispatcher,
    paused: &PausedQueues,
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
                let consumer =
                    QueueConsumer::new(queue, queue_settings, transport, jobs.clone()).pausable(paused.clone());
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
