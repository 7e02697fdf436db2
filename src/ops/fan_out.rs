//! Fan-out: a coordinator job splits its work into batches on an operations queue (or into
//! child jobs) and returns; the batches' outcomes, recorded from a write queue (or its
//! children's endings), close it.
//!
//! The run's batch count is committed before the first batch is sent, and the run is
//! deferred (it gives up its lease) only once every batch was confirmed. A coordinator that
//! dies in between leaves a leased run: the reaper re-queues it, the new run fans out
//! afresh, and outcomes for the old run are ignored.

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{info, warn};
use uuid::Uuid;

use super::{JobContext, OperationError};
use crate::domain::{BatchAddress, EventLevel, EventName, FanOutForm, Job, NewEvent, NewJob, RoomId};
use crate::store::RunRef;

/// Batch messages published at once, their confirms in flight together.
const PUBLISH_WINDOW: usize = 500;

/// Error class of a coordinator whose batches could not all be sent.
pub const FAN_OUT_FAILED: &str = "FanOutFailed";

/// One unit of work on an operations queue: everything the worker needs is in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationMessage {
    pub operation: String,
    #[serde(default)]
    pub payload: Value,
    /// The job whose event log this work reports to.
    #[serde(default)]
    pub parent_job_id: Option<Uuid>,
    /// Set on a coordinator's batch: where its outcome goes and what it counts towards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchAddress>,
    /// The coordinator's snapshot ([`JobContext::snapshot`]).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub snapshot: Value,
}

impl OperationMessage {
    /// Work with no parent and no batch address.
    pub fn new(operation: impl Into<String>, payload: Value) -> Self {
        OperationMessage {
            operation: operation.into(),
            payload,
            parent_job_id: None,
            batch: None,
            snapshot: Value::Null,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// How a coordinator splits its work.
#[derive(Debug, Clone)]
pub struct FanOut {
    /// The operation every batch runs.
    pub operation: String,
    /// The operations queue the batches go to (`kind = "operations"`).
    pub queue: String,
    /// The queue their outcomes go to (`kind = "writes"`).
    pub write_queue: String,
    /// Values resolved once by the coordinator and copied into every batch message, so
    /// batch workers never re-read rows that may change mid-run.
    pub snapshot: Value,
    /// One payload per batch.
    pub batches: Vec<Value>,
    /// Retries of a failed batch before its parent fails.
    pub max_retries: i32,
}

impl JobContext {
    /// Sends the batches and defers the job: once `execute` returns, the job stays RUNNING
    /// with `progress_total` batches, and the outcome that completes the count closes it
    /// (SUCCEEDED, or FAILED with `child.failed` when a batch fails after its retries).
    /// What `execute` returns afterwards is ignored. With no batches, nothing is deferred.
    pub async fn fan_out(&self, fan_out: FanOut) -> Result<(), OperationError> {
        let Some(job) = self.job() else {
            return Err(OperationError::new(FAN_OUT_FAILED, "only a job can fan out, not ephemeral work"));
        };
        if fan_out.batches.is_empty() {
            return Ok(());
        }
        let run = RunRef::from(job);
        let total = fan_out.batches.len() as i64;
        let store_failed = |err: crate::store::StoreError| OperationError::new(FAN_OUT_FAILED, err.to_string());
        if self.services.store.fan_out(run, total, FanOutForm::Batches).await.map_err(store_failed)?.is_none() {
            return Err(OperationError::new(FAN_OUT_FAILED, "the run is no longer current"));
        }
        let FanOut { operation, queue, write_queue, snapshot, batches, max_retries } = fan_out;
        let messages: Vec<Vec<u8>> = batches
            .into_iter()
            .enumerate()
            .map(|(index, payload)| {
                let address = BatchAddress {
                    parent_job_id: run.id,
                    attempt: run.attempt,
                    index: index as i64,
                    write_queue: write_queue.clone(),
                    failures: 0,
                    max_retries,
                };
                let message = OperationMessage {
                    operation: operation.clone(),
                    payload,
                    parent_job_id: Some(run.id),
                    batch: Some(address),
                    snapshot: snapshot.clone(),
                };
                message.encode()
            })
            .collect();
        // Several batches to a message where the queue asks for it (`batches_per_message`).
        let messages = crate::transport::bundle::pack(messages, self.services.dispatcher.per_message(&queue));
        for window in messages.chunks(PUBLISH_WINDOW) {
            // A coordinator's batches travel at its level.
            let priority = crate::store::level(job.effective_priority);
            let send = |message: &Vec<u8>| self.services.transport.publish_at(&queue, message.clone(), priority);
            let sent = join_all(window.iter().map(send)).await;
            if let Some(Err(err)) = sent.into_iter().find(Result::is_err) {
                return Err(OperationError::new(FAN_OUT_FAILED, format!("sending batches to {queue}: {err}")));
            }
        }
        self.defer(run).await;
        info!(job_id = %run.id, batches = total, %queue, "fanned out");
        self.report_unserved(run, &[&queue, &write_queue]).await;
        Ok(())
    }

    /// Says so, in the job's log and in this process's, when a queue its batches or their
    /// outcomes go to has no consumer anywhere: they wait until a worker for it starts.
    async fn report_unserved(&self, run: RunRef, queues: &[&str]) {
        for &queue in queues {
            match self.services.transport.consumers(queue).await {
                Ok(Some(0)) => {
                    warn!(job_id = %run.id, queue, "no process consumes this queue; the coordinator waits for one");
                    let message = format!("no worker consumes queue {queue:?}; start one (yardmaster worker) to go on");
                    let event = NewEvent::new(EventName::NO_CONSUMER)
                        .message(message)
                        .fields(serde_json::json!({ "queue": queue }))
                        .level(EventLevel::Warning);
                    if let Err(err) = self.services.store.record_event(run, event).await {
                        warn!(job_id = %run.id, error = %err, "could not record that a queue has no consumer");
                    }
                }
                Ok(_) => {}
                Err(err) => warn!(queue, error = %err, "cannot count a queue's consumers"),
            }
        }
    }

    /// Creates `children` as jobs of their own (with `parent_job_id`, their own lifecycle
    /// and events) and defers this job until they end: it closes SUCCEEDED once every child
    /// succeeded, or FAILED with `child.failed` when one fails or is cancelled. Children
    /// are keyed by this job and their place, so a re-run of the coordinator finds the
    /// children it made before instead of making more: it counts those that succeeded,
    /// runs again those that failed or were cancelled, and closes at once when none is left.
    pub async fn spawn_children(&self, children: Vec<NewJob>) -> Result<Vec<Job>, OperationError> {
        let Some(job) = self.job() else {
            return Err(OperationError::new(FAN_OUT_FAILED, "only a job can have children, not ephemeral work"));
        };
        if children.is_empty() {
            return Ok(Vec::new());
        }
        let run = RunRef::from(job);
        let store_failed = |err: crate::store::StoreError| OperationError::new(FAN_OUT_FAILED, err.to_string());
        let total = children.len() as i64;
        if self.services.store.fan_out(run, total, FanOutForm::Children).await.map_err(store_failed)?.is_none() {
            return Err(OperationError::new(FAN_OUT_FAILED, "the run is no longer current"));
        }
        let room = RoomId::parse(&job.room).map_err(|err| OperationError::new(FAN_OUT_FAILED, err))?;
        let children = children
            .into_iter()
            .enumerate()
            .map(|(index, child)| NewJob {
                // A child is always in its parent's room, whatever it asked.
                room: room.clone(),
                parent_job_id: Some(run.id),
                idempotency_key: Some(format!("{}:child:{index}", run.id)),
                submitted_by: job.submitted_by.clone(),
                // A child runs at its parent's priority.
                priority: crate::store::level(job.priority),
                ..child
            })
            .collect();
        let dispatcher = &self.services.dispatcher;
        let submissions = dispatcher.submit_many(children).await.map_err(store_failed)?;
        // A re-run (after a retry of the coordinator) runs again what failed or was cancelled.
        for child in self.services.store.rerun_children(run).await.map_err(store_failed)? {
            dispatcher.publish(&child).await;
        }
        self.defer(run).await;
        Ok(submissions.into_iter().map(|submission| submission.job).collect())
    }

    /// From here on the batches or children decide the job's outcome, whatever this run
    /// returns.
    async fn defer(&self, run: RunRef) {
        self.deferred.set();
        match self.services.store.defer(run).await {
            Ok(Some(_)) => {}
            Ok(None) => info!(job_id = %run.id, "the job was closed before it deferred"),
            // The run keeps its lease until it expires; the reaper re-queues it then.
            Err(err) => warn!(job_id = %run.id, error = %err, "could not defer; the lease will expire"),
        }
    }
}
