//! Who waits for what: one `Notify` per key (a job, a registered type) that has waiters,
//! shared by all of them and dropped with the last, so thousands of waiters cost a map entry
//! and a future each.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::domain::Job;
use crate::telemetry::metrics::Held;

/// Waiters by key.
pub struct Waiters<K> {
    jobs: Mutex<HashMap<K, Weak<Notify>>>,
    /// Entries when the map was last swept of keys nobody waits for any more.
    swept_at: Mutex<usize>,
}

/// Waiters by job: long-polls and event streams.
pub type JobWaiters = Waiters<Uuid>;

/// The key every job change also wakes: streams of a whole room watch it.
pub const ANY_JOB: Uuid = Uuid::nil();

/// Waiters by registered type (its full name): claimers holding `POST /tasks/claim`.
pub type TaskWaiters = Waiters<String>;

impl<K> Default for Waiters<K> {
    fn default() -> Self {
        Waiters { jobs: Mutex::default(), swept_at: Mutex::default() }
    }
}

/// One waiter's hold on a job: create it before reading the job, then await
/// [`Watch::changed`]: a change committed after the read is never missed.
pub struct Watch {
    notify: Arc<Notify>,
    /// Registered with the `Notify` from the start; it stays ready once woken, however
    /// often it is polled.
    pending: Pin<Box<OwnedNotified>>,
    /// Counted in `yardmaster_watches_held` while it lives.
    _held: Held,
}

impl<K: Eq + Hash> Waiters<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Waiters::default())
    }

    /// Starts watching `id`: changes from now on wake [`Watch::changed`].
    pub fn watch(&self, id: K) -> Watch {
        let notify = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let notify = jobs.get(&id).and_then(Weak::upgrade).unwrap_or_else(|| {
                let notify = Arc::new(Notify::new());
                jobs.insert(id, Arc::downgrade(&notify));
                notify
            });
            self.sweep(&mut jobs);
            notify
        };
        Watch { pending: armed(&notify), notify, _held: crate::telemetry::metrics::watch_held() }
    }

    /// Wakes every waiter of `id`.
    pub fn wake<Q>(&self, id: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(notify) = jobs.get(id).and_then(Weak::upgrade) {
            notify.notify_waiters();
        }
    }

    /// Wakes every waiter of every job: news may have been missed (the listener lost its
    /// connection), so each re-reads.
    pub fn wake_all(&self) {
        let jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for notify in jobs.values().filter_map(Weak::upgrade) {
            notify.notify_waiters();
        }
    }

    /// Jobs with a waiter now.
    pub fn watched(&self) -> usize {
        let jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        jobs.values().filter(|notify| notify.strong_count() > 0).count()
    }

    /// Drops the entries of jobs nobody waits for, whenever the map has doubled since the
    /// last sweep: amortised constant time per watch.
    fn sweep(&self, jobs: &mut HashMap<K, Weak<Notify>>) {
        let mut swept_at = self.swept_at.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if jobs.len() > (*swept_at * 2).max(64) {
            jobs.retain(|_, notify| notify.strong_count() > 0);
            *swept_at = jobs.len();
        }
    }
}

/// A wait on `notify` registered now, so a wake before its first poll is kept. A wake from
/// another thread may already have come: the future is then ready, and stays so.
fn armed(notify: &Arc<Notify>) -> Pin<Box<OwnedNotified>> {
    let mut pending = Box::pin(notify.clone().notified_owned());
    pending.as_mut().enable();
    pending
}

impl JobWaiters {
    /// The long-poll of `Prefer: wait`: reads job `id` with `read`; then, at each of its
    /// changes, asks `ended` (its status alone: a coordinator's row holds megabytes of inputs,
    /// and each of its batches changes it) until it has ended, `wait` has passed or `closing`
    /// fires, and answers a last `read`. Watching starts before the first read, so an ending
    /// between the two is not missed, and waiting holds no database connection.
    pub async fn read_until_ended<E, F, Fut, G, Gut>(
        &self,
        id: Uuid,
        wait: Duration,
        closing: &tokio_util::sync::CancellationToken,
        mut read: F,
        mut ended: G,
    ) -> Result<Job, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Job, E>>,
        G: FnMut() -> Gut,
        Gut: Future<Output = Result<bool, E>>,
    {
        let mut watch = self.watch(id);
        let deadline = tokio::time::Instant::now() + wait;
        let job = read().await?;
        if job.status.is_terminal() {
            return Ok(job);
        }
        loop {
            tokio::select! {
                () = watch.changed() => if ended().await? { break },
                () = tokio::time::sleep_until(deadline) => break,
                () = closing.cancelled() => break,
            }
        }
        read().await
    }
}

impl Watch {
    /// Resolves at the first change since the watch began or since the last `changed`, and
    /// re-arms for the next.
    pub async fn changed(&mut self) {
        (&mut self.pending).await;
        self.pending = armed(&self.notify);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_wake_between_watch_and_wait_is_kept_and_others_are_not_woken() {
        let waiters = JobWaiters::new();
        let (job, other) = (Uuid::now_v7(), Uuid::now_v7());
        let mut watch = waiters.watch(job);
        let mut bystander = waiters.watch(other);
        waiters.wake(&job);
        tokio::time::timeout(Duration::from_secs(1), watch.changed()).await.expect("the early wake was lost");
        let idle = tokio::time::timeout(Duration::from_millis(50), bystander.changed()).await;
        assert!(idle.is_err(), "a wake for one job woke another's waiter");
        // Re-armed: the next wake is seen too, and only once.
        waiters.wake(&job);
        tokio::time::timeout(Duration::from_secs(1), watch.changed()).await.expect("the second wake was lost");
        assert!(tokio::time::timeout(Duration::from_millis(50), watch.changed()).await.is_err());
    }

    /// Wakes from another thread land at every instant of a watch's arming, also while its
    /// registration runs: a watch armed already woken answers at once, and again after it
    /// re-arms, never a future resumed after it completed.
    #[tokio::test]
    async fn a_wake_from_another_thread_while_arming_is_kept() {
        let waiters = JobWaiters::new();
        let job = Uuid::now_v7();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waker = std::thread::spawn({
            let (waiters, stop) = (waiters.clone(), stop.clone());
            move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    waiters.wake(&job);
                }
            }
        });
        for _ in 0..20_000 {
            let mut watch = waiters.watch(job);
            for _ in 0..2 {
                tokio::time::timeout(Duration::from_secs(5), watch.changed()).await.expect("a wake was lost");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        waker.join().unwrap();
    }

    #[test]
    fn jobs_nobody_waits_for_are_swept() {
        let waiters = JobWaiters::new();
        for _ in 0..1000 {
            drop(waiters.watch(Uuid::now_v7()));
        }
        let held = waiters.watch(Uuid::now_v7());
        assert!(waiters.jobs.lock().unwrap().len() < 200, "entries of gone waiters pile up");
        assert_eq!(waiters.watched(), 1);
        drop(held);
    }
}
