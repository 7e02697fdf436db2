//! Fault injection for crash tests: `YARDMASTER_FAILPOINT=NAME` makes the process kill itself
//! with SIGKILL when it reaches the named point, as a power cut or OOM kill would.
//!
//! Points: `submit.after_commit` (a job row is committed, its message not yet published);
//! `submit.after_publish` (a submission's messages confirmed, its outbox row not yet deleted).

use std::sync::OnceLock;

pub const ENV: &str = "YARDMASTER_FAILPOINT";

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED.get_or_init(|| std::env::var(ENV).ok().filter(|name| !name.is_empty())).as_deref()
}

/// Dies here, at once and without cleanup, if this point is armed.
pub fn hit(point: &str) {
    if armed() == Some(point) {
        tracing::error!(point, "failpoint reached; killing the process");
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
