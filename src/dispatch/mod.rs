//! Getting committed jobs onto the transport: submit-then-publish, and the sweep that sends
//! QUEUED jobs whose message was never confirmed (lost to a crash or an outage) or whose
//! RetryLater delay is over.
//!
//! A job row is always committed before its message is published, so a job is never
//! announced before it exists. A submission's jobs are written published; on a durable
//! transport the same transaction writes an outbox row naming them, deleted once every
//! message is confirmed, and a row left older than the grace hands its jobs back to the
//! sweep. A job the sweep sends gets `published_at` once the transport confirmed it. So no
//! job stays QUEUED without a message for longer than the grace and a sweep.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tracing::{info, warn};
use uuid::Uuid;

mod dependencies;
mod release;

pub use dependencies::{DependencyWatch, Settler};
pub use release::{LimitWatch, Releaser, QUIET};

use crate::domain::{NewJob, QueueName};
use crate::failpoint;
use crate::store::{Dispatch, JobStore, Requeue, StoreError, Submission};
use crate::transport::Transport;

/// Most job ids one message carries (`queues.<name>.ids_per_message` is capped here).
pub const MAX_IDS_PER_MESSAGE: usize = 1000;

/// The message body for a job: its id as text.
pub fn encode_job_message(id: Uuid) -> Vec<u8> {
    encode_job_ids(&[id])
}

/// The message body for several jobs of one queue: their ids as text, a line each. A
/// worker claims them together and acknowledges the message once every one has ended.
pub fn encode_job_ids(ids: &[Uuid]) -> Vec<u8> {
    let mut body = Vec::with_capacity(ids.len() * 37);
    for (n, id) in ids.iter().enumerate() {
        if n > 0 {
            body.push(b'\n');
        }
        body.extend_from_slice(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()).as_bytes());
    }
    body
}

/// Reads a job message: its ids, in order, each once; `None` for anything that is not one
/// to [`MAX_IDS_PER_MESSAGE`] job ids, a line each.
pub fn decode_job_message(body: &[u8]) -> Option<Vec<Uuid>> {
    let text = std::str::from_utf8(body).ok()?.trim();
    let mut ids = Vec::new();
    for line in text.split('\n') {
        let id = Uuid::parse_str(line.trim()).ok()?;
        if ids.len() == MAX_IDS_PER_MESSAGE {
            return None;
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Some(ids)
}

/// A submission task that panicked or was cancelled with its runtime: its outcome is unknown
/// to the caller, as after a lost connection, and an idempotency key finds it again.
fn abandoned(err: tokio::task::JoinError) -> StoreError {
    StoreError::Unavailable(format!("submission did not complete: {err}"))
}

/// Commits jobs and announces them to workers.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn JobStore>,
    transport: Arc<dyn Transport>,
    /// What one message carries, by queue: job ids, or batches on an operations queue (1
    /// where not named).
    grouping: Arc<HashMap<String, usize>>,
    /// Rung when this process commits a job that waits for a time: the dispatch sweep
    /// learns at once when to wake, not at its next tick.
    waiting: Arc<Notify>,
    /// A QUEUED job of a level above 0 rises one level per this much waiting; `None`: never.
    aging: Option<Duration>,
}

impl Dispatcher {
    pub fn new(store: Arc<dyn JobStore>, transport: Arc<dyn Transport>) -> Self {
        Dispatcher { store, transport, grouping: Arc::default(), waiting: Arc::default(), aging: None }
    }

    /// The store it commits to.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Raises a waiting job one level (toward 0) per `step` it waits, so a stream of
    /// urgent work cannot starve it; `None` or zero: levels never change.
    pub fn with_aging(mut self, step: Option<Duration>) -> Self {
        self.aging = step.filter(|step| !step.is_zero());
        self
    }

    /// When a job of `priority` submitted now first rises: a step after it may start.
    fn first_rise(&self, job: &NewJob) -> Option<chrono::DateTime<chrono::Utc>> {
        let step = self.aging.filter(|_| job.priority > 0)?;
        let start = job.run_after.map_or_else(crate::store::clock::now, |at| at.max(crate::store::clock::now()));
        Some(start + chrono::Duration::from_std(step).ok()?)
    }

    /// What one message of each queue carries (`QueueSettings::per_message`): up to that
    /// many jobs of a job queue published together (a batch submission, a sweep), or a
    /// coordinator's batches on an operations queue.
    pub fn with_grouping(mut self, per_message: HashMap<String, usize>) -> Self {
        self.grouping = Arc::new(per_message);
        self
    }

    fn ids_per_message(&self, queue: &str) -> usize {
        self.per_message(queue).min(MAX_IDS_PER_MESSAGE)
    }

    /// Items one message of `queue` carries: 1 unless its settings ask for more.
    pub fn per_message(&self, queue: &str) -> usize {
        self.grouping.get(queue).copied().unwrap_or(1).max(1)
    }

    /// Commits the job, then publishes it. A failed publish is logged, not returned: the job
    /// is durable and QUEUED, and the sweep sends it.
    ///
    /// Runs detached: a caller that goes away (an HTTP client disconnecting drops its
    /// handler's future) cannot stop it between the commit and the announcement, which in
    /// process would leave a row marked published with no message until a restart.
    pub async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        let this = self.clone();
        tokio::spawn(async move { this.commit_and_announce(job).await }).await.map_err(abandoned)?
    }

    async fn commit_and_announce(&self, mut job: NewJob) -> Result<Submission, StoreError> {
        let outbox = self.outbox();
        self.prepare(&mut job, outbox);
        let submission = self.store.submit(job).await?;
        failpoint::hit("submit.after_commit");
        // A job that waits for its time is sent by the sweep when it is due.
        if submission.created && submission.job.run_after.is_some() {
            self.waiting.notify_one();
        }
        // A job written unsent (its limit holds it, it waits for a time or for other jobs)
        // is sent when it is released or due.
        if submission.created && submission.job.published_at.is_some() {
            self.announce(&[Dispatch::of(&submission.job)], outbox).await;
        }
        Ok(submission)
    }

    /// A submission's outbox row, on a durable transport: its jobs are written published,
    /// and the row records that their messages are not confirmed yet.
    fn outbox(&self) -> Option<Uuid> {
        self.transport.is_durable().then(Uuid::now_v7)
    }

    /// Sets what the store writes of a job's dispatch: published at its commit (and named by
    /// `outbox` until the transport confirms it, on a durable transport), and when its level
    /// first rises.
    fn prepare(&self, job: &mut NewJob, outbox: Option<Uuid>) {
        // A pulled queue's job is announced by its commit: its claimers take it.
        job.announced = true;
        job.outbox = outbox.filter(|_| !job.queue.is_pulled());
        job.ages_at = self.first_rise(job);
    }

    /// Commits the jobs in one transaction (all or nothing), then publishes the new ones
    /// with their confirms in flight together. Publish failures are left to the sweep.
    /// Detached, as [`Self::submit`].
    pub async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        let this = self.clone();
        tokio::spawn(async move { this.commit_and_announce_many(jobs).await }).await.map_err(abandoned)?
    }

    async fn commit_and_announce_many(&self, mut jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        let outbox = self.outbox();
        for job in &mut jobs {
            self.prepare(job, outbox);
        }
        let submissions = self.store.submit_many(jobs).await?;
        failpoint::hit("submit.after_commit");
        let created: Vec<Dispatch> = submissions
            .iter()
            .filter(|Submission { created, job }| *created && job.published_at.is_some())
            .map(|Submission { job, .. }| Dispatch::of(job))
            .collect();
        if submissions.iter().any(|submission| submission.created && submission.job.run_after.is_some()) {
            self.waiting.notify_one();
        }
        self.announce(&created, outbox).await;
        Ok(submissions)
    }

    /// Publishes jobs just committed, whose rows were written published
    /// ([`NewJob::announced`]). On a broker, with their confirms in flight together; once
    /// every one is confirmed the submission's outbox row goes, and until then it hands
    /// them back to the sweep should this process stop or a publish fail. In process, a
    /// channel send cannot be lost while this process lives, and a restart forgets every
    /// publication; a send that fails all the same gives its jobs back to the sweep.
    async fn announce(&self, jobs: &[Dispatch], outbox: Option<Uuid>) {
        // Jobs of pulled queues (registered types, scripts) were written published: their
        // claimers were woken by the store's write, and nothing goes to the transport.
        let remote = jobs.iter().any(|job| QueueName::pulled(&job.queue));
        let owned: Vec<Dispatch>;
        let jobs = match remote {
            false => jobs,
            true => {
                owned = jobs.iter().filter(|job| !QueueName::pulled(&job.queue)).cloned().collect();
                &owned
            }
        };
        if self.transport.is_durable() {
            let confirmed = self.send(jobs).await;
            failpoint::hit("submit.after_publish");
            let all_confirmed = !jobs.is_empty() && confirmed.len() == jobs.len();
            if let (Some(outbox), true) = (outbox, all_confirmed) {
                if let Err(err) = self.store.confirm_outbox(outbox).await {
                    // The messages are out; at worst the sweep sends them again after the
                    // grace, and a duplicate delivery finds the job already claimed.
                    warn!(error = %err, "could not record a submission's publications");
                }
            }
            return;
        }
        for message in self.messages(jobs) {
            let ids: Vec<Uuid> = message.iter().map(|job| job.id).collect();
            let (queue, priority) = (&message[0].queue, message[0].priority);
            if let Err(err) = self.transport.publish_at(queue, encode_job_ids(&ids), priority).await {
                warn!(job_id = %ids[0], jobs = ids.len(), error = %err, "publish failed; the sweep will resend");
                for job in message {
                    if let Err(err) = self.store.forget_publication(job).await {
                        warn!(job_id = %job.id, error = %err, "could not hand an unsent job back to the sweep");
                    }
                }
            }
        }
    }

    /// Publishes jobs concurrently and records which the transport confirmed; returns how
    /// many were confirmed. Failures are logged and left to the sweep.
    pub async fn publish_all(&self, jobs: &[Dispatch]) -> u64 {
        if jobs.is_empty() {
            return 0;
        }
        // A pulled queue's job is not sent: its claimers take it. Recording it published is
        // its announcement (the store wakes its claimers).
        let (remote, jobs): (Vec<Dispatch>, Vec<Dispatch>) =
            jobs.iter().cloned().partition(|job| QueueName::pulled(&job.queue));
        let mut confirmed = self.send(&jobs).await;
        confirmed.extend(remote);
        if let Err(err) = self.store.mark_published(&confirmed).await {
            // The messages are out; at worst the sweep sends them again, and a duplicate
            // delivery finds the job already claimed.
            warn!(error = %err, "could not record publications");
        }
        confirmed.len() as u64
    }

    /// Publishes `jobs` as their messages, with the confirms in flight together; returns the
    /// jobs the transport confirmed. A failed message is logged, and the sweep resends it.
    async fn send(&self, jobs: &[Dispatch]) -> Vec<Dispatch> {
        let messages = self.messages(jobs);
        let sends = messages.iter().map(|message| {
            let ids: Vec<Uuid> = message.iter().map(|job| job.id).collect();
            self.transport.publish_at(&message[0].queue, encode_job_ids(&ids), message[0].priority)
        });
        let results = join_all(sends).await;
        let mut confirmed = Vec::with_capacity(jobs.len());
        for (message, result) in messages.into_iter().zip(results) {
            match result {
                Ok(()) => confirmed.extend(message.into_iter().cloned()),
                Err(err) => {
                    let (jobs, queue) = (message.len(), &message[0].queue);
                    warn!(job_id = %message[0].id, jobs, queue = %queue, error = %err, "publish failed; the sweep will resend")
                }
            }
        }
        confirmed
    }

    /// The messages `jobs` go out as: by queue and level, in order, up to the queue's ids
    /// per message.
    fn messages<'a>(&self, jobs: &'a [Dispatch]) -> Vec<Vec<&'a Dispatch>> {
        let mut by_queue: Vec<((&str, u8), Vec<&Dispatch>)> = Vec::new();
        for job in jobs {
            let line = (job.queue.as_str(), job.priority);
            match by_queue.iter_mut().find(|(of, _)| *of == line) {
                Some((_, queued)) => queued.push(job),
                None => by_queue.push((line, vec![job])),
            }
        }
        let mut messages = Vec::new();
        for ((queue, _), queued) in by_queue {
            messages.extend(queued.chunks(self.ids_per_message(queue)).map(<[&Dispatch]>::to_vec));
        }
        messages
    }

    /// One sweep: raises the jobs whose wait earned them a level (announcing each again at
    /// it), then sends up to `batch` jobs that are due and unpublished. Returns how many
    /// were confirmed.
    pub async fn sweep_once(&self, grace: Duration, batch: u64) -> Result<u64, StoreError> {
        if let Some(step) = self.aging {
            self.raise_once(step, batch).await?;
        }
        let reclaimed = self.store.reclaim_outbox(grace, batch).await?;
        if reclaimed > 0 {
            warn!(jobs = reclaimed, "submissions whose messages were never confirmed handed back to the sweep");
        }
        let due = self.store.due_for_dispatch(grace, batch).await?;
        if due.is_empty() {
            return Ok(0);
        }
        let sent = self.publish_all(&due).await;
        info!(due = due.len(), sent, "dispatch sweep sent queued jobs");
        crate::telemetry::metrics::maintenance(crate::telemetry::metrics::Maintenance::DispatchSweep, "resent", sent);
        Ok(sent)
    }

    /// Raises up to `batch` waiting jobs a level and sends each again at it. The message at
    /// the old level stays where it is: whichever comes first claims the job, and the other
    /// finds it taken. A send that fails leaves the old message, so nothing waits unsent.
    async fn raise_once(&self, step: Duration, batch: u64) -> Result<(), StoreError> {
        let raised = self.store.raise_waiting(step, batch).await?;
        let sent: Vec<Dispatch> = raised.into_iter().filter(|job| !QueueName::pulled(&job.queue)).collect();
        if sent.is_empty() {
            return Ok(());
        }
        let messages = self.messages(&sent);
        let sends = messages.iter().map(|message| {
            let ids: Vec<Uuid> = message.iter().map(|job| job.id).collect();
            self.transport.publish_at(&message[0].queue, encode_job_ids(&ids), message[0].priority)
        });
        let failed = join_all(sends).await.into_iter().filter(Result::is_err).count();
        info!(raised = sent.len(), failed, "waiting jobs raised a priority level");
        Ok(())
    }

    /// The bell rung when this process commits a job that waits for a time.
    pub fn waiting_bell(&self) -> Arc<Notify> {
        self.waiting.clone()
    }

    /// How long until the next job that waits for a time falls due (see
    /// [`crate::store::DispatchBook::next_due`]).
    pub async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        self.store.next_due().await
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

    /// Publishes one QUEUED job now (a manual retry); the sweep covers a failure. A job its
    /// limit holds is not sent: the limit's release sends it.
    pub async fn publish(&self, job: &crate::domain::Job) {
        if job.held_since.is_none() {
            self.publish_all(&[Dispatch::of(job)]).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_messages_round_trip_and_reject_garbage() {
        let id = Uuid::now_v7();
        assert_eq!(decode_job_message(&encode_job_message(id)), Some(vec![id]));
        assert_eq!(decode_job_message(b"not a uuid"), None);
        assert_eq!(decode_job_message(&[0xff, 0xfe]), None);
        assert_eq!(decode_job_message(b""), None);
    }

    #[test]
    fn several_ids_travel_in_one_message_each_once() {
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        assert_eq!(decode_job_message(&encode_job_ids(&ids)), Some(ids.clone()));
        let twice = [ids[0], ids[1], ids[0]];
        assert_eq!(decode_job_message(&encode_job_ids(&twice)), Some(vec![ids[0], ids[1]]));
        let mut broken = encode_job_ids(&ids);
        broken.extend_from_slice(b"\nnot a uuid");
        assert_eq!(decode_job_message(&broken), None);
        let too_many: Vec<Uuid> = (0..=MAX_IDS_PER_MESSAGE).map(|_| Uuid::now_v7()).collect();
        assert_eq!(decode_job_message(&encode_job_ids(&too_many)), None);
    }
}

/// The dispatch sweep: re-sends QUEUED jobs whose message was never confirmed (a crash
/// between commit and publish, a broker outage) and jobs whose RetryLater delay is over.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchSettings {
    /// Run the sweep in this process.
    pub enabled: bool,
    /// Milliseconds between sweeps.
    pub interval_ms: u64,
    /// A job younger than this is left to its submitter, which is still publishing it; so is
    /// a submission's outbox row (its messages not yet confirmed).
    pub grace_ms: u64,
    /// Jobs sent per sweep at most.
    pub batch: u64,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        DispatchSettings { enabled: true, interval_ms: 1000, grace_ms: 5000, batch: 1000 }
    }
}

impl DispatchSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.interval_ms >= 1, "dispatch.interval_ms must be at least 1");
        Ok(())
    }
}
