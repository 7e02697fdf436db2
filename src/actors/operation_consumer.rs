//! `OperationConsumer`: consumes serialised operation payloads and runs them directly, with
//! no job row per message: the high-throughput path for ephemeral batch queues, whose
//! progress is tracked on a parent job.
//!
//! Unlike a job message, a batch message is the only record of its work, so it is
//! acknowledged only after the operation finished. A message that cannot be decoded, names
//! an unknown operation, carries an invalid payload, or fails is dead-lettered with the
//! reason (operators may replay it); RetryLater gives it back to the queue after the delay.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::consumer::{dead_letter, requeue_later, settle, Consumer, DeliveryHandler};
use crate::ops::{JobContext, OperationError, OperationRegistry};
use crate::store::JobStore;
use crate::transport::{Delivery, Transport, MAX_MESSAGE_BYTES};

/// Longest a RetryLater batch is held back before it returns to the queue.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(300);

/// The consumer of an ephemeral operation queue.
pub type OperationConsumer = Consumer<OperationMessages>;

/// One unit of ephemeral work: everything the worker needs is in the message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationMessage {
    pub operation: String,
    #[serde(default)]
    pub payload: Value,
    /// The job whose event log this work reports to.
    #[serde(default)]
    pub parent_job_id: Option<Uuid>,
}

impl OperationMessage {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Runs operation messages from the registry.
pub struct OperationMessages {
    registry: Arc<OperationRegistry>,
    store: Arc<dyn JobStore>,
    db: DatabaseConnection,
}

impl OperationMessages {
    pub fn new(registry: Arc<OperationRegistry>, store: Arc<dyn JobStore>, db: DatabaseConnection) -> Self {
        OperationMessages { registry, store, db }
    }
}

#[async_trait]
impl DeliveryHandler for OperationMessages {
    fn kind(&self) -> &'static str {
        "operations"
    }

    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery) {
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Ok(message) = serde_json::from_slice::<OperationMessage>(&body) else {
            return dead_letter(transport, queue, body, acker, "undecodable").await;
        };
        let Some(operation) = self.registry.get(&message.operation) else {
            return dead_letter(transport, queue, body, acker, "unknown_operation").await;
        };
        if operation.validate(&message.payload).is_err() {
            return dead_letter(transport, queue, body, acker, "invalid_payload").await;
        }
        let ctx = JobContext::ephemeral(message.parent_job_id, self.store.clone(), self.db.clone());
        let outcome = AssertUnwindSafe(operation.execute(ctx, message.payload)).catch_unwind().await;
        match outcome {
            Ok(Ok(_)) => settle(acker.ack().await),
            Ok(Err(OperationError::RetryLater { delay, .. })) => requeue_later(acker, delay.min(MAX_RETRY_PAUSE)).await,
            Ok(Err(OperationError::Failed { class, .. })) => {
                dead_letter(transport, queue, body, acker, &format!("failed:{class}")).await
            }
            Err(_) => dead_letter(transport, queue, body, acker, "panicked").await,
        }
    }
}
