//! Live updates: the one path that wakes whatever waits for a job (a long-poll, an event
//! stream, and later a claimer or the CLI). The store's writers wake the waiters of the
//! jobs they changed: in process through [`NotifyingStore`], across processes through
//! PostgreSQL `LISTEN/NOTIFY` fed by a trigger on `job_event` ([`listen`]). A waiter holds
//! no database connection and polls nothing: it re-reads once when woken.

mod postgres;
mod store;
mod waiters;

pub use postgres::{listen, CHANNEL, TASKS_CHANNEL};
pub use store::NotifyingStore;
pub use waiters::{JobWaiters, TaskWaiters, Waiters, Watch, ANY_JOB};
