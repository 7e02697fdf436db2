//! Metrics in Prometheus text: one recorder per process (the `metrics` facade's global one),
//! counters and histograms recorded where things happen, and gauges of the store's queues
//! read when `GET /metrics` is scraped (a gauge read from the rows cannot drift).
//!
//! Every name starts `yardmaster_`; times are in seconds. Labels are bounded: queue and
//! operation names (registered or configured), final statuses, route patterns (never a raw
//! path), reaper and cleaner actions.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use chrono::{DateTime, Utc};
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::{EventName, Job, JobStatus};
use crate::store::{clock, Change, Observer};

/// Bucket bounds of the job and request histograms, in seconds: 1 ms to 6 hours.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    21600.0,
];
/// Bucket bounds of the group-commit batch sizes.
const BATCH: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// The process's recorder, once [`handle`] has been asked for it (`None` inside: another was first).
static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed by the first caller. `None` when another recorder
/// was installed first (an embedding program's own): then `/metrics` answers 503.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let installed = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|builder| builder.set_buckets_for_metric(Matcher::Suffix("_batch_size".into()), BATCH))
                .and_then(|builder| builder.install_recorder());
            match installed {
                Ok(handle) => {
                    describe();
                    Some(handle)
                }
                Err(err) => {
                    tracing::warn!(error = %err, "metrics recorder not installed; /metrics is unavailable");
                    None
                }
            }
        })
        .as_ref()
}

fn describe() {
    describe_counter!("yardmaster_jobs_started_total", "Runs started (claims), by queue and operation");
    describe_counter!(
        "yardmaster_jobs_finished_total",
        "Jobs that reached a final status, by queue, operation and status"
    );
    describe_counter!(
        "yardmaster_jobs_retried_total",
        "Runs handed back to wait for another attempt, by queue, operation and reason"
    );
    describe_histogram!(
        "yardmaster_job_wait_seconds",
        Unit::Seconds,
        "From a job's creation (or its run_after) to its first run's start, by operation"
    );
    describe_histogram!(
        "yardmaster_job_run_seconds",
        Unit::Seconds,
        "From a run's start to its job's end, by operation and status"
    );
    describe_counter!("yardmaster_reaper_actions_total", "What the reaper did, by action");
    describe_counter!("yardmaster_dispatch_resent_total", "Jobs the dispatch sweep published again");
    describe_counter!("yardmaster_cleaner_actions_total", "What the cleaner did, by action");
    describe_counter!("yardmaster_dead_letters_total", "Messages set aside as dead letters, by queue and reason");
    describe_counter!(
        "yardmaster_consumer_restarts_total",
        "Queue consumers subscribed anew after their subscription ended (a broker restart, a lost connection, a closed channel), by queue"
    );
    describe_gauge!(
        "yardmaster_claims_held",
        "Claims (remote tasks, scripts) held open with Prefer: wait, waiting for a task now"
    );
    describe_gauge!(
        "yardmaster_watches_held",
        "Waits on a job or a registered type held now: long-polls, event streams, held claims, idle script slots"
    );
    describe_gauge!("yardmaster_queue_paused", "1 while the queue is paused (it starts nothing), 0 once it resumes");
    describe_histogram!("yardmaster_group_commit_batch_size", "Writes committed together by the group-commit writer");
    describe_counter!("yardmaster_http_requests_total", "HTTP requests answered, by route pattern, method and status");
    describe_histogram!(
        "yardmaster_http_request_seconds",
        Unit::Seconds,
        "Time to answer an HTTP request (to its headers), by route pattern and method"
    );
}

/// Counts a held claim while it waits for a task: one more from now until the guard drops.
pub fn claim_held() -> Held {
    Held::on("yardmaster_claims_held")
}

/// Counts a watch (`live::Watch`) while it lives: one more from now until the guard drops.
pub fn watch_held() -> Held {
    Held::on("yardmaster_watches_held")
}

/// One more on a gauge of things held, from its making until it drops.
pub struct Held(&'static str);

impl Held {
    fn on(gauge: &'static str) -> Held {
        gauge!(gauge).increment(1.0);
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        gauge!(self.0).decrement(1.0);
    }
}

/// What a job's start and end record to, for one queue and operation. A handle looked up
/// by its labels copies them and builds its key every time (a dozen allocations a job
/// each way); [`JobMetrics`] makes these once. Each is made when first used, so a series
/// appears when something happened to it, as before.
#[derive(Default)]
struct JobHandles {
    started: OnceLock<Counter>,
    wait: OnceLock<Histogram>,
    /// By final status (see [`final_index`]): jobs finished, and their run times.
    finished: [OnceLock<(Counter, Histogram)>; 3],
}

/// The slot of a final status in [`JobHandles::finished`].
fn final_index(status: JobStatus) -> usize {
    match status {
        JobStatus::Succeeded => 0,
        JobStatus::Failed => 1,
        _ => 2,
    }
}

impl JobHandles {
    /// A run started: `job` as its claim returned it.
    fn started(&self, job: &Job) {
        let started = self.started.get_or_init(|| {
            counter!("yardmaster_jobs_started_total", "queue" => job.queue.clone(), "operation" => job.operation.clone())
        });
        started.increment(1);
        if job.attempts <= 1 {
            if let Some(started) = job.started_at {
                let due = job.run_after.map_or(job.created_at, |after| after.max(job.created_at));
                let wait = self
                    .wait
                    .get_or_init(|| histogram!("yardmaster_job_wait_seconds", "operation" => job.operation.clone()));
                wait.record(seconds(due, started));
            }
        }
    }

    /// A job reached a final status: `job` as the write that ended it returned it.
    fn ended(&self, job: &Job) {
        if !job.status.is_terminal() {
            return;
        }
        let (finished, run) = self.finished[final_index(job.status)].get_or_init(|| {
            let status = job.status.as_str();
            let finished = counter!(
                "yardmaster_jobs_finished_total",
                "queue" => job.queue.clone(), "operation" => job.operation.clone(), "status" => status
            );
            let run =
                histogram!("yardmaster_job_run_seconds", "operation" => job.operation.clone(), "status" => status);
            (finished, run)
        });
        finished.increment(1);
        if let (Some(started), Some(ended)) = (job.started_at, job.finished_at) {
            run.record(seconds(started, ended));
        }
    }
}

/// A job that waited for its dependencies queued (`met`) or was cancelled for a failed one.
fn dependencies_settled(job: &Job, met: bool) {
    let outcome = if met { "queued" } else { "cancelled" };
    counter!("yardmaster_dependencies_settled_total", "operation" => job.operation.clone(), "outcome" => outcome)
        .increment(1);
    if met {
        histogram!("yardmaster_dependency_wait_seconds", "operation" => job.operation.clone())
            .record(seconds(job.created_at, clock::now()));
    }
}

/// A run handed back to wait: `reason` is `retry`, `retry_later`, `lease_expired`,
/// `shutdown` or the like.
pub fn job_requeued(job: &Job, reason: &'static str) {
    if job.status == JobStatus::Queued {
        counter!(
            "yardmaster_jobs_retried_total",
            "queue" => job.queue.clone(), "operation" => job.operation.clone(), "reason" => reason
        )
        .increment(1);
    }
}

/// `count` actions of a maintenance actor (`actor` names the counter's family).
pub fn maintenance(actor: Maintenance, action: &'static str, count: u64) {
    if count == 0 {
        return;
    }
    match actor {
        Maintenance::Reaper => counter!("yardmaster_reaper_actions_total", "action" => action).increment(count),
        Maintenance::Cleaner => counter!("yardmaster_cleaner_actions_total", "action" => action).increment(count),
        Maintenance::DispatchSweep => counter!("yardmaster_dispatch_resent_total").increment(count),
    }
}

/// The maintenance actors whose work is counted.
#[derive(Debug, Clone, Copy)]
pub enum Maintenance {
    Reaper,
    Cleaner,
    DispatchSweep,
}

/// A message set aside.
pub fn dead_lettered(queue: &str, reason: &str) {
    counter!("yardmaster_dead_letters_total", "queue" => queue.to_owned(), "reason" => reason.to_owned()).increment(1);
}

/// A queue paused (1) or resumed (0), as this process last read it.
pub fn queue_paused(queue: &str, paused: bool) {
    gauge!("yardmaster_queue_paused", "queue" => queue.to_owned()).set(if paused { 1.0 } else { 0.0 });
}

/// A queue consumer subscribes anew.
pub fn consumer_restarted(queue: &str) {
    counter!("yardmaster_consumer_restarts_total", "queue" => queue.to_owned()).increment(1);
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().map_or(0.0, |micros| micros.max(0) as f64 / 1e6)
}

/// The job counters and histograms, as an observer of the store: each commit that started,
/// ended or handed back a run is counted once, after it committed.
#[derive(Default)]
pub struct JobMetrics {
    handles: RwLock<ByQueue>,
}

/// Handles by queue, then operation (names the labels bound already).
type ByQueue = HashMap<String, HashMap<String, Arc<JobHandles>>>;

impl JobMetrics {
    /// The handles of `job`'s queue and operation: kept once the process's recorder is
    /// installed (a handle made before would record nowhere for good), else made for this use.
    fn handles(&self, job: &Job) -> Arc<JobHandles> {
        if HANDLE.get().is_none() {
            return Arc::default();
        }
        let kept = self.handles.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(handles) =
            kept.get(job.queue.as_str()).and_then(|operations| operations.get(job.operation.as_str()))
        {
            return handles.clone();
        }
        drop(kept);
        let mut kept = self.handles.write().unwrap_or_else(PoisonError::into_inner);
        let operations = kept.entry(job.queue.clone()).or_default();
        operations.entry(job.operation.clone()).or_default().clone()
    }
}

impl Observer for JobMetrics {
    fn committed(&self, changes: &[Change]) {
        for change in changes {
            let Change::Moved { job, was, event } = change else { continue };
            if *event == EventName::STARTED {
                self.handles(job).started(job);
            }
            if *event == EventName::DEPENDENCIES_MET || *event == EventName::DEPENDENCY_FAILED {
                dependencies_settled(job, *event == EventName::DEPENDENCIES_MET);
            }
            if *was == [JobStatus::Running] && job.status == JobStatus::Queued {
                job_requeued(job, requeue_reason(event));
            }
            // A job that was running or waiting and is final now (not a finished job's files
            // being cleaned).
            if was.iter().any(|status| !status.is_terminal()) {
                self.handles(job).ended(job);
            }
        }
    }
}

/// The `reason` label of a requeue, from the event it wrote.
fn requeue_reason(event: &str) -> &'static str {
    match event {
        EventName::RETRY_LATER => "retry_later",
        EventName::RETRY_SCHEDULED => "failure",
        EventName::REQUEUED_ON_SHUTDOWN => "shutdown",
        EventName::LEASE_EXPIRED_REQUEUE => "lease_expired",
        EventName::REQUEUED_BATCHES_LOST => "batches_lost",
        _ => "other",
    }
}
