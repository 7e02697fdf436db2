//! Settings: defaults in code, then `config.toml` (or `--config FILE`), then environment
//! variables `YARDMASTER__SECTION__KEY`. `config.toml` at the repository root documents each.
//!
//! Each section's type, defaults and validation live with the capability that reads it;
//! this file only composes them into the file's shape and reads the file and the
//! environment.

use std::collections::BTreeMap;
use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub use crate::actors::settings::{QueueKind, QueueSettings, ReaperSettings};
pub use crate::auth::settings::{AuthSettings, Secret};
pub use crate::dispatch::DispatchSettings;
pub use crate::inference::settings::InferenceSettings;
pub use crate::jobs::settings::JobsSettings;
pub use crate::remote::settings::RemoteSettings;
pub use crate::retention::settings::RetentionSettings;
pub use crate::schedules::settings::{DeclaredSchedule, SchedulerSettings};
pub use crate::store::settings::StoreSettings;
pub use crate::telemetry::settings::{LogFormat, LogSettings};
pub use crate::transport::settings::{AmqpSettings, TransportKind, TransportSettings};
pub use crate::uploads::settings::{ServiceSettings, UploadSettings};
pub use crate::worker::settings::WorkerSettings;

use crate::domain::QueueName;

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "config.toml";
pub const ENV_PREFIX: &str = "YARDMASTER__";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub store: StoreSettings,
    pub transport: TransportSettings,
    pub worker: WorkerSettings,
    pub dispatch: DispatchSettings,
    /// What a submission may ask of time.
    pub jobs: JobsSettings,
    pub reaper: ReaperSettings,
    /// The libtorch inference actor and its operations (`compute_embeddings`,
    /// `nearest_neighbours`).
    pub inference: InferenceSettings,
    /// API tokens.
    pub auth: AuthSettings,
    /// Registered job types and the remote workers that claim them over HTTP.
    pub remote: RemoteSettings,
    /// Uploaded `run.sh` jobs: their files, services, quotas and sandbox.
    pub uploads: UploadSettings,
    /// The cleaner: uploaded files past their age, and the history of long finished jobs.
    pub retention: RetentionSettings,
    /// The scheduler every process runs (no leader: each tick is decided once in the store).
    #[serde(default)]
    pub scheduler: SchedulerSettings,
    /// Schedules kept in this file (`[schedules.NAME]`), created or updated at start.
    #[serde(default)]
    pub schedules: BTreeMap<String, DeclaredSchedule>,
    /// Queues this process consumes, by name.
    pub queues: BTreeMap<String, QueueSettings>,
    /// What the process logs, and how.
    pub log: LogSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address the HTTP API listens on; port 0 picks a free port.
    pub bind: String,
    /// HTTP worker threads.
    pub http_workers: usize,
    /// Largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// Largest page of `GET /jobs` and `GET /jobs/{id}/events`.
    pub max_page_size: u64,
    /// Seconds a request body may take to arrive; slower ones get 408.
    pub body_timeout_seconds: u64,
    /// Open connections per HTTP worker at most; past it, new ones wait in the backlog.
    pub max_connections: usize,
    /// Open connections per client address at most; past it, new ones are closed at once.
    pub max_connections_per_client: usize,
    /// The longest `Prefer: wait=N` a request may hold (`GET /jobs/{id}`).
    pub max_wait_seconds: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            bind: "127.0.0.1:8080".into(),
            http_workers: 2,
            max_body_bytes: 1024 * 1024,
            max_page_size: 500,
            body_timeout_seconds: 30,
            max_connections: 512,
            max_connections_per_client: 256,
            max_wait_seconds: 60,
        }
    }
}

impl ServerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.max_page_size >= 1, "server.max_page_size must be at least 1");
        anyhow::ensure!(self.body_timeout_seconds >= 1, "server.body_timeout_seconds must be at least 1");
        anyhow::ensure!(self.max_connections >= 1, "server.max_connections must be at least 1");
        anyhow::ensure!(self.max_connections_per_client >= 1, "server.max_connections_per_client must be at least 1");
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            log: LogSettings::default(),
            server: ServerSettings::default(),
            store: StoreSettings::default(),
            transport: TransportSettings::default(),
            worker: WorkerSettings::default(),
            reaper: ReaperSettings::default(),
            dispatch: DispatchSettings::default(),
            jobs: JobsSettings::default(),
            inference: InferenceSettings::default(),
            auth: AuthSettings::default(),
            remote: RemoteSettings::default(),
            uploads: UploadSettings::default(),
            retention: RetentionSettings::default(),
            scheduler: SchedulerSettings::default(),
            schedules: BTreeMap::new(),
            queues: default_queues(),
        }
    }
}

/// The queues of the embedded default: jobs, coordinators' batches, inference batches and
/// batch outcomes.
fn default_queues() -> BTreeMap<String, QueueSettings> {
    let queue = |concurrency, prefetch, kind| QueueSettings { concurrency, prefetch, kind, ..QueueSettings::default() };
    BTreeMap::from([
        (QueueName::DEFAULT.to_owned(), queue(4, 1, QueueKind::Jobs)),
        (crate::ops::BATCH_QUEUE.to_owned(), queue(4, 1, QueueKind::Operations)),
        (InferenceSettings::default().queue, queue(2, 1, QueueKind::Operations)),
        (crate::ops::WRITE_QUEUE.to_owned(), queue(64, 256, QueueKind::Writes)),
    ])
}

impl Settings {
    /// Defaults, then the file (`path`, or `config.toml` when present), then the environment.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Settings> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        match path {
            Some(path) if !path.exists() => {
                anyhow::bail!("config file {} does not exist", path.display())
            }
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                figment = figment.merge(Toml::file_exact(DEFAULT_CONFIG_FILE))
            }
            None => {}
        }
        let settings: Settings = figment
            .merge(Env::prefixed(ENV_PREFIX).split("__"))
            .extract()
            .map_err(|err| anyhow::anyhow!("invalid configuration: {err}"))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Every section's own checks.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.server.validate()?;
        self.store.validate()?;
        self.transport.validate()?;
        self.worker.validate()?;
        self.reaper.validate()?;
        self.dispatch.validate()?;
        self.jobs.validate()?;
        self.inference.validate()?;
        self.remote.validate()?;
        self.uploads.validate()?;
        self.retention.validate()?;
        self.scheduler.validate()?;
        crate::schedules::settings::validate_declared(&self.schedules)?;
        for (name, queue) in &self.queues {
            queue.validate(name)?;
        }
        Ok(())
    }

    /// Consume only the queues `names` (each from `[queues.NAME]` when configured, else
    /// concurrency 1, prefetch 1); every configured queue stays known, so submissions to it
    /// are still accepted by an API in this process.
    pub fn consume_only(&mut self, names: &[String]) -> anyhow::Result<()> {
        for name in names {
            QueueName::parse(name).map_err(|err| anyhow::anyhow!("--queue: {err}"))?;
            self.queues.entry(name.clone()).or_default();
        }
        self.worker.queues = names.to_vec();
        Ok(())
    }

    /// The queues this process consumes, with their settings.
    pub fn consumed_queues(&self) -> impl Iterator<Item = (&String, &QueueSettings)> {
        let all = self.worker.queues.is_empty();
        self.queues.iter().filter(move |(name, _)| all || self.worker.queues.contains(name))
    }

    /// The job queues (`kind = "jobs"`) a submission may name.
    pub fn job_queues(&self) -> std::collections::BTreeSet<String> {
        let jobs = self.queues.iter().filter(|(_, queue)| queue.kind == QueueKind::Jobs);
        jobs.map(|(name, _)| name.clone()).collect()
    }

    /// The worker name written to claimed jobs.
    pub fn worker_id(&self) -> String {
        self.worker.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_embedded_setup() {
        let settings = Settings::default();
        assert!(settings.store.url.starts_with("sqlite:"));
        assert_eq!(settings.transport.kind, TransportKind::InProcess);
        assert_eq!(settings.server.bind, "127.0.0.1:8080");
        assert!(settings.validate().is_ok());
    }

    #[test]
    fn the_shipped_config_file_parses_and_matches_the_defaults() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CONFIG_FILE);
        let from_file = Settings::load(Some(&path)).map_err(|err| err.to_string());
        let from_file = serde_json::to_value(from_file.unwrap()).unwrap();
        assert_eq!(from_file, serde_json::to_value(Settings::default()).unwrap());
    }

    #[test]
    fn batches_per_message_is_bounded_and_for_operations_queues_only() {
        let refused = |name: &str, queue: QueueSettings| {
            let mut settings = Settings::default();
            settings.queues.insert(name.into(), queue);
            settings.validate().map(drop).map_err(|err| err.to_string())
        };
        let operations = |batches_per_message| QueueSettings {
            kind: QueueKind::Operations,
            batches_per_message,
            ..QueueSettings::default()
        };
        assert_eq!(refused("batches", operations(32)), Ok(()));
        let none = refused("batches", operations(0)).unwrap_err();
        assert!(none.contains("queues.batches.batches_per_message must be between 1 and 1000"), "{none}");
        assert!(refused("batches", operations(1001)).is_err());
        let jobs = QueueSettings { batches_per_message: 8, ..QueueSettings::default() };
        let wrong_kind = refused("default", jobs).unwrap_err();
        assert!(wrong_kind.contains("is for operations queues") && wrong_kind.contains("job ids"), "{wrong_kind}");
    }

    #[test]
    fn bad_queue_names_are_refused() {
        let mut settings = Settings::default();
        settings.queues.insert("bad name".into(), QueueSettings::default());
        assert!(settings.validate().is_err());
    }
}
