//! Durable state: the store traits every lifecycle step goes through, one per role, and their SQL implementation.
//!
//! Every state change is a compare-and-set (`UPDATE … WHERE id = ? AND status IN (…)`, row
//! count checked) that writes its JobEvent in the same transaction.

pub mod clock;
mod connect;
pub mod entity;
pub mod observe;
pub mod overview;
mod sea;
pub mod settings;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{BatchOutcome, FanOutForm, Job, JobEvent, JobStatus, NewEvent, NewJob};

pub use connect::{connect, connect_for_pruning, migrate, Backend};
pub use observe::{Call, Change, Hook, Observer};
pub use overview::QueueFigures;
pub use sea::write_gate::{WriteGate, WriteTxn};
pub use sea::{of_status, startable, SeaStore, STATUS_INDEXED};
pub use types::{
    after_failure, level, BatchRecorded, BatchRows, Cancellation, Completion, DependencyResult, Dispatch, ExpiredLease,
    JobFilter, JobHead, Linked, Links, Page, Pruned, Released, Requeue, RunRef, Settled, StoreError, Submission,
};

/// What the API reads: jobs, pages of them, their events and places in line, and the
/// readiness round trip.
#[async_trait]
pub trait JobReads: Send + Sync + 'static {
    /// A round trip to the database, for readiness checks.
    async fn ping(&self) -> Result<(), StoreError>;

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError>;

    /// A job's status and room alone: what a waiter asks at each of the job's changes and an
    /// access check before reading its events, where the whole row would be a coordinator's
    /// megabytes of inputs each time.
    async fn head(&self, id: Uuid) -> Result<Option<JobHead>, StoreError>;

    /// Whether job `id` has ended, by its status alone; a job gone (pruned) counts as ended,
    /// so a waiter's last read answers 404.
    async fn has_ended(&self, id: Uuid) -> Result<bool, StoreError> {
        Ok(self.head(id).await?.is_none_or(|head| head.status.is_terminal()))
    }

    /// The jobs of these ids that exist, in no particular order: one read for many.
    async fn get_many(&self, ids: &[Uuid]) -> Result<Vec<Job>, StoreError>;

    /// Summaries, newest first, filtered; `filter.before` is the cursor from the previous
    /// page. Payloads and results are never read.
    async fn list(&self, filter: &JobFilter) -> Result<Page, StoreError>;

    /// A job's events in the order they were written, after event id `after`.
    async fn events(&self, id: Uuid, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError>;

    /// The events of every job of `room`, in the order they were written, after event id
    /// `after`: only once no event of a lower id can still appear (on PostgreSQL, while a
    /// transaction that may hold one stays open, none, after waiting up to 5 s).
    async fn room_events(&self, room: &str, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError>;

    /// Each queue's QUEUED and RUNNING jobs and when its longest-waiting job became due,
    /// over the status index: every queue in `queues` (at 0 when empty) and every queue
    /// with live jobs; of `rooms` only, when given.
    async fn queue_figures(
        &self,
        queues: &[String],
        rooms: Option<&[String]>,
    ) -> Result<BTreeMap<String, QueueFigures>, StoreError>;

    /// A QUEUED job's place in its line, 1 for the next to run: 1 + the runnable jobs of its
    /// registered type (or, for others, its queue) created before it. `None` when not QUEUED, or
    /// QUEUED but waiting for its time (`run_after` ahead: a `run_at`, a delay).
    async fn queue_position(&self, job: &Job) -> Result<Option<i64>, StoreError>;

    /// The jobs `id` waits for and the jobs that wait for it (each list at most
    /// [`crate::domain::MAX_DEPENDENCIES`], oldest first).
    async fn links(&self, id: Uuid) -> Result<Links, StoreError>;

    /// The jobs `id` waits for, with their outcomes: what its operation reads.
    async fn dependency_results(&self, id: Uuid) -> Result<Vec<DependencyResult>, StoreError>;
}

/// What clients ask of jobs: submissions, cancellation, a manual retry.
#[async_trait]
pub trait JobCommands: Send + Sync + 'static {
    /// Inserts a QUEUED job and its `job.queued` event, or returns the job an earlier
    /// submission with the same idempotency key created.
    async fn submit(&self, job: NewJob) -> Result<Submission, StoreError>;

    /// Submits many jobs in one transaction, all or nothing, answering in order. A key
    /// seen before (in the store or earlier in `jobs`) answers as [`JobCommands::submit`] does;
    /// one idempotency conflict fails the whole batch.
    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError>;

    /// QUEUED | RUNNING → CANCELLED, with the job's QUEUED and RUNNING children in the same
    /// transaction.
    /// A job already terminal is returned unchanged.
    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError>;

    /// FAILED | CANCELLED → QUEUED by hand, clearing the error; other states are an
    /// [`StoreError::InvalidTransition`].
    async fn retry(&self, id: Uuid) -> Result<Job, StoreError>;

    /// Appends `event` to a job that is still QUEUED (why it waits, say); false, writing
    /// nothing, once it is not.
    async fn note_queued(&self, id: Uuid, event: NewEvent) -> Result<bool, StoreError>;
}

/// What a worker writes about its run, local (a queue consumer) or remote (over HTTP):
/// the claim, progress and events, the outcome, a requeue, lease renewals, and the
/// coordinators' fan-out and fan-in.
#[async_trait]
pub trait RunWrites: Send + Sync + 'static {
    /// Session 1 of execution: QUEUED → RUNNING with `job.started`. `None` when the job is
    /// missing or not QUEUED (another worker has it, or it was cancelled): do nothing.
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError>;

    /// A remote worker's claim: up to `most` of the oldest runnable QUEUED jobs of these
    /// registered types (full names) → RUNNING, as [`RunWrites::claim`] does, in one
    /// commit. On PostgreSQL the rows are locked with `SKIP LOCKED`, so concurrent claimers
    /// each take the next ones instead of racing for the same; on SQLite (one writer) the
    /// oldest few are tried together. Empty when none is runnable.
    async fn claim_next(
        &self,
        operations: &[String],
        owner: &str,
        lease: Duration,
        most: usize,
    ) -> Result<Vec<Job>, StoreError>;

    /// Session 2 of execution: RUNNING → the completion's state with its event, for this
    /// run only. `None` when the run is no longer the job's current RUNNING one (cancelled
    /// meanwhile, or taken away by the reaper or a shutdown): the outcome is dropped.
    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError>;

    /// RUNNING → QUEUED for this run, for the reason given; the dispatch sweep re-sends the
    /// job once its `run_after` (if any) is over. `None` when the run is no longer current.
    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError>;

    /// Renews this run's lease (database clock). False once the run is no longer the job's
    /// RUNNING one: cancelled, finished, or taken away.
    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError>;

    /// A coordinator's run is about to hand its work to `total` batches or children: sets
    /// `fan_out`, `progress_total` and `progress_current` (0; for children, those that
    /// already succeeded under an earlier run) with `job.fanned_out`. `None` when the run is
    /// no longer current.
    async fn fan_out(&self, run: RunRef, total: i64, form: FanOutForm) -> Result<Option<Job>, StoreError>;

    /// A coordinator's run found the children an earlier run made: those that failed or were
    /// cancelled go back to QUEUED (`job.retried`, a fresh retry budget), those that
    /// succeeded count, and when every child had already succeeded the run closes SUCCEEDED
    /// now. Returns the re-queued children, to publish; none when the run is not current.
    async fn rerun_children(&self, run: RunRef) -> Result<Vec<Job>, StoreError>;

    /// Whether this run is still the job's RUNNING one (a cheap read: a batch checks its
    /// parent before it runs).
    async fn run_is_current(&self, run: RunRef) -> Result<bool, StoreError>;

    /// The coordinator returned with its batches sent: the run gives up its lease and waits
    /// for them (`deferred_at`, `job.deferred`). `None` when the run is no longer RUNNING,
    /// for example because its batches already closed it.
    async fn defer(&self, run: RunRef) -> Result<Option<Job>, StoreError>;

    /// Records a batch's outcome once (a redelivery changes nothing) and advances its
    /// parent's count; the outcome that reaches `progress_total` closes the parent SUCCEEDED
    /// with `reduce` applied to its batches' outputs, and a failed one closes it FAILED with
    /// `child.failed`, each exactly once.
    async fn record_batch(&self, outcome: BatchOutcome, reduce: Arc<dyn Reduce>) -> Result<BatchRecorded, StoreError>;

    /// Appends an operation's event for this run; `_progress_current` / `_progress_total`
    /// in its fields are written back to the job in the same transaction (not to a
    /// coordinator, whose counters count its batches). False, with nothing written, once
    /// the run is no longer the job's RUNNING one: a cancelled or re-run job's log and
    /// progress are never touched by an old run.
    async fn record_event(&self, run: RunRef, event: NewEvent) -> Result<bool, StoreError>;
}

/// What the reaper and the start-up recovery scan for: expired leases, stalled runs,
/// overdue queued jobs, runs a given owner holds, coordinators whose batches were lost.
#[async_trait]
pub trait Maintenance: Send + Sync + 'static {
    /// RUNNING jobs whose lease expired (database clock), with how often the reaper already
    /// requeued each for that reason.
    async fn expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError>;

    /// RUNNING jobs started more than `timeout` ago that wrote no event within `stall`.
    async fn stalled_runs(&self, timeout: Duration, stall: Duration, limit: u64) -> Result<Vec<RunRef>, StoreError>;

    /// QUEUED jobs runnable for longer than `timeout`.
    async fn overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError>;

    /// QUEUED → FAILED (the queue timeout), with `job.failed`.
    async fn fail_queued(&self, id: Uuid, error_code: &str, message: &str) -> Result<Option<Job>, StoreError>;

    /// QUEUED jobs past their own `expires_at` (database clock), soonest first: read from
    /// the index of expiring jobs.
    async fn expired_queued(&self, limit: u64) -> Result<Vec<Uuid>, StoreError>;

    /// QUEUED → CANCELLED for a job not started by its `expires_at`, with `job.expired`.
    /// `None` when it was no longer QUEUED and expired (it started meanwhile).
    async fn expire(&self, id: Uuid) -> Result<Option<Job>, StoreError>;

    /// RUNNING jobs whose run outlived its `timeout_seconds` by more than `grace`
    /// (database clock): their worker did not stop them (it is gone, or the run ignores its
    /// cancel token).
    async fn overdue_runs(&self, grace: Duration, limit: u64) -> Result<Vec<Job>, StoreError>;

    /// RUNNING coordinators whose run fanned out into batches (deferred or not), oldest
    /// first: with a transport that keeps nothing across restarts, their batches are gone.
    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError>;

    /// The RUNNING runs whose lease `owner` holds (a remote worker that leaves).
    async fn runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError>;

    /// Marks a finished job's files removed (`cleaned_at`, `job.cleaned`): the cleaner's
    /// compare-and-set, so a job retried meanwhile is left alone. `None` when it was not a
    /// finished job whose files were still there.
    async fn mark_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError>;

    /// Deletes up to `limit` top-level jobs that ended `status` more than `older_than` ago,
    /// with their children and every event of them, oldest first, in one transaction. A job
    /// any of whose children is still QUEUED or RUNNING is kept.
    async fn prune(&self, status: JobStatus, older_than: Duration, limit: u64) -> Result<Pruned, StoreError>;
}

/// Dispatch bookkeeping: what the transport confirmed, and what must be (re)sent.
#[async_trait]
pub trait DispatchBook: Send + Sync + 'static {
    /// Records that the transport confirmed these jobs' messages (bookkeeping, not a
    /// transition): only rows still QUEUED, unpublished and at the same `attempts` change.
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError>;

    /// Deletes a submission's outbox row (`NewJob::outbox`) once the transport confirmed
    /// every message of it; false when the row was gone (the sweep reclaimed it).
    async fn confirm_outbox(&self, outbox: Uuid) -> Result<bool, StoreError>;

    /// Hands back to the sweep the jobs of up to `limit` outbox rows older than `grace`
    /// (their submitter crashed, or a publish failed): those still QUEUED are marked
    /// unpublished, and the rows deleted, in one transaction. Returns how many jobs.
    async fn reclaim_outbox(&self, grace: Duration, limit: u64) -> Result<u64, StoreError>;

    /// QUEUED jobs whose message was never confirmed and that may run now: those that
    /// waited for a time (a delay, `run_at`) first, by that time, then fresh ones oldest
    /// first, skipping those created within `grace` (their submitter is still publishing
    /// them).
    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError>;

    /// How long until the earliest unpublished QUEUED job that waits for a time is due, by
    /// the database's clock, if one waits: the dispatch sweep wakes then. Read from an
    /// index of waiting jobs by time, never by visiting every waiting row.
    async fn next_due(&self) -> Result<Option<Duration>, StoreError>;

    /// Marks this QUEUED job unpublished (only at the same `attempts`), so the dispatch
    /// sweep sends it again: its message reached a worker before the job was due.
    async fn forget_publication(&self, job: &Dispatch) -> Result<bool, StoreError>;

    /// Marks every QUEUED job unpublished: a transport that keeps nothing across restarts
    /// (in-process) lost their messages.
    async fn forget_publications(&self) -> Result<u64, StoreError>;

    /// Raises by one level up to `limit` QUEUED jobs whose `ages_at` has come, oldest due
    /// first (each a compare-and-set on its `ages_at`), and sets the next rise `step` later
    /// (none at level 0). Returns the published ones among them, at their new level, to be
    /// announced again; the unpublished are sent by the sweep at their new level.
    async fn raise_waiting(&self, step: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError>;

    /// Admits as many jobs held by `limit` as it has room for now, by level, then age
    /// (`store::sea::limits` says how room is counted, under a lock of the limit's key).
    /// Returns them, to be sent, or when a rate is what holds them, how long until it has
    /// room.
    async fn release(&self, limit: &crate::domain::Limit) -> Result<Released, StoreError>;

    /// The keys of the limits that hold jobs now, with how many each holds: each is
    /// released again from time to time, in case a process stopped between freeing a
    /// limit's room and releasing its jobs; `/metrics` counts them by rule.
    async fn holding(&self) -> Result<Vec<(String, i64)>, StoreError>;

    /// Settles the jobs that wait for any of `ended` (jobs whose ending committed): each
    /// whose dependencies now allow it queues (returned to be sent when nothing else holds
    /// it), each a failed or cancelled dependency ends is CANCELLED with
    /// `job.dependency_failed`; each a compare-and-set on a waiting job, announced.
    async fn settle_dependents(&self, ended: &[Uuid]) -> Result<Settled, StoreError>;

    /// The same for up to `most` waiting jobs whose dependencies let them move and that
    /// nobody settled (a process stopped between an ending's commit and its settling).
    async fn settle_stranded(&self, most: u64) -> Result<Settled, StoreError>;
}

/// Everything the lifecycle needs from durable storage, as one object: every role. One
/// implementation ([`SeaStore`]) serves SQLite and PostgreSQL, and tells its [`Observer`]s
/// what each commit changed (a [`Hook`] injects faults in tests). Each part of the system
/// takes the roles it uses: an operation's context writes runs, the reaper maintains and
/// requeues, the cleaner maintains; the API, the executor and the dispatcher span several.
pub trait JobStore: JobReads + JobCommands + RunWrites + Maintenance + DispatchBook {}

impl<T: JobReads + JobCommands + RunWrites + Maintenance + DispatchBook + ?Sized> JobStore for T {}

/// Folds the outputs of a coordinator's batches, in batch order, into its result; asked by
/// the coordinator's operation name when the last batch closes it.
pub trait Reduce: Send + Sync + 'static {
    fn reduce(&self, operation: &str, outputs: Vec<Value>) -> Value;

    /// What a succeeded batch of a coordinator of `operation` stores: rows of the
    /// operation's own tables, inserted in the transaction that counts the batch (so a
    /// redelivered outcome writes them once, and an outcome of a stale run writes nothing),
    /// and the output kept for [`Reduce::reduce`]. `Err` fails the parent with
    /// `InvalidBatchOutput`. Default: the output as it is, no rows.
    fn batch_rows(&self, _operation: &str, _parent: RunRef, output: &Value) -> Result<BatchRows, String> {
        Ok(BatchRows { kept: output.clone(), insert: None })
    }
}
