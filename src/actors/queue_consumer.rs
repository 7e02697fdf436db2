//! `QueueConsumer`: consumes job ids and drives the two-session executor.
//!
//! The job row (its lease, renewed by a `Heartbeat` actor for the run) keeps a claimed job,
//! not the message; the delivery is still held until the operation returns, because an
//! unsettled delivery is what fills this process's window at the broker. Acknowledged at
//! the claim, the broker would hand the next message to a process with no free slot, where
//! it waits beside idle workers (and a frozen worker would swallow the job the reaper
//! re-queued). It is acknowledged as the outcome starts on its way, not once it is written:
//! the next delivery then travels while the outcome commits, instead of after, which a
//! worker far from its broker pays a round trip for per job; it waits for the slot only as
//! long as that commit takes.
//! A run that goes on past `ack_running_after` (below the broker's `consumer_timeout`, which
//! closes the channel of a delivery held longer) has its delivery acknowledged then: the
//! job's row and lease hold the run from its claim on. If the broker drops the channel
//! anyway, its redelivery finds the job RUNNING and is acknowledged unrun. A message that
//! is oversized, not a job id, or names no job goes to the dead letters; a claim that fails
//! on the store, or arrives while the process shuts down, gives the message back.
//!
//! A message may name several jobs of its queue (`ids_per_message`): each runs in a slot of
//! its own, and the message is settled once all have ended, so a crash at any point leaves
//! it unacknowledged and its redelivery runs whatever is still QUEUED.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::consumer::{dead_letter, requeue_later, settle, Consumer, DeliveryHandler, Slots, RETRY_PAUSE};
use super::heartbeat::run_with_heartbeat;
use crate::dispatch::{decode_job_message, encode_job_ids};
use crate::store::{JobStore, RunRef};
use crate::transport::{Delivery, Transport, MAX_MESSAGE_BYTES};
use crate::worker::{Claim, Executor, InFlight};
use uuid::Uuid;

/// The consumer of a job queue.
pub type QueueConsumer = Consumer<JobMessages>;

/// Handles job-id messages with the executor.
#[derive(Clone)]
pub struct JobMessages {
    executor: Arc<Executor>,
    store: Arc<dyn JobStore>,
    in_flight: Arc<InFlight>,
    heartbeat: Duration,
    /// A claimed run still going after this long has its delivery acknowledged.
    ack_running_after: Duration,
}

/// How one job of a delivery went, and so how the delivery is settled.
enum Step {
    /// Ran, or had nothing to run (taken, finished or cancelled by now).
    Done,
    /// No job has this id.
    Missing(Uuid),
    /// The store failed: the message comes back after a pause.
    ClaimFailed,
    /// The process is shutting down: the message goes back now.
    ShuttingDown,
}

impl JobMessages {
    pub fn new(
        executor: Arc<Executor>,
        store: Arc<dyn JobStore>,
        in_flight: Arc<InFlight>,
        heartbeat: Duration,
        ack_running_after: Duration,
    ) -> Self {
        JobMessages { executor, store, in_flight, heartbeat, ack_running_after }
    }

    /// Claims and runs one job; the slot (`permit`) is given back when it ends. `claimed`
    /// hears of a claim that succeeded, as the run begins.
    /// `returned` hears when its operation is done, as the outcome starts on its way.
    async fn run_one(
        &self,
        id: Uuid,
        permit: OwnedSemaphorePermit,
        claimed: Option<oneshot::Sender<()>>,
        returned: Option<oneshot::Sender<()>>,
    ) -> Step {
        // The in-flight slot is taken before the claim, so the shutdown guard sees every claim.
        let Some(mut slot) = self.in_flight.enter() else { return Step::ShuttingDown };
        let step = match self.executor.claim(id).await {
            Ok(Claim::Claimed(job)) => {
                let run = RunRef::from(&*job);
                let cancel = CancellationToken::new();
                slot.bind(run, cancel.clone());
                if let Some(claimed) = claimed {
                    let _ = claimed.send(());
                }
                run_with_heartbeat(&self.executor, self.store.clone(), self.heartbeat, job, cancel, returned).await;
                Step::Done
            }
            Ok(Claim::NotClaimable) => Step::Done,
            Ok(Claim::Missing) => Step::Missing(id),
            Err(err) => {
                warn!(job_id = %id, error = %err, "claim failed; message requeued");
                Step::ClaimFailed
            }
        };
        drop(slot);
        drop(permit);
        step
    }
}

#[async_trait]
impl DeliveryHandler for JobMessages {
    fn kind(&self) -> &'static str {
        "jobs"
    }

    /// Runs every job the message names, each in a slot of its own as slots come free (their
    /// claims share group commits), and settles the message once all have ended: acked, or
    /// given back when a job could not be claimed (its redelivery finds the others done).
    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery, mut slots: Slots) {
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            drop(slots);
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Some(ids) = decode_job_message(&body) else {
            drop(slots);
            return dead_letter(transport, queue, body, acker, "not_a_job_id").await;
        };
        let steps = match ids.as_slice() {
            [id] => match slots.take().await {
                Some(permit) => {
                    slots.done();
                    let (claimed, on_claim) = oneshot::channel();
                    let (returned, on_return) = oneshot::channel();
                    let run = self.run_one(*id, permit, Some(claimed), Some(returned));
                    tokio::pin!(run);
                    // Past its claim and `ack_running_after`, or once its operation has
                    // returned, the run holds the delivery no longer.
                    let let_go = async {
                        match on_claim.await {
                            Ok(()) => {
                                let returned = async { on_return.await.is_ok() };
                                tokio::select! {
                                    () = tokio::time::sleep(self.ack_running_after) => {}
                                    true = returned => {}
                                }
                            }
                            Err(_) => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        step = &mut run => vec![step],
                        () = let_go => {
                            settle(acker.ack().await);
                            run.await;
                            return;
                        }
                    }
                }
                None => vec![Step::ShuttingDown],
            },
            _ => {
                let total = ids.len();
                let mut runs = Vec::with_capacity(total);
                for id in ids {
                    let Some(permit) = slots.take().await else { break };
                    let this = self.clone();
                    runs.push(actix::spawn(async move { this.run_one(id, permit, None, None).await }));
                }
                slots.done();
                // A run that panicked lost nothing: its job's lease expires and the reaper
                // takes it; the message comes back as if its claim had failed.
                let mut steps: Vec<Step> =
                    join_all(runs).await.into_iter().map(|step| step.unwrap_or(Step::ClaimFailed)).collect();
                // Slots closed before every job had one: the rest run from the redelivery.
                if steps.len() < total {
                    steps.push(Step::ShuttingDown);
                }
                steps
            }
        };
        let missing: Vec<Uuid> =
            steps.iter().filter_map(|step| if let Step::Missing(id) = step { Some(*id) } else { None }).collect();
        if steps.iter().any(|step| matches!(step, Step::ShuttingDown)) {
            return settle(acker.requeue().await);
        }
        if steps.iter().any(|step| matches!(step, Step::ClaimFailed)) {
            return requeue_later(acker, RETRY_PAUSE).await;
        }
        match missing.as_slice() {
            [] => settle(acker.ack().await),
            // The whole message names no job: it goes to the dead letters as it came.
            _ if missing.len() == steps.len() => dead_letter(transport, queue, body, acker, "unknown_job").await,
            // The unknown ids go to the dead letters alone, then the message is done.
            _ => match transport.dead_letter(queue, encode_job_ids(&missing), "unknown_job").await {
                Ok(()) => settle(acker.ack().await),
                Err(err) => {
                    warn!(error = %err, "could not dead-letter unknown job ids; message requeued");
                    requeue_later(acker, RETRY_PAUSE).await;
                }
            },
        }
    }
}
