//! Fan-out batches: the address a batch message carries back to its parent's run, and what
//! a batch produced, on its way to the write queue.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The form a coordinator's run fans out in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOutForm {
    /// Ephemeral batches on an operations queue, their outcomes on a write queue.
    Batches,
    /// Child jobs with rows and lifecycles of their own.
    Children,
}

impl FanOutForm {
    pub fn as_str(self) -> &'static str {
        match self {
            FanOutForm::Batches => "batches",
            FanOutForm::Children => "children",
        }
    }
}

/// Where a batch belongs: its parent's run and its place among the parent's batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchAddress {
    pub parent_job_id: Uuid,
    /// The parent's `attempts` when it fanned out: outcomes for an older run are ignored.
    pub attempt: i32,
    /// 0-based place among the parent's batches.
    pub index: i64,
    /// The queue the outcome goes to.
    pub write_queue: String,
    /// Failed tries of this batch so far, and how many retries it gets before the parent
    /// fails.
    #[serde(default)]
    pub failures: i32,
    #[serde(default)]
    pub max_retries: i32,
}

/// What one batch produced: the message of a write queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchOutcome {
    pub parent_job_id: Uuid,
    pub attempt: i32,
    pub index: i64,
    pub result: BatchResult,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchResult {
    Succeeded {
        output: Value,
    },
    /// Failed after its retries: the parent fails with this.
    Failed {
        error_code: String,
        message: String,
    },
}

impl BatchOutcome {
    pub fn of(address: &BatchAddress, result: BatchResult) -> BatchOutcome {
        BatchOutcome { parent_job_id: address.parent_job_id, attempt: address.attempt, index: address.index, result }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}
