//! `run_script`: the operation of an uploaded job. It copies the upload into a fresh working
//! directory, runs `run.sh` there in the sandbox, zips what the run made with its logs, and
//! reports: exit 0 is the job's success; anything else its failure, named (exit code and
//! the end of stderr, the signal, the limit it hit, the timeout).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::archive::{self, Packed};
use super::files::BlobStore;
use super::sandbox::{self, signal_name, Exit, Finished, Limits};
use super::settings::ServiceSettings;
use super::workspace::Workspace;
use crate::domain::{EventLevel, Job, RUN_SCRIPT};
use crate::ops::{JobContext, Operation, OperationError};
use tokio_util::sync::CancellationToken;

/// Error classes of a run that did not succeed.
pub const SCRIPT_FAILED: &str = "ScriptFailed";
pub const SCRIPT_KILLED: &str = "ScriptKilled";
pub const SCRIPT_TIMEOUT: &str = "ScriptTimeout";
pub const MEMORY_LIMIT: &str = "MemoryLimit";
pub const FILE_SIZE_LIMIT: &str = "FileSizeLimit";
pub const CPU_LIMIT: &str = "CpuLimit";
pub const SANDBOX_ERROR: &str = "SandboxError";

/// Bytes of stderr quoted in a failure's message.
const STDERR_TAIL: u64 = 2000;

pub struct RunScript {
    blobs: Arc<dyn BlobStore>,
    workspace: Workspace,
    services: Arc<BTreeMap<String, ServiceSettings>>,
}

impl RunScript {
    pub fn new(
        blobs: Arc<dyn BlobStore>,
        workspace: Workspace,
        services: Arc<BTreeMap<String, ServiceSettings>>,
    ) -> Self {
        RunScript { blobs, workspace, services }
    }
}

#[async_trait]
impl Operation for RunScript {
    fn name(&self) -> &'static str {
        RUN_SCRIPT
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Err("run_script jobs are made by uploading their files: POST /uploads".into())
    }

    async fn execute(&self, ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        let job = ctx.job().cloned().ok_or_else(|| OperationError::new(SANDBOX_ERROR, "a run_script needs its job"))?;
        let service = job.service.clone().unwrap_or_default();
        let settings = self.services.get(&service).ok_or_else(|| {
            OperationError::new("UnknownService", format!("service {service:?} is not configured on this worker"))
        })?;
        let place = Place { blobs: self.blobs.clone(), run: self.workspace.run_dir(job.id, job.attempts) };
        let ran = run(&job, &place, &Limits::from(settings), &ctx.cancel_token()).await?;
        let level = if ran.finished.exit == Exit::Code(0) { EventLevel::Info } else { EventLevel::Warning };
        if let Err(err) = ctx.emit("script.exited", None, ran.fields(), level).await {
            tracing::warn!(job_id = %job.id, error = %err, "script.exited not recorded");
        }
        ran.outcome
    }
}

/// Where a run reads its upload and puts its archive, and where it works.
#[derive(Debug, Clone)]
pub struct Place {
    /// The upload, and the archive once made.
    pub blobs: Arc<dyn BlobStore>,
    /// This run's directory: `work/` (the script's working directory) and its logs.
    pub run: PathBuf,
}

/// A finished run: how it ended, what its archive holds, and the job's outcome.
pub struct Ran {
    pub finished: Finished,
    pub packed: Packed,
    pub outcome: Result<Value, OperationError>,
}

impl Ran {
    /// The `script.exited` event's fields.
    pub fn fields(&self) -> Value {
        json!({
            "exit": exit_fields(self.finished.exit),
            "stdout_bytes": self.finished.stdout_bytes,
            "stderr_bytes": self.finished.stderr_bytes,
            "files": self.packed.files.len(),
            "zip_bytes": self.packed.zip_bytes,
        })
    }
}

/// Runs `job`'s `run.sh`: a fresh working directory from the upload (earlier runs' are
/// removed: the archive holds the last run's outputs only), the sandbox, the archive. The
/// same for a script host in this process and one on another host (its own copy of the
/// upload, fetched over HTTP).
pub async fn run(job: &Job, place: &Place, limits: &Limits, cancel: &CancellationToken) -> Result<Ran, OperationError> {
    let work = place.run.join("work");
    let (runs, ready) = (place.run.parent().map(Path::to_path_buf), work.clone());
    blocking(move || {
        if let Some(runs) = runs.filter(|runs| runs.exists()) {
            for entry in std::fs::read_dir(&runs)? {
                std::fs::remove_dir_all(entry?.path())?;
            }
        }
        std::fs::create_dir_all(&ready)
    })
    .await?;
    let manifest = {
        let (blobs, id, work) = (place.blobs.clone(), job.id, work.clone());
        blocking(move || archive::prepare(&*blobs, id, &work)).await?
    };
    let env = [
        ("YARDMASTER_JOB_ID".to_owned(), job.id.to_string()),
        ("YARDMASTER_ATTEMPT".to_owned(), job.attempts.to_string()),
        ("YARDMASTER_SERVICE".to_owned(), job.service.clone().unwrap_or_default()),
    ];
    let logs = place.run.clone();
    let finished = sandbox::run(&work, &logs, &env, limits, cancel)
        .await
        .map_err(|err| OperationError::new(SANDBOX_ERROR, format!("run.sh could not be started: {err}")))?;
    let packed = {
        let (blobs, id, work, logs) = (place.blobs.clone(), job.id, work.clone(), logs.clone());
        let zip = logs.join(super::files::RESULT_ZIP);
        blocking(move || {
            let packed = archive::pack(&work, &logs, &manifest, &zip)?;
            blobs.put_result(id, &zip)?;
            Ok(packed)
        })
        .await?
    };
    let outcome = outcome(&finished, &packed, limits, &logs);
    Ok(Ran { finished, packed, outcome })
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, OperationError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(OperationError::new(SANDBOX_ERROR, format!("the job's files: {err}"))),
        Err(err) => Err(OperationError::new(SANDBOX_ERROR, format!("the job's files: {err}"))),
    }
}

fn exit_fields(exit: Exit) -> Value {
    match exit {
        Exit::Code(code) => json!({ "code": code }),
        Exit::Signal(signal) => json!({ "signal": signal_name(signal) }),
        Exit::TimedOut => json!({ "timed_out": true }),
        Exit::Stopped => json!({ "stopped": true }),
    }
}

/// The job's result, or its failure in words.
fn outcome(finished: &Finished, packed: &Packed, limits: &Limits, logs: &Path) -> Result<Value, OperationError> {
    let tail = stderr_tail(&logs.join("stderr"));
    let failed = |class: &str, message: String| Err(OperationError::new(class, message));
    match finished.exit {
        Exit::Code(0) => Ok(json!({
            "exit_code": 0,
            "files": packed.files,
            "skipped": packed.skipped,
            "zip_bytes": packed.zip_bytes,
            "stdout_bytes": finished.stdout_bytes,
            "stderr_bytes": finished.stderr_bytes,
        })),
        // bash reports a command killed by a signal as 128 + the signal.
        Exit::Code(code) if code == 128 + libc::SIGXFSZ => failed(
            FILE_SIZE_LIMIT,
            format!(
                "a command of run.sh was killed by {}: a file it wrote reached the limit of {} bytes; stderr ends: {tail}",
                signal_name(libc::SIGXFSZ),
                limits.file_size_bytes
            ),
        ),
        Exit::Code(code) if code == 128 + libc::SIGXCPU => failed(
            CPU_LIMIT,
            format!(
                "a command of run.sh was killed by {}: it used the {} s of CPU allowed; stderr ends: {tail}",
                signal_name(libc::SIGXCPU),
                limits.cpu_seconds
            ),
        ),
        Exit::Code(code) if out_of_memory(&tail) => failed(
            MEMORY_LIMIT,
            format!(
                "run.sh exited with code {code} after running out of memory (limit {} bytes); stderr ends: {tail}",
                limits.memory_bytes
            ),
        ),
        Exit::Code(code) => failed(SCRIPT_FAILED, format!("run.sh exited with code {code}; stderr ends: {tail}")),
        Exit::Signal(signal) if signal == libc::SIGXFSZ => failed(
            FILE_SIZE_LIMIT,
            format!(
                "run.sh was killed by {}: a file it wrote reached the limit of {} bytes",
                signal_name(signal),
                limits.file_size_bytes
            ),
        ),
        Exit::Signal(signal) if signal == libc::SIGXCPU => failed(
            CPU_LIMIT,
            format!("run.sh was killed by {}: it used its {} s of CPU", signal_name(signal), limits.cpu_seconds),
        ),
        Exit::Signal(signal) => {
            failed(SCRIPT_KILLED, format!("run.sh was killed by {}; stderr ends: {tail}", signal_name(signal)))
        }
        Exit::TimedOut => failed(
            SCRIPT_TIMEOUT,
            format!("run.sh ran past its limit of {} s; its processes were killed", limits.timeout_seconds),
        ),
        Exit::Stopped => failed("Cancelled", "the run was stopped; its processes were killed".into()),
    }
}

/// Whether stderr says the script ran out of memory (bash, Python, C++, Go, Node).
fn out_of_memory(tail: &str) -> bool {
    let tail = tail.to_ascii_lowercase();
    ["cannot allocate memory", "xmalloc", "memoryerror", "bad_alloc", "out of memory", "allocation failed"]
        .iter()
        .any(|needle| tail.contains(needle))
}

/// The last bytes of a log, as text.
fn stderr_tail(path: &Path) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(STDERR_TAIL)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).replace('\0', "\u{fffd}");
    match text.trim() {
        "" => "(nothing)".into(),
        trimmed => trimmed.to_owned(),
    }
}
