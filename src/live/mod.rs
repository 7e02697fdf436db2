//! Live updates: the one path that wakes whatever waits for a job (a long-poll, an event
//! stream, and later a claimer or the CLI). The store's writers wake the waiters of the
//! jobs they changed: in process through [`NotifyingStore`], across processes through
//! PostgreSQL `LISTEN/NOTIFY` fed by a trigger on `job_event` ([`listen`]). A waiter holds
//! no database connection and polls nothing: it re-reads once when woken. A cancel also
//! stops the run it ends, in whichever process runs it ([`StopRuns`]).

mod postgres;
mod store;
mod waiters;

use std::sync::Arc;

use uuid::Uuid;

pub use postgres::{listen, CHANNEL, STOPS_CHANNEL, TASKS_CHANNEL};
pub use store::NotifyingStore;
pub use waiters::{JobWaiters, TaskWaiters, Waiters, Watch, ANY_JOB};

/// Stops this process's runs of a job (fires their cancellation tokens): called once a
/// cancel of a running job committed in this process, and when another process's cancel
/// is notified ([`STOPS_CHANNEL`]).
pub type StopRuns = Arc<dyn Fn(Uuid) + Send + Sync>;
