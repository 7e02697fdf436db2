//! Live updates: the one path that wakes whatever waits for a job (a long-poll, an event
//! stream, a claimer, a script host). The store's commits wake the waiters of the jobs they
//! changed: in process through the [`Notifier`], an observer of the store; across processes through
//! PostgreSQL `LISTEN/NOTIFY` fed by a trigger on `job_event` ([`listen`]). A waiter holds
//! no database connection and polls nothing: it re-reads once when woken. A cancel also
//! stops the run it ends, in whichever process runs it ([`StopRuns`]).

mod notifier;
mod postgres;
mod waiters;

use std::sync::Arc;

use uuid::Uuid;

pub use notifier::Notifier;
pub use postgres::{listen, CHANNEL, QUEUES_CHANNEL, STOPS_CHANNEL, TASKS_CHANNEL};
pub use waiters::{JobWaiters, TaskWaiters, Waiters, Watch, ANY_JOB};

/// Stops this process's runs of a job (fires their cancellation tokens): called once a
/// cancel of a running job committed in this process, and when another process's cancel
/// is notified ([`STOPS_CHANNEL`]).
pub type StopRuns = Arc<dyn Fn(Uuid) + Send + Sync>;
