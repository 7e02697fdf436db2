//! Settings: defaults in code, then `config.toml` (or `--config FILE`), then environment
//! variables `YARDMASTER__SECTION__KEY`. `config.toml` at the repository root documents each.

use std::collections::BTreeMap;
use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

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
    /// Queues this process consumes, by name.
    pub queues: BTreeMap<String, QueueSettings>,
    /// What the process logs, and how.
    pub log: LogSettings,
}

/// Logs go to standard error (journald under systemd), as text for people or as one JSON
/// object per line for a log pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `yardmaster=debug,sqlx=warn`, …); `RUST_LOG` wins over it.
    pub filter: String,
    /// An OTLP/HTTP collector (`http://collector:4318`) to export spans to; empty: none.
    /// Needs a build with the `otel` feature.
    pub otlp_endpoint: String,
    /// The `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Text,
            filter: "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn".into(),
            otlp_endpoint: String::new(),
            service_name: "yardmaster".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `time level span{fields}: message fields`, coloured on a terminal.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, and the spans it was in
    /// (`request` with its id, `job` with its id and attempt).
    Json,
}

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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Run the cleaner in this process.
    pub enabled: bool,
    /// Milliseconds between passes.
    pub interval_ms: u64,
    /// Most jobs per transaction: each batch of history is deleted in one transaction,
    /// sized to last a few milliseconds, at most this many.
    pub batch: u64,
    /// Days after a job ended SUCCEEDED, FAILED or CANCELLED before its row, its children
    /// and all their events are deleted; 0 keeps that history.
    pub succeeded_days: f64,
    pub failed_days: f64,
    pub cancelled_days: f64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            enabled: true,
            interval_ms: 60_000,
            batch: 500,
            succeeded_days: 7.0,
            failed_days: 30.0,
            cancelled_days: 7.0,
        }
    }
}

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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// Seconds a verified token is trusted without reading its row again (a revocation made
    /// by another process counts within this; one through this process's API at once).
    pub cache_seconds: u64,
    /// An admin token `serve` stores at start if it is not stored yet, for automated
    /// deployments (`YARDMASTER__AUTH__BOOTSTRAP_TOKEN`; `yardmaster token new` makes one).
    /// Without it, the first `serve` on a store with no token makes one and prints it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<Secret>,
}

/// A value that must never be printed: `Debug` shows `[redacted]`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSettings {
    pub kind: TransportKind,
    pub amqp: AmqpSettings,
}

/// RabbitMQ, used when `transport.kind = "amqp"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpSettings {
    /// `amqp://HOST:5672/%2f`; user and password default to the broker's guest account.
    pub url: String,
    /// Prepended to queue names on the broker: queue `default` is `yardmaster.default`.
    pub queue_prefix: String,
    pub connect_timeout_seconds: u64,
    /// How long a publish waits for the broker's confirm before it is retried.
    pub confirm_timeout_seconds: u64,
    /// Tries per publish (reconnecting between them) before the job is left to the sweep.
    pub publish_attempts: u32,
    /// A claimed run still going after this long has its delivery acknowledged (the job's
    /// row and lease hold it from then on): keep it under the broker's `consumer_timeout`
    /// (30 minutes by default), which closes the channel of a delivery held longer.
    pub ack_running_after_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// In-memory queues inside this process (embedded default).
    InProcess,
    /// RabbitMQ: many processes on many hosts.
    Amqp,
}

/// The dispatch sweep: re-sends QUEUED jobs whose message was never confirmed (a crash
/// between commit and publish, a broker outage) and jobs whose RetryLater delay is over.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchSettings {
    /// Run the sweep in this process.
    pub enabled: bool,
    /// Milliseconds between sweeps.
    pub interval_ms: u64,
    /// A job younger than this is left to its submitter, which is still publishing it.
    pub grace_ms: u64,
    /// Jobs sent per sweep at most.
    pub batch: u64,
}

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
    /// Jobs handled per pass and kind at most.
    pub batch: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferenceSettings {
    /// The TorchScript model file: input int64 `[batch, tokens]` (token ids, 0 = padding),
    /// output float `[batch, dim]`. `yardmaster model init` writes the default model there.
    pub model: String,
    /// `auto` (CUDA when available, else CPU), `cpu` or `cuda`.
    pub device: String,
    /// Inputs per batch (one forward pass).
    pub batch_size: usize,
    /// Batches the inference actor accepts at once (running and waiting); a batch that
    /// finds it full is answered RetryLater and waits off the queue, never blocking a slot.
    pub mailbox: usize,
    /// How long a batch refused by a full actor waits before it is tried again.
    pub retry_after_ms: u64,
    /// The tokeniser's vocabulary: token ids are 1 to `vocab - 1` (see `inference::tokenizer`).
    pub vocab: u32,
    /// Longest input, in characters (tokens); a longer one fails its job (`InvalidInput`).
    pub max_tokens: usize,
    /// The operations queue batches run on: consumed by the processes that hold the model.
    pub queue: String,
    /// The writes queue batch outcomes (the vectors) are stored from.
    pub write_queue: String,
}

impl Default for InferenceSettings {
    fn default() -> Self {
        InferenceSettings {
            model: "models/default.pt".into(),
            device: "auto".into(),
            batch_size: 64,
            mailbox: 2,
            retry_after_ms: 200,
            vocab: 4096,
            max_tokens: 512,
            queue: "inference".into(),
            write_queue: crate::ops::WRITE_QUEUE.into(),
        }
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
}

fn one() -> usize {
    1
}

impl QueueSettings {
    /// The broker's window of unacknowledged deliveries: every slot fed, and no more
    /// unless `prefetch` asks for it. A delivery is held until its work ends.
    pub fn window(&self) -> u16 {
        let concurrency = u16::try_from(self.concurrency).unwrap_or(u16::MAX);
        concurrency.max(self.prefetch).max(1)
    }
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings { concurrency: 1, prefetch: 1, kind: QueueKind::Jobs, ids_per_message: 1 }
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

impl Default for Settings {
    fn default() -> Self {
        Settings {
            log: LogSettings::default(),
            server: ServerSettings {
                bind: "127.0.0.1:8080".into(),
                http_workers: 2,
                max_body_bytes: 1024 * 1024,
                max_page_size: 500,
                body_timeout_seconds: 30,
                max_connections: 512,
                max_connections_per_client: 256,
                max_wait_seconds: 60,
            },
            store: StoreSettings {
                url: "sqlite://yardmaster.db?mode=rwc".into(),
                max_connections: 8,
                connect_timeout_seconds: 10,
                migrate_on_start: true,
                group_commit_max: 64,
            },
            transport: TransportSettings {
                kind: TransportKind::InProcess,
                amqp: AmqpSettings {
                    url: "amqp://127.0.0.1:5672/%2f".into(),
                    queue_prefix: "yardmaster.".into(),
                    connect_timeout_seconds: 5,
                    confirm_timeout_seconds: 10,
                    publish_attempts: 5,
                    ack_running_after_ms: 15 * 60 * 1000,
                },
            },
            worker: WorkerSettings {
                enabled: true,
                id: String::new(),
                lease_ms: 60_000,
                heartbeat_ms: 10_000,
                grace_seconds: 30,
                queues: Vec::new(),
            },
            reaper: ReaperSettings {
                enabled: true,
                interval_ms: 10_000,
                max_lease_requeues: 3,
                timeout_seconds: 6 * 3600,
                stall_seconds: 1800,
                queue_timeout_seconds: 0,
                batch: 500,
            },
            dispatch: DispatchSettings { enabled: true, interval_ms: 1000, grace_ms: 5000, batch: 1000 },
            inference: InferenceSettings::default(),
            auth: AuthSettings { cache_seconds: 2, bootstrap_token: None },
            remote: RemoteSettings::default(),
            uploads: UploadSettings::default(),
            retention: RetentionSettings::default(),
            queues: BTreeMap::from([
                (
                    QueueName::DEFAULT.to_owned(),
                    QueueSettings { concurrency: 4, prefetch: 1, kind: QueueKind::Jobs, ids_per_message: 1 },
                ),
                (
                    crate::ops::BATCH_QUEUE.to_owned(),
                    QueueSettings { concurrency: 4, prefetch: 1, kind: QueueKind::Operations, ids_per_message: 1 },
                ),
                (
                    InferenceSettings::default().queue,
                    QueueSettings { concurrency: 2, prefetch: 1, kind: QueueKind::Operations, ids_per_message: 1 },
                ),
                (
                    crate::ops::WRITE_QUEUE.to_owned(),
                    QueueSettings { concurrency: 64, prefetch: 256, kind: QueueKind::Writes, ids_per_message: 1 },
                ),
            ]),
        }
    }
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

    pub fn validate(&self) -> anyhow::Result<()> {
        let retention = &self.retention;
        for (name, days) in [
            ("succeeded", retention.succeeded_days),
            ("failed", retention.failed_days),
            ("cancelled", retention.cancelled_days),
        ] {
            anyhow::ensure!(days.is_finite() && days >= 0.0, "retention.{name}_days must be 0 or more");
        }
        anyhow::ensure!(retention.batch >= 1, "retention.batch must be at least 1");
        for (name, service) in &self.uploads.services {
            crate::uploads::check_service_name(name).map_err(|err| anyhow::anyhow!("uploads.services: {err}"))?;
            anyhow::ensure!(
                service.per_user >= 1 && service.total >= 1,
                "uploads.services.{name}: per_user and total must be at least 1"
            );
            anyhow::ensure!(service.max_files >= 1, "uploads.services.{name}.max_files must be at least 1");
            anyhow::ensure!(service.timeout_seconds >= 1, "uploads.services.{name}.timeout_seconds must be at least 1");
        }
        for (name, queue) in &self.queues {
            QueueName::parse(name).map_err(|err| anyhow::anyhow!("queues: {err}"))?;
            anyhow::ensure!(queue.concurrency >= 1, "queues.{name}.concurrency must be at least 1");
            anyhow::ensure!(queue.prefetch >= 1, "queues.{name}.prefetch must be at least 1");
            let most = crate::dispatch::MAX_IDS_PER_MESSAGE;
            anyhow::ensure!(
                (1..=most).contains(&queue.ids_per_message),
                "queues.{name}.ids_per_message must be between 1 and {most}"
            );
        }
        anyhow::ensure!(self.worker.heartbeat_ms >= 1, "worker.heartbeat_ms must be at least 1");
        anyhow::ensure!(
            self.worker.lease_ms > self.worker.heartbeat_ms,
            "worker.lease_ms must be longer than worker.heartbeat_ms, or leases expire between heartbeats"
        );
        anyhow::ensure!(self.reaper.interval_ms >= 1, "reaper.interval_ms must be at least 1");
        anyhow::ensure!(self.dispatch.interval_ms >= 1, "dispatch.interval_ms must be at least 1");
        anyhow::ensure!(
            self.transport.amqp.publish_attempts >= 1,
            "transport.amqp.publish_attempts must be at least 1"
        );
        anyhow::ensure!(
            self.transport.amqp.ack_running_after_ms >= 1,
            "transport.amqp.ack_running_after_ms must be at least 1"
        );
        anyhow::ensure!(self.server.max_page_size >= 1, "server.max_page_size must be at least 1");
        anyhow::ensure!(self.server.body_timeout_seconds >= 1, "server.body_timeout_seconds must be at least 1");
        anyhow::ensure!(self.server.max_connections >= 1, "server.max_connections must be at least 1");
        anyhow::ensure!(
            self.server.max_connections_per_client >= 1,
            "server.max_connections_per_client must be at least 1"
        );
        let inference = &self.inference;
        anyhow::ensure!(
            matches!(inference.device.as_str(), "auto" | "cpu" | "cuda"),
            "inference.device must be auto, cpu or cuda"
        );
        anyhow::ensure!((1..=4096).contains(&inference.batch_size), "inference.batch_size must be 1 to 4096");
        anyhow::ensure!((1..=1024).contains(&inference.mailbox), "inference.mailbox must be 1 to 1024");
        anyhow::ensure!((2..=1 << 24).contains(&inference.vocab), "inference.vocab must be 2 to 16777216");
        anyhow::ensure!((1..=65_536).contains(&inference.max_tokens), "inference.max_tokens must be 1 to 65536");
        crate::store::Backend::of_url(&self.store.url)?;
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
        if !self.worker.id.is_empty() {
            return self.worker.id.clone();
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
    fn bad_queue_names_are_refused() {
        let mut settings = Settings::default();
        settings.queues.insert("bad name".into(), QueueSettings::default());
        assert!(settings.validate().is_err());
    }
}
