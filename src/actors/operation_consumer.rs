//! `OperationConsumer`: consumes serialised operation payloads and runs them directly, with
//! no job row per message: the high-throughput path for ephemeral batch queues, whose
//! progress is tracked on a parent job.
//!
//! Unlike a job message, an operation message is the only record of its work, so it is
//! acknowledged only after the operation finished. A coordinator's batch (a message with a
//! batch address) is skipped once its parent's run is over (read at most every 250 ms per
//! run), retried up to its budget, and
//! its outcome goes to the parent's write queue. A message that cannot be decoded, names
//! an unknown operation, carries an invalid payload, or fails is dead-lettered with the
//! reason (operators may replay it); RetryLater sends it to wait out its delay off the queue
//! (a broker wait queue, or a timer), holding no slot meanwhile.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::FutureExt as _;
use tracing::{debug, warn};

use super::consumer::{
    dead_letter, fail_stranded_job, requeue_later, settle, Consumer, DeliveryHandler, Slots, RETRY_PAUSE,
};
use crate::domain::scrub_nul;
use crate::domain::{BatchAddress, BatchOutcome, BatchResult};
pub use crate::ops::OperationMessage;
use crate::ops::{JobContext, OperationError, OperationRegistry, Services};
use crate::store::RunRef;
use crate::transport::{Acker, Delivery, Transport, MAX_MESSAGE_BYTES};
use crate::worker::{unstorable, INVALID_RESULT, OPERATION_PANICKED};

/// Longest a RetryLater batch is held back before it returns to the queue.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(300);

/// The consumer of an ephemeral operation queue.
pub type OperationConsumer = Consumer<OperationMessages>;

/// How long a coordinator's run, once read current, is taken as current for its next
/// batches: a batch of a run that ended meanwhile runs for nothing (its outcome never
/// counts), and one read of the parent serves every batch of the window.
const CURRENT_FOR: Duration = Duration::from_millis(250);

/// Runs operation messages from the registry.
pub struct OperationMessages {
    registry: Arc<OperationRegistry>,
    services: Arc<Services>,
    /// Coordinators' runs read current, and when.
    current: Mutex<HashMap<RunRef, Instant>>,
}

impl OperationMessages {
    pub fn new(registry: Arc<OperationRegistry>, services: Services) -> Self {
        OperationMessages { registry, services: Arc::new(services), current: Mutex::default() }
    }

    /// Whether `parent`'s run is still current, read at most once per [`CURRENT_FOR`].
    async fn run_is_current(&self, parent: RunRef) -> Result<bool, crate::store::StoreError> {
        let now = Instant::now();
        let fresh = |current: &HashMap<RunRef, Instant>| {
            current.get(&parent).is_some_and(|at| now.saturating_duration_since(*at) < CURRENT_FOR)
        };
        if fresh(&self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner())) {
            return Ok(true);
        }
        let current = self.services.store.run_is_current(parent).await?;
        let mut seen = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        seen.retain(|_, at| now.saturating_duration_since(*at) < CURRENT_FOR);
        match current {
            true => seen.insert(parent, now),
            false => seen.remove(&parent),
        };
        Ok(current)
    }
}

#[async_trait]
impl DeliveryHandler for OperationMessages {
    fn kind(&self) -> &'static str {
        "operations"
    }

    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery, mut slots: Slots) {
        // One slot, held until the work ends; the consumer may take its next delivery now.
        slots.done();
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Ok(message) = serde_json::from_slice::<OperationMessage>(&body) else {
            fail_stranded_job(self.services.store.as_ref(), queue, "operations", &body).await;
            return dead_letter(transport, queue, body, acker, "undecodable").await;
        };
        let Some(operation) = self.registry.get(&message.operation) else {
            let detail = format!("no operation named {:?} here", message.operation);
            return reject(transport, queue, body, acker, &message, "unknown_operation", detail).await;
        };
        if let Err(detail) = operation.validate(&message.payload) {
            return reject(transport, queue, body, acker, &message, "invalid_payload", detail).await;
        }
        if let Some(address) = message.batch.clone() {
            return self.run_batch(queue, transport, acker, message, address).await;
        }
        // Only a batch names its coordinator's run, so only a batch reports to a job's log.
        let ctx = JobContext::ephemeral(None, message.snapshot, self.services.clone());
        let outcome = AssertUnwindSafe(operation.execute(ctx, message.payload)).catch_unwind().await;
        match outcome {
            Ok(Ok(_)) => settle(acker.ack().await),
            Ok(Err(OperationError::RetryLater { delay, .. })) => {
                retry_later(transport, queue, body, acker, delay).await
            }
            Ok(Err(OperationError::Failed { class, .. })) => {
                dead_letter(transport, queue, body, acker, &format!("failed:{class}")).await
            }
            Err(_) => dead_letter(transport, queue, body, acker, "panicked").await,
        }
    }
}

/// RetryLater: the message goes to wait on the broker (or a timer) for `delay`, at most
/// [`MAX_RETRY_PAUSE`], and is acknowledged here, so no slot is held while it waits. If it
/// cannot be handed over, it is given back to the queue after a short pause instead.
async fn retry_later(transport: &dyn Transport, queue: &str, body: Vec<u8>, acker: Box<dyn Acker>, delay: Duration) {
    match transport.publish_after(queue, body, delay.min(MAX_RETRY_PAUSE)).await {
        Ok(()) => settle(acker.ack().await),
        Err(err) => {
            warn!(queue, error = %err, "could not defer a message; put back");
            requeue_later(acker, RETRY_PAUSE).await
        }
    }
}

/// A message that can never run is dead-lettered; a batch's fails its parent at once
/// instead, rather than leave it waiting for an outcome that will not come.
async fn reject(
    transport: &dyn Transport,
    queue: &str,
    body: Vec<u8>,
    acker: Box<dyn Acker>,
    message: &OperationMessage,
    reason: &str,
    detail: String,
) {
    if let Some(address) = &message.batch {
        let failed = BatchResult::Failed { error_code: reason.to_owned(), message: detail };
        if transport.publish(&address.write_queue, BatchOutcome::of(address, failed).encode()).await.is_ok() {
            return settle(acker.ack().await);
        }
    }
    dead_letter(transport, queue, body, acker, reason).await
}

impl OperationMessages {
    /// A coordinator's batch: skipped when its parent's run is over, else run, with a
    /// failure retried (re-sent with one failure more) up to its `max_retries`, and its
    /// outcome sent to the write queue before the message is acknowledged.
    async fn run_batch(
        &self,
        queue: &str,
        transport: &dyn Transport,
        acker: Box<dyn Acker>,
        message: OperationMessage,
        address: BatchAddress,
    ) {
        let parent = RunRef { id: address.parent_job_id, attempt: address.attempt };
        match self.run_is_current(parent).await {
            Ok(true) => {}
            Ok(false) => {
                debug!(parent = %parent.id, batch = address.index, "parent's run is over; batch skipped");
                return settle(acker.ack().await);
            }
            Err(err) => {
                warn!(error = %err, "cannot read a batch's parent; batch put back");
                return requeue_later(acker, RETRY_PAUSE).await;
            }
        }
        let Some(operation) = self.registry.get(&message.operation) else {
            return settle(acker.ack().await); // `handle` checked it
        };
        let ctx = JobContext::ephemeral(Some(parent), message.snapshot.clone(), self.services.clone());
        let executed = AssertUnwindSafe(operation.execute(ctx, message.payload.clone())).catch_unwind().await;
        let result = match executed {
            Ok(Ok(output)) => match unstorable(&output) {
                None => BatchResult::Succeeded { output },
                Some(message) => BatchResult::Failed { error_code: INVALID_RESULT.into(), message },
            },
            Ok(Err(OperationError::RetryLater { delay, .. })) => {
                return retry_later(transport, queue, message.encode(), acker, delay).await;
            }
            Ok(Err(OperationError::Failed { class, message })) => {
                BatchResult::Failed { error_code: scrub_nul(&class).into(), message: scrub_nul(&message).into() }
            }
            Err(_) => {
                BatchResult::Failed { error_code: OPERATION_PANICKED.into(), message: "the batch panicked".into() }
            }
        };
        let (target, body) = match result {
            BatchResult::Failed { .. } if address.failures < address.max_retries => {
                let retry = BatchAddress { failures: address.failures + 1, ..address };
                (queue.to_owned(), OperationMessage { batch: Some(retry), ..message }.encode())
            }
            result => (address.write_queue.clone(), BatchOutcome::of(&address, result).encode()),
        };
        match transport.publish(&target, body).await {
            Ok(()) => settle(acker.ack().await),
            // Run again later; its outcome still counts once.
            Err(err) => {
                warn!(error = %err, queue = %target, "could not send a batch's outcome; batch put back");
                requeue_later(acker, RETRY_PAUSE).await
            }
        }
    }
}
