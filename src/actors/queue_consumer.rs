//! `QueueConsumer`: consumes job ids and drives the two-session executor.
//!
//! A delivery is acknowledged right after the claim commits: from then on the job row (its
//! lease) keeps the job, not the message, so a long job never holds a broker delivery open.
//! A message that is oversized, not a job id, or names no job goes to the dead letters; a
//! claim that fails on the store gives the message back.

use std::sync::Arc;

use async_trait::async_trait;
use tracing::warn;

use super::consumer::{dead_letter, requeue_later, settle, Consumer, DeliveryHandler, RETRY_PAUSE};
use crate::dispatch::decode_job_message;
use crate::transport::{Delivery, Transport, MAX_MESSAGE_BYTES};
use crate::worker::{Claim, Executor};

/// The consumer of a job queue.
pub type QueueConsumer = Consumer<JobMessages>;

/// Handles job-id messages with the executor.
pub struct JobMessages {
    executor: Arc<Executor>,
}

impl JobMessages {
    pub fn new(executor: Arc<Executor>) -> Self {
        JobMessages { executor }
    }
}

#[async_trait]
impl DeliveryHandler for JobMessages {
    fn kind(&self) -> &'static str {
        "jobs"
    }

    async fn handle(&self, queue: &str, transport: &dyn Transport, delivery: Delivery) {
        let Delivery { body, acker } = delivery;
        if body.len() > MAX_MESSAGE_BYTES {
            return dead_letter(transport, queue, body, acker, "oversized").await;
        }
        let Some(id) = decode_job_message(&body) else {
            return dead_letter(transport, queue, body, acker, "not_a_job_id").await;
        };
        match self.executor.claim(id).await {
            Ok(Claim::Claimed(job)) => {
                settle(acker.ack().await);
                self.executor.run(*job).await;
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
