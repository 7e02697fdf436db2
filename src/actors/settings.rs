//! The settings of the actors: the reaper's `[reaper]`, and each consumed queue's `[queues.NAME]`.

use serde::{Deserialize, Serialize};

/// The reaper: rescues jobs nobody runs any more.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaperSettings {
    /// Run the reaper in this process.
    pub enabled: bool,
    /// Milliseconds between passes.
    pub interval_ms: u64,
    /// Times a job whose lease expired is re-queued before it is FAILED with `lease_expired`.
    pub max_lease_requeues: u32,
    /// A RUNNING job older than this ...
    pub timeout_seconds: u64,
    /// ... that wrote no event for this long is FAILED with `JobTimeout`.
    pub stall_seconds: u64,
    /// A QUEUED job runnable for longer than this is FAILED with `QueueTimeout`; 0 is off.
    pub queue_timeout_seconds: u64,
    /// A run past its job's own `timeout_seconds` by this many milliseconds more is failed
    /// by the reaper (`Timeout`): its worker had the time to stop it, and did not.
    #[serde(default = "timeout_grace_ms")]
    pub timeout_grace_ms: u64,
    /// Jobs handled per pass and kind at most.
    pub batch: u64,
}

impl Default for ReaperSettings {
    fn default() -> Self {
        ReaperSettings {
            enabled: true,
            interval_ms: 10_000,
            max_lease_requeues: 3,
            timeout_seconds: 6 * 3600,
            stall_seconds: 1800,
            queue_timeout_seconds: 0,
            timeout_grace_ms: timeout_grace_ms(),
            batch: 500,
        }
    }
}

fn timeout_grace_ms() -> u64 {
    10_000
}

impl ReaperSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.interval_ms >= 1, "reaper.interval_ms must be at least 1");
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSettings {
    /// Jobs of this queue running at once in this process.
    pub concurrency: usize,
    /// Deliveries this process may hold at once, running ones included (AMQP prefetch),
    /// never fewer than `concurrency`. At or below `concurrency` nothing waits here that
    /// another worker could run; above it, the extra keeps a process of short jobs fed while
    /// the broker refills it.
    pub prefetch: u16,
    /// What the queue carries.
    #[serde(default)]
    pub kind: QueueKind,
    /// Job ids one message carries when several are published together (a batch
    /// submission, a group's children, a sweep). Above 1, a worker claims them in one group
    /// commit and the broker handles one message for many jobs: for queues of short jobs.
    /// A message's jobs all go to the worker that takes it, so keep 1 for long jobs.
    #[serde(default = "one")]
    pub ids_per_message: usize,
    /// Coordinators' batches one message carries, for an operations queue: a fan-out sends
    /// its batches this many to a message, the worker that takes it runs each in a slot of
    /// its own, sends their outcomes on in one message per write queue and acknowledges it
    /// once those are confirmed. For many short batches on RabbitMQ; keep 1 for long ones.
    #[serde(default = "one")]
    pub batches_per_message: usize,
}

fn one() -> usize {
    1
}

/// Most batches one message carries (`queues.<name>.batches_per_message` is capped here).
pub const MAX_BATCHES_PER_MESSAGE: usize = 1000;

impl QueueSettings {
    /// What one message of this queue may carry: job ids on a job queue, batches on an
    /// operations queue, one outcome per batch on a write queue (they follow their batches).
    pub fn per_message(&self) -> usize {
        match self.kind {
            QueueKind::Jobs => self.ids_per_message,
            QueueKind::Operations => self.batches_per_message,
            QueueKind::Writes => 1,
        }
    }

    /// The broker's window of unacknowledged deliveries: every slot fed, and no more
    /// unless `prefetch` asks for it. A delivery is held until its work ends.
    pub fn window(&self) -> u16 {
        let concurrency = u16::try_from(self.concurrency).unwrap_or(u16::MAX);
        concurrency.max(self.prefetch).max(1)
    }
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings { concurrency: 1, prefetch: 1, kind: QueueKind::Jobs, ids_per_message: 1, batches_per_message: 1 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// Job ids: every job a row with a lifecycle and events (`QueueConsumer`).
    #[default]
    Jobs,
    /// Serialised operation payloads run without a job row (`OperationConsumer`),
    /// among them coordinators' batches.
    Operations,
    /// Outcomes of coordinators' batches, recorded against their parent (`WriteConsumer`).
    Writes,
}

impl QueueKind {
    /// What a queue of this kind carries, for messages.
    fn carries(self) -> &'static str {
        match self {
            QueueKind::Jobs => "job ids",
            QueueKind::Operations => "operation payloads",
            QueueKind::Writes => "batch outcomes",
        }
    }
}

impl QueueSettings {
    /// Checks the queue `name`'s settings.
    pub fn validate(&self, name: &str) -> anyhow::Result<()> {
        crate::domain::QueueName::parse(name).map_err(|err| anyhow::anyhow!("queues: {err}"))?;
        anyhow::ensure!(self.concurrency >= 1, "queues.{name}.concurrency must be at least 1");
        anyhow::ensure!(self.prefetch >= 1, "queues.{name}.prefetch must be at least 1");
        let most = crate::dispatch::MAX_IDS_PER_MESSAGE;
        anyhow::ensure!(
            (1..=most).contains(&self.ids_per_message),
            "queues.{name}.ids_per_message must be between 1 and {most}"
        );
        anyhow::ensure!(
            (1..=MAX_BATCHES_PER_MESSAGE).contains(&self.batches_per_message),
            "queues.{name}.batches_per_message must be between 1 and {MAX_BATCHES_PER_MESSAGE}"
        );
        anyhow::ensure!(
            self.batches_per_message == 1 || self.kind == QueueKind::Operations,
            "queues.{name}.batches_per_message is for operations queues (kind = \"operations\"), and this one carries {}",
            self.kind.carries()
        );
        Ok(())
    }
}
