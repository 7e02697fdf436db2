//! The `[uploads]` settings: where files live, the local script host, and each service's
//! limits and quotas.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadSettings {
    /// Where uploaded files, runs and result archives live (a relative path is from the
    /// working directory). Every API process and local script host must see the same one.
    pub dir: String,
    /// Scripts this process runs at once, claimed under the services' quotas; 0 runs none
    /// (script hosts elsewhere do).
    pub host_slots: usize,
    /// Seconds an upload's body may take in all, and may stall between two reads.
    pub body_timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    /// The services a `run.sh` may be uploaded for, with their limits and quotas.
    pub services: BTreeMap<String, ServiceSettings>,
}

impl Default for UploadSettings {
    fn default() -> Self {
        UploadSettings {
            dir: "data/uploads".into(),
            host_slots: 2,
            body_timeout_seconds: 600,
            idle_timeout_seconds: 30,
            services: BTreeMap::from([("default".to_owned(), ServiceSettings::default())]),
        }
    }
}

/// One service's limits. Every field has the default shown in `config.toml`, so a service
/// names only what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceSettings {
    /// Files per upload, bytes per file and bytes in all; past them the upload is refused
    /// (413) while it streams.
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    /// Runs at once per user, and in all; jobs past them wait QUEUED, users served in turn.
    pub per_user: u32,
    pub total: u32,
    /// Seconds a run may take (wall clock) before its process group is killed.
    pub timeout_seconds: u64,
    /// Hours after a job ends before the cleaner removes its files (the row and events stay).
    pub max_age_hours: u64,
    /// The run's rlimits: CPU seconds, address space, largest file written, open files,
    /// processes (RLIMIT_NPROC counts every process of the user the server runs as).
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    pub processes: u64,
    /// Bytes of stdout and of stderr kept; the rest is counted and dropped.
    pub log_bytes: u64,
}

impl Default for ServiceSettings {
    fn default() -> Self {
        ServiceSettings {
            max_files: 1000,
            max_file_bytes: 100 << 20,
            max_total_bytes: 1 << 30,
            per_user: 2,
            total: 8,
            timeout_seconds: 3600,
            max_age_hours: 48,
            cpu_seconds: 3600,
            memory_bytes: 4 << 30,
            file_size_bytes: 1 << 30,
            open_files: 1024,
            processes: 4096,
            log_bytes: 10 << 20,
        }
    }
}

impl UploadSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, service) in &self.services {
            super::check_service_name(name).map_err(|err| anyhow::anyhow!("uploads.services: {err}"))?;
            anyhow::ensure!(
                service.per_user >= 1 && service.total >= 1,
                "uploads.services.{name}: per_user and total must be at least 1"
            );
            anyhow::ensure!(service.max_files >= 1, "uploads.services.{name}.max_files must be at least 1");
            anyhow::ensure!(service.timeout_seconds >= 1, "uploads.services.{name}.timeout_seconds must be at least 1");
        }
        Ok(())
    }
}
