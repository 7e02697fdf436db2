//! The cross-process half of the notification path, on PostgreSQL: a statement trigger on
//! `job_event` (migration 9) sends the ids of the jobs a transaction wrote events for on
//! [`CHANNEL`] when it commits, whichever process wrote them, and a row trigger on `job`
//! (migration 10) sends a registered type's name on [`TASKS_CHANNEL`] when one of its jobs
//! becomes claimable, and another (migration 13) a job's id on [`STOPS_CHANNEL`] when a
//! running job is cancelled, and one on `queue_state` (migration 19) a queue's name on
//! [`QUEUES_CHANNEL`] when it is paused or resumed; every API and worker process listens,
//! wakes its waiters of those jobs and claimers of those types, stops its runs of the
//! cancelled jobs, and reads the paused queues again. A lost
//! connection wakes every waiter (news may have been missed meanwhile) and the listener
//! reconnects.
//!
//! The listener runs on a thread of its own with its own runtime and connection, so it
//! outlives no runtime it depends on; it ends once nothing else holds the waiters.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tracing::{info, warn};
use uuid::Uuid;

use super::{JobWaiters, StopRuns, TaskWaiters};

/// The channel the trigger notifies: a comma-separated list of job ids per notification.
pub const CHANNEL: &str = "yardmaster_jobs";

/// The channel of claimable tasks: a registered type's full name per notification.
pub const TASKS_CHANNEL: &str = "yardmaster_tasks";

/// The channel of stopped runs: the id of a job cancelled while it ran.
pub const STOPS_CHANNEL: &str = "yardmaster_stops";

/// The channel of queue states: a queue's name when it was paused or resumed (migration 19).
pub const QUEUES_CHANNEL: &str = "yardmaster_queues";

/// Pause before listening again after the listener could not connect.
const PAUSE: Duration = Duration::from_secs(1);

/// Listens on [`CHANNEL`] for as long as the application lives, when `store_url` is a
/// PostgreSQL one; does nothing on SQLite (one process: the in-process path is the whole
/// path).
///
/// Returns once the listener listens (or after [`READY_WITHIN`], when the database is slow
/// to take it: it keeps trying), so a waiter that arrives after start-up cannot miss a
/// notification sent before anyone listened.
pub async fn listen(
    store_url: &str,
    waiters: Arc<JobWaiters>,
    tasks: Arc<TaskWaiters>,
    stop_runs: StopRuns,
    queues: Arc<Notify>,
) -> std::io::Result<()> {
    if !store_url.starts_with("postgres") {
        return Ok(());
    }
    let url = store_url.to_owned();
    let (ready, listening) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("yardmaster-listen".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(err) => return warn!(error = %err, "cannot start the listener's runtime"),
        };
        runtime.block_on(run(url, Relayed { waiters, tasks, stop_runs, queues }, ready));
    })?;
    if tokio::time::timeout(READY_WITHIN, listening).await.is_err() {
        warn!("the listener is not listening yet; waiters may miss changes until it is");
    }
    Ok(())
}

/// How long start-up waits for the listener to listen.
const READY_WITHIN: Duration = Duration::from_secs(5);

/// What the listener wakes or stops.
struct Relayed {
    waiters: Arc<JobWaiters>,
    tasks: Arc<TaskWaiters>,
    stop_runs: StopRuns,
    /// Rung when a queue was paused or resumed: its view is read again.
    queues: Arc<Notify>,
}

impl Relayed {
    /// News may have been missed: every waiter re-reads, and so does the queues' view.
    fn wake_all(&self) {
        self.waiters.wake_all();
        self.tasks.wake_all();
        self.queues.notify_one();
    }
}

async fn run(url: String, relayed: Relayed, ready: tokio::sync::oneshot::Sender<()>) {
    let mut ready = Some(ready);
    // This thread's handle is the last one once the application is gone.
    while Arc::strong_count(&relayed.waiters) > 1 {
        match PgListener::connect(&url).await {
            Ok(mut listener) => {
                match listener.listen_all([CHANNEL, TASKS_CHANNEL, STOPS_CHANNEL, QUEUES_CHANNEL]).await {
                    Ok(()) => {
                        info!(channel = CHANNEL, "listening for job changes of other processes");
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        relay(&mut listener, &relayed).await;
                    }
                    Err(err) => warn!(error = %err, "cannot listen for job changes; trying again"),
                }
            }
            Err(err) => warn!(error = %err, "cannot listen for job changes; trying again"),
        }
        relayed.wake_all();
        tokio::time::sleep(PAUSE).await;
    }
}

/// Wakes the waiters of every job notified and stops the runs of every job cancelled, until
/// the connection is lost or the application is gone (a cancel missed meanwhile reaches its
/// run at the run's next heartbeat). (No timeout around the read: it is not documented as safe to
/// cancel; a process that exits takes this thread with it.)
async fn relay(listener: &mut PgListener, relayed: &Relayed) {
    let Relayed { waiters, tasks, stop_runs, queues } = relayed;
    while Arc::strong_count(waiters) > 1 {
        match listener.try_recv().await {
            Ok(Some(notification)) if notification.channel() == TASKS_CHANNEL => tasks.wake(notification.payload()),
            Ok(Some(notification)) if notification.channel() == STOPS_CHANNEL => {
                if let Ok(id) = Uuid::try_parse(notification.payload()) {
                    stop_runs(id);
                }
            }
            Ok(Some(notification)) if notification.channel() == QUEUES_CHANNEL => queues.notify_one(),
            Ok(Some(notification)) => {
                for id in notification.payload().split(',').filter_map(|id| Uuid::try_parse(id).ok()) {
                    waiters.wake(&id);
                }
                waiters.wake(&super::ANY_JOB);
            }
            // The connection was lost and is being re-established: news may be missing.
            Ok(None) => relayed.wake_all(),
            Err(err) => {
                warn!(error = %err, "lost the listener's connection");
                return;
            }
        }
    }
}
