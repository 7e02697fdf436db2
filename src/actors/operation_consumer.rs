//! `OperationConsumer`: consumes serialised operation payloads and runs them directly, with
//! no job row per message: the high-throughput path for ephemeral batch queues, whose
//! progress is tracked on a parent job.
//!
//! Unlike a job message, an operation message is the only record of its work, so it is
//! acknowledged only after the operation finished. A coordinator's batch (a message with a
//! batch address) is skipped once its parent's run is over (read at most every 250 ms per
//! run), retried up to its budget, and its outcome goes to the parent's write queue; a
//! message may carry several batches (`batches_per_message`), whose outcomes then travel
//! together. A batch that can never run (an unknown operation, a payload refused) fails its
//! parent. Other work that cannot be decoded, names an unknown operation, carries an invalid
//! payload, or fails is dead-lettered with the reason (operators may replay it); RetryLater
//! sends a message to wait out its delay off the queue (a broker wait queue, or a timer),
//! holding no slot meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::{join_all, BoxFuture};
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
use crate::transport::{bundle, Acker, Delivery, Transport, TransportError, MAX_MESSAGE_BYTES};
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
#[derive(Clone)]
pub struct OperationMessages {
    registry: Arc<OperationRegistry>,
    services: Arc<Services>,
    /// Coordinators' runs read current, and when.
    current: Arc<Mutex<HashMap<RunRef, Instant>>>,
}

/// What became of one batch of a message, and so what the message sends on.
enum Step {
    /// Its parent's run is over: nothing to send.
    Skipped,
    /// Its outcome, for the parent's write queue.
    Outcome(BatchOutcome, String),
    /// Failed within its retries: sent again, with one failure more.
    Retry(OperationMessage),
    /// It asked to run again after a delay (RetryLater).
    Later(OperationMessage, Duration),
    /// Its parent could not be read: the whole message comes back after a pause.
    PutBack,
}

impl OperationMessages {
    pub fn new(registry: Arc<OperationRegistry>, services: Services) -> Self {
        OperationMessages { registry, services: Arc::new(services), current: Arc::default() }
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
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            slots.done();
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Some(messages) = bundle::unpack::<OperationMessage>(&body) else {
            slots.done();
            fail_stranded_job(self.services.store.as_ref(), queue, "operations", &body).await;
            return dead_letter(transport, queue, body, acker, "undecodable").await;
        };
        if messages.iter().all(|message| message.batch.is_some()) {
            return self.run_batches(queue, transport, acker, messages, slots).await;
        }
        // One slot, held until the work ends; the consumer may take its next delivery now.
        slots.done();
        // Work that is not a coordinator's batch travels alone.
        let Ok([message]) = <[OperationMessage; 1]>::try_from(messages) else {
            return dead_letter(transport, queue, body, acker, "undecodable").await;
        };
        let Some(operation) = self.registry.get(&message.operation) else {
            return dead_letter(transport, queue, body, acker, "unknown_operation").await;
        };
        if operation.validate(&message.payload).is_err() {
            return dead_letter(transport, queue, body, acker, "invalid_payload").await;
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

impl OperationMessages {
    /// A message of coordinators' batches (one, or several: `batches_per_message`): each
    /// runs in a slot of its own as slots come free, then their outcomes go to their write
    /// queues in one message per queue, the failed ones within their retries back to this
    /// queue, and the message is acknowledged once all of that is confirmed. A crash before
    /// then leaves it unacknowledged: its redelivery runs its batches again, and an outcome
    /// counts once per batch and run.
    async fn run_batches(
        &self,
        queue: &str,
        transport: &dyn Transport,
        acker: Box<dyn Acker>,
        messages: Vec<OperationMessage>,
        mut slots: Slots,
    ) {
        let total = messages.len();
        let steps: Vec<Step> = match <[OperationMessage; 1]>::try_from(messages) {
            // One batch (the default) runs here, in the delivery's own slot.
            Ok([message]) => {
                slots.done();
                vec![self.run_batch(message).await]
            }
            Err(messages) => {
                let mut runs = Vec::with_capacity(total);
                for message in messages {
                    let Some(permit) = slots.take().await else { break };
                    let this = self.clone();
                    runs.push(actix::spawn(async move {
                        let step = this.run_batch(message).await;
                        drop(permit);
                        step
                    }));
                }
                slots.done();
                // A run that panicked outside its operation lost nothing: the message comes back.
                join_all(runs).await.into_iter().map(|step| step.unwrap_or(Step::PutBack)).collect()
            }
        };
        if steps.len() < total {
            // Slots closed (shutdown) before every batch had one: all of it runs again.
            return settle(acker.requeue().await);
        }
        if steps.iter().any(|step| matches!(step, Step::PutBack)) {
            return requeue_later(acker, RETRY_PAUSE).await;
        }
        let mut outcomes: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        let (mut retries, mut later) = (Vec::new(), Vec::new());
        for step in steps {
            match step {
                Step::Outcome(outcome, write_queue) => outcomes.entry(write_queue).or_default().push(outcome.encode()),
                Step::Retry(message) => retries.push(message.encode()),
                Step::Later(message, delay) => later.push((message.encode(), delay)),
                Step::Skipped | Step::PutBack => {}
            }
        }
        let mut sends: Vec<BoxFuture<'_, Result<(), TransportError>>> = Vec::new();
        for (write_queue, items) in outcomes {
            let per_message = items.len();
            for body in bundle::pack(items, per_message) {
                let write_queue = write_queue.clone();
                sends.push(Box::pin(async move { transport.publish(&write_queue, body).await }));
            }
        }
        let per_message = retries.len();
        for body in bundle::pack(retries, per_message) {
            sends.push(Box::pin(transport.publish(queue, body)));
        }
        for (body, delay) in later {
            sends.push(Box::pin(transport.publish_after(queue, body, delay.min(MAX_RETRY_PAUSE))));
        }
        match join_all(sends).await.into_iter().find_map(Result::err) {
            None => settle(acker.ack().await),
            // Run again later; each outcome still counts once.
            Some(err) => {
                warn!(error = %err, queue, "could not send on what a message of batches produced; put back");
                requeue_later(acker, RETRY_PAUSE).await
            }
        }
    }

    /// One batch: refused for good when it can never run (an unknown operation, a payload
    /// the operation rejects), skipped when its parent's run is over, else run.
    async fn run_batch(&self, message: OperationMessage) -> Step {
        let Some(address) = message.batch.clone() else { return Step::Skipped };
        let failed = |error_code: &str, message: String| {
            let result = BatchResult::Failed { error_code: error_code.to_owned(), message };
            Step::Outcome(BatchOutcome::of(&address, result), address.write_queue.clone())
        };
        let Some(operation) = self.registry.get(&message.operation) else {
            return failed("unknown_operation", format!("no operation named {:?} here", message.operation));
        };
        if let Err(detail) = operation.validate(&message.payload) {
            return failed("invalid_payload", detail);
        }
        let parent = RunRef { id: address.parent_job_id, attempt: address.attempt };
        match self.run_is_current(parent).await {
            Ok(true) => {}
            Ok(false) => {
                debug!(parent = %parent.id, batch = address.index, "parent's run is over; batch skipped");
                return Step::Skipped;
            }
            Err(err) => {
                warn!(error = %err, "cannot read a batch's parent; batch put back");
                return Step::PutBack;
            }
        }
        let ctx = JobContext::ephemeral(Some(parent), message.snapshot.clone(), self.services.clone());
        let executed = AssertUnwindSafe(operation.execute(ctx, message.payload.clone())).catch_unwind().await;
        let result = match executed {
            Ok(Ok(output)) => match unstorable(&output) {
                None => BatchResult::Succeeded { output },
                Some(message) => BatchResult::Failed { error_code: INVALID_RESULT.into(), message },
            },
            Ok(Err(OperationError::RetryLater { delay, .. })) => return Step::Later(message, delay),
            Ok(Err(OperationError::Failed { class, message })) => {
                BatchResult::Failed { error_code: scrub_nul(&class).into(), message: scrub_nul(&message).into() }
            }
            Err(_) => {
                BatchResult::Failed { error_code: OPERATION_PANICKED.into(), message: "the batch panicked".into() }
            }
        };
        match result {
            BatchResult::Failed { .. } if address.failures < address.max_retries => {
                let retry = BatchAddress { failures: address.failures + 1, ..address };
                Step::Retry(OperationMessage { batch: Some(retry), ..message })
            }
            result => Step::Outcome(BatchOutcome::of(&address, result), address.write_queue),
        }
    }
}
