//! The in-process half of the notification path, as an observer of the store: after each
//! commit it wakes the waiters of every job that changed (and of its parent, whose counters
//! a child's ending moves), the claimers of a registered type whose job became claimable,
//! the script hosts when a script job queued or freed a quota slot, and stops this
//! process's run of a job that was cancelled.

use std::sync::Arc;

use super::{JobWaiters, StopRuns, TaskWaiters, ANY_JOB};
use crate::domain::{EventName, JobStatus, QueueName, RUN_SCRIPT};
use crate::store::{Change, Observer};

pub struct Notifier {
    waiters: Arc<JobWaiters>,
    tasks: Arc<TaskWaiters>,
    stop_runs: Option<StopRuns>,
}

impl Notifier {
    pub fn new(waiters: Arc<JobWaiters>, tasks: Arc<TaskWaiters>) -> Self {
        Notifier { waiters, tasks, stop_runs: None }
    }

    /// A cancel that ends a run stops this process's run of it through `stop_runs`, at once.
    pub fn with_stop_runs(mut self, stop_runs: StopRuns) -> Self {
        self.stop_runs = Some(stop_runs);
        self
    }
}

impl Observer for Notifier {
    fn committed(&self, changes: &[Change]) {
        let mut any = false;
        for change in changes {
            match change {
                Change::Moved { job, event, .. } => {
                    any = true;
                    self.waiters.wake(&job.id);
                    if let Some(parent) = job.parent_job_id {
                        self.waiters.wake(&parent);
                    }
                    if job.status == JobStatus::Queued && job.queue == QueueName::REMOTE {
                        self.tasks.wake(job.operation.as_str());
                    }
                    // A script job queued is one to claim; one that left RUNNING freed a quota slot.
                    if job.queue == QueueName::SCRIPTS && job.status != JobStatus::Running {
                        self.tasks.wake(RUN_SCRIPT);
                    }
                    if let (EventName::CANCELLED, Some(stop)) = (*event, &self.stop_runs) {
                        stop(job.id);
                    }
                }
                Change::Noted { id } => {
                    any = true;
                    self.waiters.wake(id);
                }
                // The dispatch sweep announces a registered type's job once its delay is
                // over; the record names no type, so every claimer looks.
                Change::Published { jobs } => {
                    if jobs.iter().any(|job| QueueName::pulled(&job.queue)) {
                        self.tasks.wake_all();
                    }
                }
            }
        }
        if any {
            self.waiters.wake(&ANY_JOB);
        }
    }
}
