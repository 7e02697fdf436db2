//! Jobs that wait for jobs: what a dependency's failure does to the job that waits for it.

use serde::{Deserialize, Serialize};

/// Most jobs one job may wait for by default (`jobs.max_dependencies`; a join over a whole
/// batch fits); what `GET /jobs/{id}/dependencies` lists of each side at most.
pub const MAX_DEPENDENCIES: usize = 1000;

/// What happens to a waiting job when one of its dependencies fails or is cancelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDependencyFailure {
    /// The job is CANCELLED with `job.dependency_failed` naming the dependency, and so in
    /// turn is every job that waits for it this way.
    #[default]
    Cancel,
    /// The job runs once every dependency has ended, however it ended.
    Run,
}

impl OnDependencyFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDependencyFailure::Cancel => "cancel",
            OnDependencyFailure::Run => "run",
        }
    }

    /// The stored value; anything but `run` cancels.
    pub fn parse(stored: Option<&str>) -> Self {
        match stored {
            Some("run") => OnDependencyFailure::Run,
            _ => OnDependencyFailure::Cancel,
        }
    }
}
