//! `WriteConsumer`: records the outcomes coordinators' batches send to a write queue, one or
//! several to a message. A message is acknowledged once every outcome in it is committed;
//! one the store cannot take now goes back to the queue, and a redelivered outcome counts
//! once (the store keys outcomes by batch).

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::join_all;
use tracing::{debug, warn};

use super::consumer::{
    dead_letter, fail_stranded_job, requeue_later, settle, Consumer, DeliveryHandler, Slots, RETRY_PAUSE,
};
use crate::domain::BatchOutcome;
use crate::ops::OperationRegistry;
use crate::store::JobStore;
use crate::transport::{bundle, Delivery, Transport, MAX_MESSAGE_BYTES};

/// The consumer of a write queue.
pub type WriteConsumer = Consumer<BatchWrites>;

/// Records batch outcomes in the store.
pub struct BatchWrites {
    store: Arc<dyn JobStore>,
    /// Folds a coordinator's batch outputs into its result when the last one arrives.
    registry: Arc<OperationRegistry>,
}

impl BatchWrites {
    pub fn new(store: Arc<dyn JobStore>, registry: Arc<OperationRegistry>) -> Self {
        BatchWrites { store, registry }
    }
}

#[async_trait]
impl DeliveryHandler for BatchWrites {
    fn kind(&self) -> &'static str {
        "writes"
    }

    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery, mut slots: Slots) {
        // One slot, held until the work ends; the consumer may take its next delivery now.
        slots.done();
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Some(outcomes) = bundle::unpack::<BatchOutcome>(&body) else {
            fail_stranded_job(self.store.as_ref(), queue, "batch outcomes", &body).await;
            return dead_letter(transport, queue, body, acker, "undecodable").await;
        };
        // The outcomes of one message share the store's group commits.
        let records = outcomes.into_iter().map(|outcome| async move {
            let (parent, index) = (outcome.parent_job_id, outcome.index);
            let recorded = self.store.record_batch(outcome, self.registry.clone()).await;
            match &recorded {
                Ok(recorded) => debug!(%parent, batch = index, ?recorded, "batch outcome recorded"),
                Err(err) => warn!(%parent, batch = index, error = %err, "could not record a batch outcome; put back"),
            }
            recorded
        });
        match join_all(records).await.iter().all(Result::is_ok) {
            true => settle(acker.ack().await),
            // Those recorded already count once when the message comes back.
            false => requeue_later(acker, RETRY_PAUSE).await,
        }
    }
}
