//! Getting committed jobs onto the transport: submit-then-publish, and the sweep that sends
//! QUEUED jobs whose message was never confirmed (lost to a crash or an outage) or whose
//! RetryLater delay is over.
//!
//! A job row is always committed before its message is published, and `published_at` is
//! written only after the transport confirmed it, so a job is never announced before it
//! exists and never stays QUEUED without a message for longer than one sweep.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tracing::{info, warn};
use uuid::Uuid;

use crate::domain::NewJob;
use crate::failpoint;
use crate::store::{Dispatch, JobStore, Requeue, StoreError, Submission};
use crate::transport::Transport;

/// The message body for a job: its id as text.
pub fn encode_job_message(id: Uuid) -> Vec<u8> {
    id.hyphenated().to_string().into_bytes()
}

/// Reads a job message; `None` for anything that is not a job id.
pub fn decode_job_message(body: &[u8]) -> Option<Uuid> {
    std::str::from_utf8(body).ok().and_then(|text| Uuid::parse_str(text.trim()).ok())
}

/// Commits jobs and announces them to workers.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn JobStore>,
    transport: Arc<dyn Transport>,
}

impl Dispatcher {
    pub fn new(store: Arc<dyn JobStore>, transport: Arc<dyn Transport>) -> Self {
        Dispatcher { store, transport }
    }

    /// Commits the job, then publishes it. A failed publish is logged, not returned: the job
    /// is durable and QUEUED, and the sweep sends it.
    pub async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        let submission = self.store.submit(job).await?;
        failpoint::hit("submit.after_commit");
        if submission.created {
            let job = &submission.job;
            let dispatch = Dispatch { id: job.id, queue: job.queue.clone(), attempts: job.attempts };
            self.publish_all(std::slice::from_ref(&dispatch)).await;
        }
        Ok(submission)
    }

    /// Commits the jobs in one transaction (all or nothing), then publishes the new ones
    /// with their confirms in flight together. Publish failures are left to the sweep.
    pub async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        let submissions = self.store.submit_many(jobs).await?;
        failpoint::hit("submit.after_commit");
        let created: Vec<Dispatch> = submissions
            .iter()
            .filter(|submission| submission.created)
            .map(|Submission { job, .. }| Dispatch { id: job.id, queue: job.queue.clone(), attempts: job.attempts })
            .collect();
        self.publish_all(&created).await;
        Ok(submissions)
    }

    /// Publishes jobs concurrently and records which the transport confirmed; returns how
    /// many were confirmed. Failures are logged and left to the sweep.
    pub async fn publish_all(&self, jobs: &[Dispatch]) -> u64 {
        if jobs.is_empty() {
            return 0;
        }
        let sends = jobs.iter().map(|job| self.transport.publish(&job.queue, encode_job_message(job.id)));
        let results = join_all(sends).await;
        let mut confirmed = Vec::with_capacity(jobs.len());
        for (job, result) in jobs.iter().zip(results) {
            match result {
                Ok(()) => confirmed.push(job.clone()),
                Err(err) => {
                    warn!(job_id = %job.id, queue = %job.queue, error = %err, "publish failed; the sweep will resend")
                }
            }
        }
        if let Err(err) = self.store.mark_published(&confirmed).await {
            // The messages are out; at worst the sweep sends them again, and a duplicate
            // delivery finds the job already claimed.
            warn!(error = %err, "could not record publications");
        }
        confirmed.len() as u64
    }

    /// One sweep: sends up to `batch` jobs that are due and unpublished. Returns how many
    /// were confirmed.
    pub async fn sweep_once(&self, grace: Duration, batch: u64) -> Result<u64, StoreError> {
        let due = self.store.due_for_dispatch(grace, batch).await?;
        if due.is_empty() {
            return Ok(0);
        }
        let sent = self.publish_all(&due).await;
        info!(due = due.len(), sent, "dispatch sweep sent queued jobs");
        Ok(sent)
    }

    /// At start-up: with a transport that kept nothing (in-process), every QUEUED job lost
    /// its message; then sends everything due, whatever its age.
    pub async fn recover(&self, batch: u64) -> Result<u64, StoreError> {
        if !self.transport.is_durable() {
            self.store.forget_publications().await?;
            self.rerun_lost_fan_outs(batch).await?;
        }
        let mut sent = 0;
        loop {
            let round = self.sweep_once(Duration::ZERO, batch).await?;
            sent += round;
            if round < batch {
                return Ok(sent);
            }
        }
    }

    /// Coordinators whose batches were in the memory of the process that stopped run again
    /// (their new run sends new batches; outcomes of the old run never count).
    async fn rerun_lost_fan_outs(&self, batch: u64) -> Result<(), StoreError> {
        loop {
            let runs = self.store.batch_fan_outs(batch).await?;
            for &run in &runs {
                if self.store.requeue(run, &Requeue::BatchesLost).await?.is_some() {
                    tracing::info!(job_id = %run.id, "coordinator re-queued: its batches were lost with the process");
                }
            }
            if (runs.len() as u64) < batch {
                return Ok(());
            }
        }
    }

    /// Publishes one QUEUED job now (a manual retry); the sweep covers a failure.
    pub async fn publish(&self, job: &crate::domain::Job) {
        self.publish_all(&[Dispatch { id: job.id, queue: job.queue.clone(), attempts: job.attempts }]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_messages_round_trip_and_reject_garbage() {
        let id = Uuid::now_v7();
        assert_eq!(decode_job_message(&encode_job_message(id)), Some(id));
        assert_eq!(decode_job_message(b"not a uuid"), None);
        assert_eq!(decode_job_message(&[0xff, 0xfe]), None);
    }
}
