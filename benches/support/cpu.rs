//! CPU time of every process a benchmark case involves, read from `/proc`: the bench process
//! itself (which hosts yardmaster in the in-process cases), yardmaster worker processes,
//! PostgreSQL's backends, the RabbitMQ node, the peer's node process and Python clients.
//!
//! A sampler thread rescans `/proc` every [`PERIOD`], so the CPU of a process that exits
//! inside the window (a PostgreSQL backend whose client disconnected) is kept as last seen;
//! the sampler's own CPU is taken off the bench process's figure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PERIOD: Duration = Duration::from_millis(100);

/// Who a process is, for the per-job table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// This process: yardmaster itself in the in-process cases, the publisher otherwise.
    Bench,
    Yardmaster,
    /// PostgreSQL backends: the connections' server processes.
    Postgres,
    /// PostgreSQL's own work: autovacuum, WAL writer, checkpointer, background writer.
    PostgresBackground,
    Broker,
    Peer,
    /// A Python client or worker process (the SDK's cases).
    Client,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Bench,
        Role::Yardmaster,
        Role::Postgres,
        Role::PostgresBackground,
        Role::Broker,
        Role::Peer,
        Role::Client,
    ];

    fn of(pid: u32, comm: &str) -> Option<Role> {
        if pid == std::process::id() {
            return Some(Role::Bench);
        }
        match comm {
            "yardmaster" => Some(Role::Yardmaster),
            "postgres" => Some(match std::fs::read_to_string(format!("/proc/{pid}/cmdline")) {
                // A backend's title names its user and database; the rest are PostgreSQL's own.
                Ok(title) if title.contains("127.0.0.1(") || title.contains("[local]") => Role::Postgres,
                _ => Role::PostgresBackground,
            }),
            "beam.smp" | "erl_child_setup" | "epmd" | "inet_gethost" => Some(Role::Broker),
            "node" => Some(Role::Peer),
            python if python.starts_with("python") => Some(Role::Client),
            _ => None,
        }
    }
}

/// Cumulative CPU seconds per process, as last seen.
type Seen = HashMap<u32, (Role, f64)>;

/// The background sampler; stops when dropped.
pub struct Sampler {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// CPU seconds the sampler thread has spent, updated by the thread itself.
    own: Arc<Mutex<f64>>,
}

/// A reading of every tracked process at one instant, to subtract from a later one.
#[derive(Clone)]
pub struct Snapshot {
    seen: Seen,
    own: f64,
}

/// CPU seconds per role over a window.
#[derive(Clone, Debug, Default)]
pub struct Usage(pub HashMap<Role, f64>);

impl Usage {
    pub fn get(&self, role: Role) -> f64 {
        self.0.get(&role).copied().unwrap_or(0.0)
    }

    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }
}

impl Sampler {
    pub fn start() -> Sampler {
        let (seen, stop, own) =
            (Arc::new(Mutex::new(scan())), Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(0.0)));
        let thread = {
            let (seen, stop, own) = (seen.clone(), stop.clone(), own.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(PERIOD);
                    let fresh = scan();
                    seen.lock().unwrap().extend(fresh);
                    *own.lock().unwrap() = thread_cpu();
                }
            })
        };
        Sampler { seen, stop, thread: Some(thread), own }
    }

    /// Every tracked process's CPU now (a fresh scan, merged over what exited earlier).
    pub fn snapshot(&self) -> Snapshot {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(scan());
        Snapshot { seen: seen.clone(), own: *self.own.lock().unwrap() }
    }

    /// CPU per role between `from` and now.
    pub fn since(&self, from: &Snapshot) -> Usage {
        let to = self.snapshot();
        let mut usage = HashMap::new();
        for (pid, (role, seconds)) in &to.seen {
            let before = from.seen.get(pid).filter(|(was, _)| was == role).map_or(0.0, |(_, seconds)| *seconds);
            *usage.entry(*role).or_insert(0.0) += (seconds - before).max(0.0);
        }
        if let Some(bench) = usage.get_mut(&Role::Bench) {
            *bench = (*bench - (to.own - from.own)).max(0.0);
        }
        Usage(usage)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// utime + stime of a `/proc/…/stat` line, seconds, and the command name.
fn parse_stat(stat: &str) -> Option<(String, f64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let comm = stat[open + 1..close].to_owned();
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    // After the command: state is field 3, utime 14 and stime 15 (1-based, man proc).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, (utime + stime) / ticks_per_second()))
}

fn scan() -> Seen {
    let mut seen = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return seen };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((comm, seconds)) = parse_stat(&stat) {
            if let Some(role) = Role::of(pid, &comm) {
                seen.insert(pid, (role, seconds));
            }
        }
    }
    seen
}

/// The calling thread's own CPU seconds.
fn thread_cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|stat| parse_stat(&stat)).map_or(0.0, |(_, s)| s)
}
