//! The runs this process is executing, for the shutdown guard: what to wait for, and what
//! to requeue when the grace period runs out. Closing it stops new claims.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use uuid::Uuid;

use crate::store::RunRef;

#[derive(Default)]
pub struct InFlight {
    runs: Mutex<HashMap<Uuid, RunRef>>,
    /// Set when shutdown begins: no new claims.
    closed: AtomicBool,
    /// Woken whenever a run ends.
    ended: Notify,
}

impl InFlight {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records a run until the returned guard is dropped.
    pub fn track(self: &Arc<Self>, run: RunRef) -> Tracked {
        self.lock().insert(run.id, run);
        Tracked { in_flight: self.clone(), id: run.id }
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn snapshot(&self) -> Vec<RunRef> {
        self.lock().values().copied().collect()
    }

    /// Waits until no run is in flight.
    pub async fn drained(&self) {
        loop {
            let ended = self.ended.notified();
            if self.lock().is_empty() {
                return;
            }
            ended.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, RunRef>> {
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes its run from [`InFlight`] when dropped.
pub struct Tracked {
    in_flight: Arc<InFlight>,
    id: Uuid,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.id);
        self.in_flight.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn drained_waits_for_the_last_run() {
        let in_flight = InFlight::new();
        let tracked = in_flight.track(RunRef { id: Uuid::now_v7(), attempt: 1 });
        assert_eq!(in_flight.snapshot().len(), 1);
        let waiter = {
            let in_flight = in_flight.clone();
            actix_rt::spawn(async move { in_flight.drained().await })
        };
        drop(tracked);
        waiter.await.unwrap();
        assert!(in_flight.snapshot().is_empty());
    }
}
