//! What an executing operation can touch: its job, the event log, progress, the database.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::dispatch::Dispatcher;
use crate::domain::{scrub_nul, scrub_nul_value, EventLevel, Job, NewEvent, NewJob};
use crate::store::{DependencyResult, JobStore, RunRef, StoreError, Submission};
use crate::transport::Transport;

use super::OperationRegistry;

/// What every execution context is built from; cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub store: Arc<dyn JobStore>,
    pub db: DatabaseConnection,
    pub transport: Arc<dyn Transport>,
    /// How submitted work reaches the transport (the queues' grouping of ids).
    pub dispatcher: Dispatcher,
    /// The operations of this process, for defaults of the work an operation submits.
    pub registry: Arc<OperationRegistry>,
}

/// Handed to [`super::Operation::execute`]; cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    /// The claimed job; `None` for ephemeral work from an operation queue.
    job: Option<Arc<Job>>,
    /// Whose event log `emit` writes to, and for which run: the job's, or a batch's
    /// coordinator's. Writes of a run that is no longer current are dropped.
    events_to: Option<RunRef>,
    /// The process's store, transport, dispatcher and operations, shared by every run: a
    /// context is as small as what is its own.
    pub(super) services: Arc<Services>,
    /// Fires when the job is cancelled (or its run taken away): stop early if you can.
    cancel: CancellationToken,
    /// What the coordinator of a batch resolved before fanning out; `Null` otherwise.
    snapshot: Option<Arc<Value>>,
    /// Set once the job fanned out: its batches, not its return, close it.
    pub(super) deferred: Deferral,
}

/// Set once a job fans out; shared by its context and whoever reads the run's outcome.
#[derive(Clone, Default)]
pub struct Deferral(Arc<AtomicBool>);

impl Deferral {
    pub(super) fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the job fanned out: its batches, not its return, close it.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl JobContext {
    /// The context of a claimed job.
    pub fn new(job: Arc<Job>, services: Arc<Services>, cancel: CancellationToken) -> Self {
        JobContext {
            events_to: Some(RunRef::from(&*job)),
            job: Some(job),
            services,
            cancel,
            snapshot: None,
            deferred: Deferral::default(),
        }
    }

    /// The context of ephemeral work (no job row) that reports to its coordinator's run
    /// `parent`, if any, with the coordinator's `snapshot` when it is a batch.
    pub fn ephemeral(parent: Option<RunRef>, snapshot: Value, services: Arc<Services>) -> Self {
        JobContext {
            job: None,
            events_to: parent,
            services,
            cancel: CancellationToken::new(),
            snapshot: Some(Arc::new(snapshot)),
            deferred: Deferral::default(),
        }
    }

    /// What a batch's coordinator resolved and copied into every batch (`Null` for work
    /// that is not a batch): read it instead of rows that may have changed since.
    pub fn snapshot(&self) -> &Value {
        static NONE: Value = Value::Null;
        self.snapshot.as_deref().unwrap_or(&NONE)
    }

    /// Whether this job fanned out (see [`JobContext::fan_out`]).
    pub fn is_deferred(&self) -> bool {
        self.deferred.is_set()
    }

    /// The flag [`JobContext::is_deferred`] reads, for whoever outlives this context.
    pub(crate) fn deferral(&self) -> Deferral {
        self.deferred.clone()
    }

    /// True once the job was cancelled: a cooperative operation returns early.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The token [`JobContext::cancelled`] waits on, for work handed to another task.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Completes when the job is cancelled; race it against slow work with `select!`.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// The job as it was claimed (status RUNNING, `attempts` counting this run), without its
    /// payload: the operation was given that (`Value::Null` here).
    pub fn job(&self) -> Option<&Job> {
        self.job.as_deref()
    }

    /// The jobs this job waited for (`depends_on`), with their outcomes, by id; empty for
    /// a job with none and for ephemeral work.
    pub async fn dependencies(&self) -> Result<Vec<DependencyResult>, StoreError> {
        match &self.job {
            Some(job) if job.on_dependency_failure.is_some() => {
                self.services.dispatcher.store().dependency_results(job.id).await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Which run this is, from 1 (ephemeral work is always run 1).
    pub fn attempt(&self) -> i32 {
        self.job.as_ref().map_or(1, |job| job.attempts)
    }

    /// The operations of this process.
    /// Submits `job` as work of its own (not a child of this one: see
    /// [`Self::spawn_children`] for those), committed and announced like any submission.
    pub async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        self.services.dispatcher.submit(job).await
    }

    pub fn registry(&self) -> &OperationRegistry {
        &self.services.registry
    }

    /// The database pool, for operations that keep tables of their own. Each call runs in
    /// its own short transaction; never hold one open across slow work.
    pub fn db(&self) -> &DatabaseConnection {
        &self.services.db
    }

    /// Appends an event to the job's log (a batch: its coordinator's) in its own short
    /// transaction. `_progress_current` / `_progress_total` in `fields` are written back to
    /// that job. Ephemeral work without a parent only logs the event. Once the run is no
    /// longer current (cancelled, re-run, taken away) nothing is written and the run is told
    /// to stop: [`JobContext::cancelled`] completes.
    pub async fn emit(
        &self,
        event: &str,
        message: Option<&str>,
        fields: Value,
        level: EventLevel,
    ) -> Result<(), StoreError> {
        let Some(run) = self.events_to else {
            tracing::info!(event, message, %fields, "ephemeral event");
            return Ok(());
        };
        // What cannot be stored (a NUL character) is scrubbed, not refused: a report is
        // worth keeping with a replacement character.
        let mut fields = fields;
        scrub_nul_value(&mut fields);
        let mut new = NewEvent::new(scrub_nul(event)).fields(fields).level(level);
        if let Some(message) = message {
            new = new.message(scrub_nul(message));
        }
        if !self.services.store.record_event(run, new).await? {
            tracing::info!(job_id = %run.id, attempt = run.attempt, event, "run no longer current; event dropped, run stopped");
            self.cancel.cancel();
        }
        Ok(())
    }

    /// Reports progress as a `job.progress` event. Progress is advisory: a report that
    /// cannot be written (the database is away) is dropped with a warning, and the next one
    /// carries the newer count; it never decides the job's outcome.
    pub async fn progress(&self, current: i64, total: i64) {
        let fields = json!({ "_progress_current": current, "_progress_total": total });
        if let Err(err) = self.emit("job.progress", None, fields, EventLevel::Info).await {
            let job_id = self.events_to.map(|run| run.id);
            tracing::warn!(job_id = ?job_id, current, total, error = %err, "progress not recorded; dropped");
        }
    }
}
