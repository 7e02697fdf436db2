//! Runs an uploaded `run.sh` in its own session and process group, with rlimits, a scrubbed
//! environment, stdin closed, and stdout and stderr captured to files up to a cap.
//!
//! However the run ends (the script exits, the timeout, a cancel, the worker shutting down)
//! the whole group is killed before the run is reported, so a background child (`sleep
//! 1000 &`) never outlives it; a process that left the group with `setsid` is found by the
//! marker in its environment and killed too. Groups still alive when the process exits are
//! killed by [`kill_all`].

use std::collections::HashSet;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::settings::ServiceSettings;

/// The script every upload carries, run by `bash` from the run's working directory.
pub const SCRIPT: &str = "run.sh";
/// The variable that marks every process of a run.
const MARKER: &str = "YARDMASTER_RUN";

/// What bounds one run: its service's limits, as a script host elsewhere gets them with
/// its claim.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Limits {
    /// Wall clock, seconds.
    pub timeout_seconds: u64,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    pub processes: u64,
    pub log_bytes: u64,
}

impl From<&ServiceSettings> for Limits {
    fn from(service: &ServiceSettings) -> Self {
        Limits {
            timeout_seconds: service.timeout_seconds,
            cpu_seconds: service.cpu_seconds,
            memory_bytes: service.memory_bytes,
            file_size_bytes: service.file_size_bytes,
            open_files: service.open_files,
            processes: service.processes,
            log_bytes: service.log_bytes,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `run.sh` exited with this code.
    Code(i32),
    /// `run.sh` was killed by this signal (not by us).
    Signal(i32),
    /// The wall-clock limit passed; the group was killed.
    TimedOut,
    /// The job was cancelled or its run taken away (shutdown); the group was killed.
    Stopped,
}

/// A finished run: how it ended and what its logs hold.
#[derive(Debug, Clone)]
pub struct Finished {
    pub exit: Exit,
    /// Bytes each stream wrote, kept or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// Runs `run.sh` in `work`, writing `stdout` and `stderr` files into `logs`.
pub async fn run(
    work: &Path,
    logs: &Path,
    env: &[(String, String)],
    limits: &Limits,
    cancel: &CancellationToken,
) -> io::Result<Finished> {
    let marker = format!("{}", uuid::Uuid::new_v4().simple());
    let mut command = std::process::Command::new("bash");
    command
        .arg("--noprofile")
        .arg("--norc")
        .arg(SCRIPT)
        .current_dir(work)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", work)
        .env("TMPDIR", work)
        .env("LANG", "C.UTF-8")
        .env(MARKER, &marker)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let rlimits = rlimits(limits);
    // SAFETY: between fork and exec only async-signal-safe calls: setsid and setrlimit.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            for &(resource, soft, hard) in &rlimits {
                let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = tokio::process::Command::from(command).kill_on_drop(true).spawn()?;
    let group = Group::register(child.id().map(|pid| pid as i32), marker);
    let stdout = capture(child.stdout.take(), logs.join("stdout"), limits.log_bytes);
    let stderr = capture(child.stderr.take(), logs.join("stderr"), limits.log_bytes);
    let stdout = tokio::spawn(stdout);
    let stderr = tokio::spawn(stderr);
    let exit = tokio::select! {
        status = child.wait() => exit_of(status?),
        () = tokio::time::sleep(Duration::from_secs(limits.timeout_seconds)) => Exit::TimedOut,
        () = cancel.cancelled() => Exit::Stopped,
    };
    // Whatever ended the run, nothing of it survives: children holding the pipes open
    // included, so the captures below end.
    drop(group);
    let _ = child.wait().await;
    let stdout_bytes = stdout.await.map_err(io::Error::other)??;
    let stderr_bytes = stderr.await.map_err(io::Error::other)??;
    Ok(Finished { exit, stdout_bytes, stderr_bytes })
}

fn exit_of(status: ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(-1),
    }
}

/// `(resource, soft, hard)` for each limit; the CPU's hard limit is a little above the soft
/// one, so the script first gets SIGXCPU and a moment to notice.
fn rlimits(limits: &Limits) -> [(libc::__rlimit_resource_t, libc::rlim_t, libc::rlim_t); 6] {
    let cpu = limits.cpu_seconds as libc::rlim_t;
    [
        (libc::RLIMIT_CPU, cpu, cpu.saturating_add(2)),
        (libc::RLIMIT_AS, limits.memory_bytes as libc::rlim_t, limits.memory_bytes as libc::rlim_t),
        (libc::RLIMIT_FSIZE, limits.file_size_bytes as libc::rlim_t, limits.file_size_bytes as libc::rlim_t),
        (libc::RLIMIT_NOFILE, limits.open_files as libc::rlim_t, limits.open_files as libc::rlim_t),
        (libc::RLIMIT_NPROC, limits.processes as libc::rlim_t, limits.processes as libc::rlim_t),
        (libc::RLIMIT_CORE, 0, 0),
    ]
}

/// Copies a stream into `path`, keeping the first `cap` bytes and counting the rest.
async fn capture(stream: Option<impl AsyncRead + Unpin>, path: std::path::PathBuf, cap: u64) -> io::Result<u64> {
    let mut file = tokio::fs::File::from_std(super::files::open_new(&path)?);
    let Some(mut stream) = stream else { return Ok(0) };
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        let kept = cap.saturating_sub(total).min(read as u64) as usize;
        if kept > 0 {
            file.write_all(&buffer[..kept]).await?;
        }
        total += read as u64;
    }
    file.flush().await?;
    Ok(total)
}

/// Process groups of runs under way, killed by [`kill_all`] when the process exits.
static LIVE: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// One run's process group: killed (and its marked escapees) when dropped.
struct Group {
    pgid: Option<i32>,
    marker: String,
}

impl Group {
    fn register(pgid: Option<i32>, marker: String) -> Self {
        if let Some(pgid) = pgid {
            live().get_or_insert_with(HashSet::new).insert(pgid);
        }
        Group { pgid, marker }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            // SAFETY: signals the group this run created (its leader's pid is its id).
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            if let Some(live) = live().as_mut() {
                live.remove(&pgid);
            }
        }
        kill_marked(&self.marker);
    }
}

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<i32>>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Kills every run's process group still alive: the last thing the process does.
pub fn kill_all() {
    for pgid in live().take().unwrap_or_default() {
        // SAFETY: as in `Group::drop`.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
}

/// Kills the processes whose environment carries `marker` (readable for this user's own
/// processes), however they left the run's group.
fn kill_marked(marker: &str) {
    let needle = format!("{MARKER}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|byte| *byte == 0).any(|pair| pair == needle.as_bytes()) {
            // SAFETY: a process of this run, by its marker.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A signal's name, for error messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    format!("{name} ({signal})")
}
