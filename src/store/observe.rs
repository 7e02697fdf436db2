//! What the store tells the rest of the process after each commit: the [`Change`]s it made,
//! handed to every [`Observer`] (the live notifier, the job metrics), and the [`Hook`] tests
//! use to make a call fail or to act between a write and its caller.
//!
//! Observers run after the commit, in the order they were added, on the writer's task: they
//! must not block (wake, count, send). A change is announced once, by the call that made it.

use async_trait::async_trait;
use uuid::Uuid;

use super::{Completion, Dispatch, JobStore, Requeue, RunRef, StoreError};
use crate::domain::{Job, JobStatus, NewEvent};

/// What one commit did to one job.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// The job's row moved: `job` is the row as committed (its room, queue, operation and
    /// new status), `was` the status it left (one, or the statuses a compare-and-set
    /// accepted, as a cancel's QUEUED or RUNNING; empty when the commit created it), and
    /// `event` the event written with the move.
    Moved { job: &'a Job, was: &'static [JobStatus], event: &'static str },
    /// Events were appended to job `id`'s log, or its counters moved, its status unchanged.
    Noted { id: Uuid },
    /// The transport's confirmation of these jobs' messages was recorded.
    Published { jobs: &'a [Dispatch] },
}

impl Change<'_> {
    /// The job this change is about, if it names one.
    pub fn job_id(&self) -> Option<Uuid> {
        match self {
            Change::Moved { job, .. } => Some(job.id),
            Change::Noted { id } => Some(*id),
            Change::Published { .. } => None,
        }
    }
}

/// Told of every commit of the store, after it.
pub trait Observer: Send + Sync + 'static {
    fn committed(&self, changes: &[Change<'_>]);
}

/// One call of the store, as a [`Hook`] sees it.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    /// A read: its method's name, and the job it reads if one.
    Read(&'static str, Option<Uuid>),
    Submit,
    Cancel(Uuid),
    Retry(Uuid),
    NoteQueued(Uuid),
    Claim(Uuid),
    ClaimNext,
    Finish(RunRef, &'a Completion),
    Requeue(RunRef, &'a Requeue),
    ExtendLease(RunRef),
    FanOut(RunRef),
    RerunChildren(RunRef),
    Defer(RunRef),
    RecordBatch(Uuid),
    RecordEvent(RunRef, &'a NewEvent),
    /// A call of the reaper, the cleaner or the dispatch book, by its method's name.
    Upkeep(&'static str),
}

/// Fault injection for tests: asked before every call of the store (an error fails the call
/// and nothing is written) and after every write that committed (with what it changed and
/// the store, to act in the moment between a commit and its caller's next step).
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    async fn before(&self, _call: Call<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    async fn after(&self, _call: Call<'_>, _changes: &[Change<'_>], _store: &dyn JobStore) -> Result<(), StoreError> {
        Ok(())
    }
}
