//! `QueueConsumer`: a supervised actor per queue that pulls job messages from the transport
//! and drives the two-session executor, at most `concurrency` jobs at a time.
//!
//! A delivery is acknowledged only after the executor has committed what it caused; if the
//! claim cannot be made (database down) the message goes back to the queue. When the
//! subscription fails the actor stops and its supervisor starts it again.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use crate::dispatch::decode_job_message;
use crate::transport::{Delivery, Transport, TransportError};
use crate::worker::Executor;

/// Pause before a failed subscription is retried, or a claim that hit a store error.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub struct QueueConsumer {
    queue: String,
    /// Jobs of this queue running at once in this process.
    concurrency: usize,
    transport: Arc<dyn Transport>,
    executor: Arc<Executor>,
}

impl QueueConsumer {
    pub fn new(
        queue: String,
        concurrency: usize,
        transport: Arc<dyn Transport>,
        executor: Arc<Executor>,
    ) -> Self {
        QueueConsumer {
            queue,
            concurrency: concurrency.max(1),
            transport,
            executor,
        }
    }

    /// Starts the consumer under a supervisor on the current arbiter.
    pub fn start_supervised(self) -> Addr<Self> {
        Supervisor::start(move |_| self)
    }
}

impl Actor for QueueConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        info!(queue = %self.queue, concurrency = self.concurrency, "consumer started");
        let consume = consume(
            self.queue.clone(),
            self.concurrency,
            self.transport.clone(),
            self.executor.clone(),
        );
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
    concurrency: usize,
    transport: Arc<dyn Transport>,
    executor: Arc<Executor>,
) -> Result<(), TransportError> {
    let prefetch = u16::try_from(concurrency).unwrap_or(u16::MAX);
    let mut subscription = match transport.subscribe(&queue, prefetch).await {
        Ok(subscription) => subscription,
        Err(err) => {
            tokio::time::sleep(RETRY_PAUSE).await;
            return Err(err);
        }
    };
    let permits = Arc::new(Semaphore::new(concurrency));
    loop {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| TransportError::Closed)?;
        let Some(delivery) = subscription.next().await else {
            return Ok(());
        };
        actix::spawn(handle_delivery(executor.clone(), delivery, permit));
    }
}

async fn handle_delivery(
    executor: Arc<Executor>,
    delivery: Delivery,
    _permit: OwnedSemaphorePermit,
) {
    let Some(id) = decode_job_message(&delivery.body) else {
        warn!(
            bytes = delivery.body.len(),
            "message is not a job id; dropped"
        );
        settle(delivery.acker.ack().await);
        return;
    };
    match executor.handle_job(id).await {
        Ok(_) => settle(delivery.acker.ack().await),
        Err(err) => {
            warn!(job_id = %id, error = %err, "claim failed; message requeued");
            tokio::time::sleep(RETRY_PAUSE).await;
            settle(delivery.acker.requeue().await);
        }
    }
}

fn settle(result: Result<(), TransportError>) {
    if let Err(err) = result {
        warn!(error = %err, "could not settle a delivery; the transport will redeliver it");
    }
}
