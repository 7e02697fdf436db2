//! The job state machine: the only place that says which transitions exist.
//!
//! ```text
//! QUEUED ──▶ RUNNING ──▶ SUCCEEDED
//!   │           ├──────▶ FAILED ──▶ QUEUED (manual retry)
//!   │           └──────▶ QUEUED (RetryLater, retry after failure, lease expired, shutdown)
//!   ├──────────┴───────▶ CANCELLED ──▶ QUEUED (manual retry)
//!   └──────────────────▶ FAILED (queue timeout)
//! ```
//!
//! Who moves a job out of each state: QUEUED — a worker's claim, a cancel, the reaper's
//! queue timeout; RUNNING — its worker's outcome, a cancel, the reaper (lease expired,
//! timeout), the shutdown guard.

use std::fmt;
use std::str::FromStr;

use sea_orm::sea_query::StringLen;
use sea_orm::{DeriveActiveEnum, EnumIter};
use serde::{Deserialize, Serialize};

/// Where a job is in its life. Stored and serialised in lowercase.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema, DeriveActiveEnum, EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)", rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for a worker. Moved out by a claim (worker) or a cancel (API).
    Queued,
    /// Claimed by a worker. Moved out by the worker's outcome, a cancel, or a requeue.
    Running,
    /// Finished without error. Terminal.
    Succeeded,
    /// Finished with an error. Terminal unless retried by hand.
    Failed,
    /// Stopped by a user. Terminal unless retried by hand.
    Cancelled,
}

impl JobStatus {
    pub const ALL: [JobStatus; 5] =
        [JobStatus::Queued, JobStatus::Running, JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// True once nothing but a manual retry can move the job.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled)
    }

    /// The states a job may be in for a move to `to` to be legal.
    pub fn sources_of(to: JobStatus) -> &'static [JobStatus] {
        use JobStatus::*;
        match to {
            Queued => &[Running, Failed, Cancelled],
            Running => &[Queued],
            Succeeded => &[Running],
            // QUEUED → FAILED only for a job that waited past the queue timeout (reaper).
            Failed => &[Running, Queued],
            Cancelled => &[Queued, Running],
        }
    }

    pub fn can_transition_to(self, to: JobStatus) -> bool {
        JobStatus::sources_of(to).contains(&self)
    }

    /// Checks a transition, returning the typed error the API maps to 409.
    pub fn transition(self, to: JobStatus) -> Result<JobStatus, InvalidTransition> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(InvalidTransition { from: self, to })
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// A status string that is not one of [`JobStatus::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown job status {0:?}")]
pub struct UnknownStatus(pub String);

/// A move the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {from} job cannot become {to}")]
pub struct InvalidTransition {
    pub from: JobStatus,
    pub to: JobStatus,
}

#[cfg(test)]
mod tests {
    use super::JobStatus::*;
    use super::*;

    #[test]
    fn lifecycle_moves_are_allowed() {
        for (from, to) in [
            (Queued, Running),
            (Running, Succeeded),
            (Running, Failed),
            (Queued, Cancelled),
            (Running, Cancelled),
            (Running, Queued),
            (Failed, Queued),
        ] {
            assert!(from.can_transition_to(to), "{from} -> {to}");
        }
    }

    #[test]
    fn terminal_states_do_not_finish_twice() {
        for from in [Succeeded, Failed, Cancelled] {
            for to in [Running, Succeeded, Failed, Cancelled] {
                assert_eq!(from.transition(to), Err(InvalidTransition { from, to }));
            }
        }
        assert!(!Queued.can_transition_to(Succeeded));
        assert!(Queued.can_transition_to(Failed), "queue timeout");
        assert!(!Succeeded.can_transition_to(Queued));
    }

    #[test]
    fn status_round_trips_through_text() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>().ok(), Some(status));
        }
        assert!("QUEUED".parse::<JobStatus>().is_err());
    }
}
