//! The `[remote]` settings: type categories, worker and lease lifetimes, the sweeper.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSettings {
    /// Categories a type may be registered in (`room:category:name`); others are 400
    /// `invalid_category`.
    pub categories: Vec<String>,
    /// Seconds a remote worker may go without a heartbeat before it is marked gone.
    pub worker_ttl_seconds: u64,
    /// Seconds a claim leases its job; each heartbeat of the worker renews its jobs' leases.
    /// A worker that stops heart-beating loses them to the reaper, under the retry rules.
    pub lease_seconds: u64,
    /// Whether a submission to a type no live worker serves is queued (true) or refused
    /// with 409 `no_worker` (false) when it does not say (`wait_for_worker`).
    pub queue_without_worker: bool,
    /// Milliseconds between passes of the sweeper (gone workers, orphaned types).
    pub sweep_interval_ms: u64,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        RemoteSettings {
            categories: ["modifiers", "selections", "analysis"].map(String::from).to_vec(),
            worker_ttl_seconds: 30,
            lease_seconds: 30,
            queue_without_worker: false,
            sweep_interval_ms: 5000,
        }
    }
}

impl RemoteSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.sweep_interval_ms >= 1, "remote.sweep_interval_ms must be at least 1");
        Ok(())
    }
}
