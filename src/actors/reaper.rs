//! `Reaper`: every `interval`, rescues jobs nobody is running any more.
//!
//! - A RUNNING job whose lease expired (database clock) is re-queued
//!   (`job.lease_expired_requeue`), up to `max_lease_requeues` times, then FAILED with
//!   `lease_expired`: a job that kills its worker every time ends, without a crash loop.
//! - A RUNNING job past `timeout` that also wrote no event within `stall` is FAILED with
//!   `JobTimeout` (progress-aware: a long job that reports progress is left alone).
//! - A QUEUED job runnable for longer than `queue_timeout` (when set) is FAILED with
//!   `QueueTimeout`.
//! - A QUEUED job past its own `expires_at` is CANCELLED (`job.expired`).
//! - A RUNNING job past its own `timeout_seconds` by more than `timeout_grace` (its worker
//!   is gone, or the run ignores its cancel token) fails `Timeout`, retried by its policy.
//!
//! Every move is a compare-and-set on the run, so a worker that is merely slow and the
//! reaper can never both win.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::info;

use super::periodic::Pass;
use super::settings::ReaperSettings;
use crate::dispatch::Dispatcher;
use crate::store::{after_failure, Completion, JobStore, Maintenance, Requeue, RunRef, RunWrites, StoreError};
use crate::worker::TIMEOUT;

pub const JOB_TIMEOUT: &str = "JobTimeout";
pub const QUEUE_TIMEOUT: &str = "QueueTimeout";

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, MessageResponse)]
pub struct ReapCounts {
    pub lease_requeued: u64,
    pub lease_failed: u64,
    pub timed_out: u64,
    pub queue_timed_out: u64,
    /// QUEUED jobs cancelled at their `expires_at`.
    pub expired: u64,
    /// Runs past their own `timeout_seconds` that no worker stopped.
    pub run_timed_out: u64,
}

impl ReapCounts {
    pub fn total(&self) -> u64 {
        self.lease_requeued
            + self.lease_failed
            + self.timed_out
            + self.queue_timed_out
            + self.expired
            + self.run_timed_out
    }
}

pub struct Reaper {
    scans: Arc<dyn Maintenance>,
    runs: Arc<dyn RunWrites>,
    dispatcher: Dispatcher,
    settings: ReaperSettings,
}

impl Reaper {
    pub fn new(store: Arc<dyn JobStore>, dispatcher: Dispatcher, settings: ReaperSettings) -> Self {
        Reaper { scans: store.clone(), runs: store, dispatcher, settings }
    }
}

/// One pass over expired leases, stalled runs and overdue queued jobs.
pub async fn run_once(
    scans: &dyn Maintenance,
    runs: &dyn RunWrites,
    dispatcher: &Dispatcher,
    settings: &ReaperSettings,
) -> Result<ReapCounts, StoreError> {
    let mut counts = ReapCounts::default();
    for expired in scans.expired_leases(settings.batch).await? {
        if expired.requeues < i64::from(settings.max_lease_requeues) {
            if let Some(job) = runs.requeue(expired.run, &Requeue::LeaseExpired).await? {
                dispatcher.publish(&job).await;
                counts.lease_requeued += 1;
            }
        } else {
            let message = format!("lease expired {} times; giving up", expired.requeues + 1);
            if runs.finish(expired.run, &Completion::LeaseExpired { message }).await?.is_some() {
                counts.lease_failed += 1;
            }
        }
    }
    let timeout = Duration::from_secs(settings.timeout_seconds);
    let stall = Duration::from_secs(settings.stall_seconds);
    for run in scans.stalled_runs(timeout, stall, settings.batch).await? {
        let message =
            format!("running for over {}s with no event in {}s", settings.timeout_seconds, settings.stall_seconds);
        let completion = Completion::Failed { error_code: JOB_TIMEOUT.into(), message };
        if runs.finish(run, &completion).await?.is_some() {
            counts.timed_out += 1;
        }
    }
    if settings.queue_timeout_seconds > 0 {
        let queue_timeout = Duration::from_secs(settings.queue_timeout_seconds);
        for id in scans.overdue_queued(queue_timeout, settings.batch).await? {
            let message = format!("queued for over {}s", settings.queue_timeout_seconds);
            if scans.fail_queued(id, QUEUE_TIMEOUT, &message).await?.is_some() {
                counts.queue_timed_out += 1;
            }
        }
    }
    for id in scans.expired_queued(settings.batch).await? {
        if scans.expire(id).await?.is_some() {
            counts.expired += 1;
        }
    }
    let grace = Duration::from_millis(settings.timeout_grace_ms);
    for job in scans.overdue_runs(grace, settings.batch).await? {
        let run = RunRef::from(&job);
        let seconds = job.timeout_seconds.unwrap_or_default();
        let message = format!("the run took longer than its timeout of {seconds} s and no worker stopped it");
        let written = match after_failure(&job, TIMEOUT.into(), message) {
            Ok(requeue) => runs.requeue(run, &requeue).await?,
            Err(failed) => runs.finish(run, &failed).await?,
        };
        counts.run_timed_out += u64::from(written.is_some());
    }
    if counts.total() > 0 {
        info!(?counts, "reaper pass");
    }
    use crate::telemetry::metrics::{maintenance, Maintenance::Reaper};
    maintenance(Reaper, "lease_requeued", counts.lease_requeued);
    maintenance(Reaper, "lease_failed", counts.lease_failed);
    maintenance(Reaper, "timed_out", counts.timed_out);
    maintenance(Reaper, "queue_timed_out", counts.queue_timed_out);
    maintenance(Reaper, "expired", counts.expired);
    maintenance(Reaper, "run_timed_out", counts.run_timed_out);
    Ok(counts)
}

impl Pass for Reaper {
    type Output = ReapCounts;
    const NAME: &'static str = "reaper";

    fn interval(&self) -> Duration {
        Duration::from_millis(self.settings.interval_ms)
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<ReapCounts>>>> {
        let (scans, runs) = (self.scans.clone(), self.runs.clone());
        let (dispatcher, settings) = (self.dispatcher.clone(), self.settings.clone());
        Box::pin(async move { Ok(run_once(scans.as_ref(), runs.as_ref(), &dispatcher, &settings).await?) })
    }
}
