//! The `[worker]` settings: whether this process runs jobs, its name, leases and heartbeats,
//! and its grace period at shutdown.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSettings {
    /// Run queue consumers in this process.
    pub enabled: bool,
    /// Worker name written to `job.owner`; empty means `HOSTNAME:PID`.
    pub id: String,
    /// Lease taken on a claimed job; a worker that stops renewing it loses the job to the reaper.
    pub lease_ms: u64,
    /// How often the heartbeat renews a running job's lease (well under `lease_ms`).
    pub heartbeat_ms: u64,
    /// After SIGTERM: how long in-flight jobs may finish before they are re-queued.
    pub grace_seconds: u64,
    /// The queues this process consumes; empty means every queue in `[queues]`
    /// (`worker --queue NAME` sets it).
    #[serde(default)]
    pub queues: Vec<String>,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            enabled: true,
            id: String::new(),
            lease_ms: 60_000,
            heartbeat_ms: 10_000,
            grace_seconds: 30,
            queues: Vec::new(),
        }
    }
}

impl WorkerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.heartbeat_ms >= 1, "worker.heartbeat_ms must be at least 1");
        anyhow::ensure!(
            self.lease_ms > self.heartbeat_ms,
            "worker.lease_ms must be longer than worker.heartbeat_ms, or leases expire between heartbeats"
        );
        Ok(())
    }

    /// The worker name written to claimed jobs: `id`, or `HOSTNAME:PID`.
    pub fn name(&self) -> String {
        if !self.id.is_empty() {
            return self.id.clone();
        }
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "localhost".into());
        format!("{host}:{}", std::process::id())
    }
}
