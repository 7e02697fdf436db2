//! `QueueConsumer`: consumes job ids and drives the two-session executor.
//!
//! The job row (its lease, renewed by a `Heartbeat` actor for the run) keeps a claimed job,
//! not the message; the delivery is still held until the run ends, because an unsettled
//! delivery is what fills this process's window at the broker. Acknowledged at the claim,
//! the broker would hand the next message to a process with no free slot, where it waits
//! beside idle workers (and a frozen worker would swallow the job the reaper re-queued).
//! If the broker drops the channel meanwhile, its redelivery finds the job RUNNING and is
//! acknowledged unrun. A message that is oversized, not a job id, or names no job goes to
//! the dead letters; a claim that fails on the store, or arrives while the process shuts
//! down, gives the message back.

use std::sync::Arc;
use std::time::Duration;

use actix::Actor as _;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::consumer::{dead_letter, requeue_later, settle, Consumer, DeliveryHandler, RETRY_PAUSE};
use super::heartbeat::{Heartbeat, StopHeartbeat};
use crate::dispatch::decode_job_message;
use crate::store::{JobStore, RunRef};
use crate::transport::{Delivery, Transport, MAX_MESSAGE_BYTES};
use crate::worker::{Claim, Executor, InFlight};

/// The consumer of a job queue.
pub type QueueConsumer = Consumer<JobMessages>;

/// Handles job-id messages with the executor.
pub struct JobMessages {
    executor: Arc<Executor>,
    store: Arc<dyn JobStore>,
    in_flight: Arc<InFlight>,
    heartbeat: Duration,
}

impl JobMessages {
    pub fn new(
        executor: Arc<Executor>,
        store: Arc<dyn JobStore>,
        in_flight: Arc<InFlight>,
        heartbeat: Duration,
    ) -> Self {
        JobMessages { executor, store, in_flight, heartbeat }
    }
}

#[async_trait]
impl DeliveryHandler for JobMessages {
    fn kind(&self) -> &'static str {
        "jobs"
    }

    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery) {
        let Delivery { body, acker } = delivery;
        // The slot is taken before the claim, so the shutdown guard sees every claim.
        let Some(mut slot) = self.in_flight.enter() else {
            return settle(acker.requeue().await);
        };
        if body.len() > MAX_MESSAGE_BYTES {
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Some(id) = decode_job_message(&body) else {
            return dead_letter(transport, queue, body, acker, "not_a_job_id").await;
        };
        match self.executor.claim(id).await {
            Ok(Claim::Claimed(job)) => {
                let run = RunRef::from(&*job);
                let cancel = CancellationToken::new();
                slot.bind(run, cancel.clone());
                let lease = self.executor.config().lease;
                let heartbeat = Heartbeat::new(run, self.store.clone(), lease, self.heartbeat, cancel.clone()).start();
                // Stops the heartbeat however the run ends, a panic included.
                let stop = StopOnDrop(heartbeat);
                self.executor.run(*job, cancel).await;
                drop(stop);
                settle(acker.ack().await);
            }
            Ok(Claim::NotClaimable) => settle(acker.ack().await),
            Ok(Claim::Missing) => dead_letter(transport, queue, body, acker, "unknown_job").await,
            Err(err) => {
                warn!(job_id = %id, error = %err, "claim failed; message requeued");
                requeue_later(acker, RETRY_PAUSE).await;
            }
        }
    }
}

/// Sends [`StopHeartbeat`] when dropped.
struct StopOnDrop(actix::Addr<Heartbeat>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.do_send(StopHeartbeat);
    }
}
