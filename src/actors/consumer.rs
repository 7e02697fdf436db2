//! `Consumer<H>`: the supervised actor behind every queue consumer. It subscribes to one
//! queue and hands each delivery to its handler `H`, at most `concurrency` at a time. When
//! the subscription fails (broker restart, lost connection) the actor stops and its
//! supervisor starts it again, which subscribes anew; nothing else is affected.
//!
//! Two handlers exist: [`super::JobMessages`] (`QueueConsumer`: job ids, full lifecycle) and
//! [`super::OperationMessages`] (`OperationConsumer`: ephemeral operation payloads).
//!
//! A consumer follows the paused queues ([`PausedQueues`]): while its queue is paused it
//! holds no subscription, so the transport keeps every message (what was prefetched goes
//! back), and the jobs it runs finish; it subscribes again when the queue resumes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use async_trait::async_trait;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use super::settings::QueueSettings;
use crate::store::Maintenance;
use crate::transport::{Acker, Delivery, Subscription, Transport, TransportError};

/// Pause before a message is given back after an error; also the first pause before a
/// failed subscription is tried again, doubling per failure up to `MAX_RESUBSCRIBE_PAUSE`.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_secs(1);
const MAX_RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(30);

/// The names of the queues paused, as this process last read them (`flow::QueuePauses`).
pub type PausedQueues = watch::Receiver<BTreeSet<String>>;

/// What a consumer does with one delivery. It must settle the delivery (ack, requeue or
/// dead-letter) itself.
#[async_trait]
pub trait DeliveryHandler: Send + Sync + 'static {
    /// A name for logs: which kind of consumer this is.
    fn kind(&self) -> &'static str;

    /// `slots` holds the slot taken for the delivery; a handler that runs several jobs of
    /// one delivery takes one more per job.
    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery, slots: Slots);
}

/// The slots of one delivery: the one taken for it, then one more per [`Slots::take`], from
/// the consumer's `concurrency`. Each is given back when dropped. The consumer takes its
/// next delivery only once this one has every slot it wants ([`Slots::done`], or dropped),
/// so no slot sits reserved for a delivery that has not come while a job here waits.
pub struct Slots {
    first: Option<OwnedSemaphorePermit>,
    all: Arc<Semaphore>,
    taken: Option<oneshot::Sender<()>>,
}

impl Slots {
    /// A slot: the delivery's own first, then the next one free (waiting for it).
    pub async fn take(&mut self) -> Option<OwnedSemaphorePermit> {
        match self.first.take() {
            Some(first) => Some(first),
            None => self.all.clone().acquire_owned().await.ok(),
        }
    }

    /// This delivery takes no more slots: the consumer may go on to the next one.
    pub fn done(&mut self) {
        if let Some(taken) = self.taken.take() {
            let _ = taken.send(());
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.done();
    }
}

pub struct Consumer<H: DeliveryHandler> {
    queue: String,
    /// Deliveries handled at once in this process, and the broker prefetch.
    settings: QueueSettings,
    /// One permit per delivery being handled. It outlives a subscription, so runs carried
    /// over a resubscription still count against `concurrency`.
    slots: Arc<Semaphore>,
    transport: Arc<dyn Transport>,
    handler: Arc<H>,
    /// Subscriptions failed in a row; sets the pause before the next one (kept across
    /// restarts, since the supervisor restarts this same value).
    failures: u32,
    /// The running subscription loop, cancelled by [`StopIntake`].
    consuming: Option<SpawnHandle>,
    /// Intake stopped for good (shutdown): do not subscribe again.
    stopping: bool,
    /// The paused queues: none unless [`Consumer::pausable`].
    paused: PausedQueues,
}

impl<H: DeliveryHandler> Consumer<H> {
    pub fn new(queue: String, settings: QueueSettings, transport: Arc<dyn Transport>, handler: Arc<H>) -> Self {
        let slots = Arc::new(Semaphore::new(settings.concurrency.max(1)));
        let paused = watch::channel(BTreeSet::new()).1;
        Consumer { queue, settings, transport, handler, slots, failures: 0, consuming: None, stopping: false, paused }
    }

    /// Takes nothing while `paused` names this consumer's queue.
    pub fn pausable(mut self, paused: PausedQueues) -> Self {
        self.paused = paused;
        self
    }

    fn resubscribe_pause(&self) -> Duration {
        match self.failures {
            0 => Duration::ZERO,
            n => RETRY_PAUSE.saturating_mul(1 << (n - 1).min(5)).min(MAX_RESUBSCRIBE_PAUSE),
        }
    }

    /// Starts the consumer under a supervisor on the current arbiter.
    pub fn start_supervised(self) -> Addr<Self> {
        Supervisor::start(move |_| self)
    }
}

impl<H: DeliveryHandler> Actor for Consumer<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.stopping {
            return;
        }
        let (queue, settings) = (&self.queue, &self.settings);
        info!(queue = %queue, kind = self.handler.kind(), concurrency = settings.concurrency, prefetch = settings.prefetch, "consumer started");
        let parts = Parts {
            window: settings.window(),
            slots: self.slots.clone(),
            transport: self.transport.clone(),
            handler: self.handler.clone(),
        };
        let consume = consume(queue.clone(), parts, self.paused.clone());
        let pause = self.resubscribe_pause();
        let consume = async move {
            tokio::time::sleep(pause).await;
            consume.await
        };
        self.consuming = Some(ctx.spawn(consume.into_actor(self).map(|result, actor, ctx| {
            match result {
                Ok(()) => {
                    info!(queue = %actor.queue, "subscription closed");
                    actor.failures = 0;
                }
                Err(err) => {
                    actor.failures = actor.failures.saturating_add(1);
                    warn!(queue = %actor.queue, error = %err, failures = actor.failures, "subscription failed");
                }
            }
            ctx.stop();
        })));
    }
}

/// Stop taking deliveries (shutdown): the subscription is dropped, so the transport gets
/// back what was prefetched; deliveries already being handled finish.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopIntake;

impl<H: DeliveryHandler> Handler<StopIntake> for Consumer<H> {
    type Result = ();

    fn handle(&mut self, _: StopIntake, ctx: &mut Self::Context) {
        self.stopping = true;
        if let Some(consuming) = self.consuming.take() {
            ctx.cancel_future(consuming);
        }
        info!(queue = %self.queue, "intake stopped");
    }
}

impl<H: DeliveryHandler> Supervised for Consumer<H> {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        warn!(queue = %self.queue, kind = self.handler.kind(), "restarting consumer");
        crate::telemetry::metrics::consumer_restarted(&self.queue);
    }
}

/// What a consumer's subscriptions take deliveries with.
struct Parts<H> {
    window: u16,
    slots: Arc<Semaphore>,
    transport: Arc<dyn Transport>,
    handler: Arc<H>,
}

/// Subscribes while the queue is not paused, and gives the subscription back (the transport
/// keeps its messages) when it is: the deliveries being handled finish either way.
async fn consume<H: DeliveryHandler>(
    queue: String,
    parts: Parts<H>,
    mut paused: PausedQueues,
) -> Result<(), TransportError> {
    loop {
        if paused.borrow().contains(&queue) {
            info!(queue = %queue, "queue paused: taking nothing until it resumes");
        }
        // A view nobody can change any more stays as it is.
        if paused.wait_for(|paused| !paused.contains(&queue)).await.is_err() {
            std::future::pending::<()>().await;
        }
        let mut subscription = parts.transport.subscribe(&queue, parts.window).await?;
        let pause = async {
            if paused.wait_for(|paused| paused.contains(&queue)).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            taken = take(&queue, subscription.as_mut(), &parts) => return taken,
            () = pause => info!(queue = %queue, "queue paused: subscription given back; running jobs finish"),
        }
    }
}

/// Takes a delivery only when a slot is free, and hands it to the handler, which settles it
/// before giving the slot back. With the broker's window at `window` (never below
/// `concurrency`), a delivery held in this process beyond its free slots exists only when
/// `prefetch` was set above `concurrency` on purpose.
async fn take<H: DeliveryHandler>(
    queue: &str,
    subscription: &mut dyn Subscription,
    parts: &Parts<H>,
) -> Result<(), TransportError> {
    loop {
        let permit = parts.slots.clone().acquire_owned().await.map_err(|_| TransportError::Closed)?;
        let Some(delivery) = subscription.next().await else { return Ok(()) };
        let (queue, transport, handler) = (queue.to_owned(), parts.transport.clone(), parts.handler.clone());
        let (taken, all_taken) = oneshot::channel();
        let delivery_slots = Slots { first: Some(permit), all: parts.slots.clone(), taken: Some(taken) };
        actix::spawn(async move {
            handler.handle(&queue, transport.as_ref(), delivery, delivery_slots).await;
        });
        let _ = all_taken.await;
    }
}

/// Sets a message aside in the queue's dead letters, then acks it; if it cannot be set
/// aside it goes back to the queue instead, so nothing is dropped.
pub(crate) async fn dead_letter(
    transport: &dyn Transport,
    queue: &str,
    body: Vec<u8>,
    acker: Box<dyn Acker>,
    reason: &str,
) {
    warn!(queue, reason, bytes = body.len(), "dead-lettering a message");
    match transport.dead_letter(queue, body, reason).await {
        Ok(()) => {
            crate::telemetry::metrics::dead_lettered(queue, reason);
            settle(acker.ack().await)
        }
        Err(err) => {
            warn!(error = %err, "could not dead-letter; message requeued");
            requeue_later(acker, RETRY_PAUSE).await;
        }
    }
}

/// Error class of a job whose message reached a queue that does not carry jobs.
pub const WRONG_QUEUE: &str = "WrongQueue";

/// A job id that reached a queue of another kind (`kind` names what the queue carries) can
/// never run from there: a QUEUED job it names is failed with the reason, so it is not left
/// waiting; its message then goes to the dead letters as undecodable.
pub(crate) async fn fail_stranded_job(store: &dyn Maintenance, queue: &str, kind: &str, body: &[u8]) {
    let Some(ids) = crate::dispatch::decode_job_message(body) else { return };
    let message = format!("queue {queue:?} carries {kind}, not jobs; the job could never run from it");
    for id in ids {
        match store.fail_queued(id, WRONG_QUEUE, &message).await {
            Ok(Some(_)) => warn!(job_id = %id, queue, "a job sent to a queue of another kind was failed"),
            Ok(None) => {}
            Err(err) => {
                warn!(job_id = %id, queue, error = %err, "could not fail a job stranded on a queue of another kind")
            }
        }
    }
}

/// Gives a message back to the queue after a pause.
pub(crate) async fn requeue_later(acker: Box<dyn Acker>, pause: Duration) {
    tokio::time::sleep(pause).await;
    settle(acker.requeue().await);
}

pub(crate) fn settle(result: Result<(), TransportError>) {
    if let Err(err) = result {
        warn!(error = %err, "could not settle a delivery; the transport will redeliver it");
    }
}
