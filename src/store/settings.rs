//! The `[store]` settings: which database, its pool, migrations, and group commit.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    /// `sqlite://FILE?mode=rwc` (embedded) or `postgres://USER@HOST/DB`.
    pub url: String,
    pub max_connections: u32,
    pub connect_timeout_seconds: u64,
    /// Apply pending migrations when `serve` starts.
    pub migrate_on_start: bool,
    /// Writes of concurrent jobs committed together, up to this many per transaction (one
    /// fsync for many jobs); 0 or 1 commits each on its own.
    pub group_commit_max: usize,
}

impl StoreSettings {
    /// The group-commit batch in force. On by default on both backends: on SQLite one
    /// writer fsyncs every commit, and on PostgreSQL the batch's multi-row statements beat
    /// parallel single-row commits (see BENCHMARKS.md).
    pub fn group_commit(&self) -> usize {
        self.group_commit_max.max(1)
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            url: "sqlite://yardmaster.db?mode=rwc".into(),
            max_connections: 8,
            connect_timeout_seconds: 10,
            migrate_on_start: true,
            group_commit_max: 64,
        }
    }
}

impl StoreSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        super::Backend::of_url(&self.url)?;
        Ok(())
    }
}
