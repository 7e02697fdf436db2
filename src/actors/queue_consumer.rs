//! `QueueConsumer`: a supervised actor per queue that pulls job messages from the transport
//! and drives the two-session executor, at most `concurrency` jobs at a time.
//!
//! A delivery is acknowledged only after the claim has committed: from then on the job row
//! (its lease) is what keeps the job, not the message. If the claim cannot be made (database
//! down) the message goes back to the queue. When the subscription fails the actor stops
//! and its supervisor starts it again.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use crate::config::QueueSettings;
use crate::dispatch::decode_job_message;
use crate::transport::{Delivery, Transport, TransportError, MAX_MESSAGE_BYTES};
use crate::worker::{Claim, Executor};

/// Pause before a failed subscription is retried, or a claim that hit a store error.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub struct QueueConsumer {
    queue: String,
    /// Jobs of this queue running at once in this process, and the broker prefetch.
    settings: QueueSettings,
    transport: Arc<dyn Transport>,
    executor: Arc<Executor>,
}

impl QueueConsumer {
    pub fn new(queue: String, settings: QueueSettings, transport: Arc<dyn Transport>, executor: Arc<Executor>) -> Self {
        QueueConsumer { queue, settings, transport, executor }
    }

    /// Starts the consumer under a supervisor on the current arbiter.
    pub fn start_supervised(self) -> Addr<Self> {
        Supervisor::start(move |_| self)
    }
}

impl Actor for QueueConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        info!(queue = %self.queue, concurrency = self.settings.concurrency, prefetch = self.settings.prefetch, "consumer started");
        let consume = consume(self.queue.clone(), self.settings.clone(), self.transport.clone(), self.executor.clone());
        ctx.spawn(consume.into_actor(self).map(|result, actor, ctx| {
            match result {
                Ok(()) => info!(queue = %actor.queue, "subscription closed"),
                Err(err) => warn!(queue = %actor.queue, error = %err, "subscription failed"),
            }
            ctx.stop();
        }));
    }
}

impl Supervised for QueueConsumer {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        warn!(queue = %self.queue, "restarting consumer");
    }
}

async fn consume(
    queue: String,
    settings: QueueSettings,
    transport: Arc<dyn Transport>,
    executor: Arc<Executor>,
) -> Result<(), TransportError> {
    let mut subscription = match transport.subscribe(&queue, settings.prefetch).await {
        Ok(subscription) => subscription,
        Err(err) => {
            tokio::time::sleep(RETRY_PAUSE).await;
            return Err(err);
        }
    };
    let permits = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    loop {
        let permit = permits.clone().acquire_owned().await.map_err(|_| TransportError::Closed)?;
        let Some(delivery) = subscription.next().await else {
            return Ok(());
        };
        actix::spawn(handle_delivery(queue.clone(), transport.clone(), executor.clone(), delivery, permit));
    }
}

/// Decodes, claims, acknowledges (right after the claim commit, so a long job never holds a
/// broker delivery open), then runs. A message that is not a job id, names no job, or is
/// oversized goes to the dead letters. A claim that fails on the store is given back.
async fn handle_delivery(
    queue: String,
    transport: Arc<dyn Transport>,
    executor: Arc<Executor>,
    delivery: Delivery,
    _permit: OwnedSemaphorePermit,
) {
    let Delivery { body, acker } = delivery;
    let bad = if body.len() > MAX_MESSAGE_BYTES {
        Some(("oversized", None))
    } else {
        match decode_job_message(&body) {
            None => Some(("not_a_job_id", None)),
            Some(id) => match executor.claim(id).await {
                Ok(Claim::Missing) => Some(("unknown_job", Some(id))),
                Ok(Claim::NotClaimable) => {
                    settle(acker.ack().await);
                    return;
                }
                Ok(Claim::Claimed(job)) => {
                    settle(acker.ack().await);
                    executor.run(job).await;
                    return;
                }
                Err(err) => {
                    warn!(job_id = %id, error = %err, "claim failed; message requeued");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    settle(acker.requeue().await);
                    return;
                }
            },
        }
    };
    if let Some((reason, job_id)) = bad {
        warn!(queue = %queue, reason, job_id = ?job_id, bytes = body.len(), "dead-lettering a message");
        match transport.dead_letter(&queue, body, reason).await {
            Ok(()) => settle(acker.ack().await),
            Err(err) => {
                warn!(error = %err, "could not dead-letter; message requeued");
                tokio::time::sleep(RETRY_PAUSE).await;
                settle(acker.requeue().await);
            }
        }
    }
}

fn settle(result: Result<(), TransportError>) {
    if let Err(err) = result {
        warn!(error = %err, "could not settle a delivery; the transport will redeliver it");
    }
}
