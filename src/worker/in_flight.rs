//! The runs this process is executing, for the shutdown guard (what to wait for, and what
//! to requeue when the grace period runs out) and for a cancel (which run to stop). A delivery takes a slot *before* it claims, so
//! no claim can slip past the guard; closing refuses new slots.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store::RunRef;

#[derive(Default)]
struct State {
    /// Set when shutdown begins: no new slots.
    closed: bool,
    /// Slots taken whose claim is still under way.
    claiming: usize,
    /// Runs executing, by job and attempt (a job may be claimed again while an older run
    /// of it still winds down), each with the token that tells its operation to stop.
    runs: HashMap<RunRef, CancellationToken>,
}

#[derive(Default)]
pub struct InFlight {
    state: Mutex<State>,
    /// Woken whenever a slot is released.
    released: Notify,
}

impl InFlight {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A slot for one delivery, or `None` once shutdown began.
    pub fn enter(self: &Arc<Self>) -> Option<Slot> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        state.claiming += 1;
        Some(Slot { in_flight: self.clone(), run: None })
    }

    pub fn close(&self) {
        self.lock().closed = true;
    }

    pub fn snapshot(&self) -> Vec<RunRef> {
        self.lock().runs.keys().copied().collect()
    }

    /// Tells `run`'s operation to stop (it was re-queued for another worker).
    pub fn stop(&self, run: RunRef) {
        if let Some(cancel) = self.lock().runs.get(&run) {
            cancel.cancel();
        }
    }

    /// Tells every run of job `id` here to stop (the job was cancelled).
    pub fn stop_job(&self, id: Uuid) {
        for (run, cancel) in &self.lock().runs {
            if run.id == id {
                cancel.cancel();
            }
        }
    }

    /// Waits until no claim is under way and no run is executing.
    pub async fn drained(&self) {
        loop {
            let released = self.released.notified();
            {
                let state = self.lock();
                if state.claiming == 0 && state.runs.is_empty() {
                    return;
                }
            }
            released.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One delivery's place in [`InFlight`], released when dropped.
pub struct Slot {
    in_flight: Arc<InFlight>,
    run: Option<RunRef>,
}

impl Slot {
    /// The claim succeeded: the slot now stands for `run`, stopped through `cancel`.
    pub fn bind(&mut self, run: RunRef, cancel: CancellationToken) {
        let mut state = self.in_flight.lock();
        state.claiming -= 1;
        state.runs.insert(run, cancel);
        self.run = Some(run);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut state = self.in_flight.lock();
            match self.run {
                Some(run) => {
                    state.runs.remove(&run);
                }
                None => state.claiming -= 1,
            }
        }
        self.in_flight.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn drained_waits_for_claims_and_runs() {
        let in_flight = InFlight::new();
        let mut slot = in_flight.enter().unwrap();
        let waiter = {
            let in_flight = in_flight.clone();
            actix_rt::spawn(async move { in_flight.drained().await })
        };
        slot.bind(RunRef { id: Uuid::now_v7(), attempt: 1 }, CancellationToken::new());
        assert_eq!(in_flight.snapshot().len(), 1);
        drop(slot);
        waiter.await.unwrap();
        assert!(in_flight.snapshot().is_empty());
    }

    #[test]
    fn an_old_run_does_not_erase_a_newer_one() {
        let in_flight = InFlight::new();
        let id = Uuid::now_v7();
        let mut old = in_flight.enter().unwrap();
        old.bind(RunRef { id, attempt: 1 }, CancellationToken::new());
        let mut new = in_flight.enter().unwrap();
        new.bind(RunRef { id, attempt: 2 }, CancellationToken::new());
        drop(old);
        assert_eq!(in_flight.snapshot(), [RunRef { id, attempt: 2 }]);
        drop(new);
    }

    #[test]
    fn stopping_a_job_stops_its_runs_only() {
        let in_flight = InFlight::new();
        let (id, other) = (Uuid::now_v7(), Uuid::now_v7());
        let tokens = [CancellationToken::new(), CancellationToken::new()];
        let mut slots = [in_flight.enter().unwrap(), in_flight.enter().unwrap()];
        slots[0].bind(RunRef { id, attempt: 1 }, tokens[0].clone());
        slots[1].bind(RunRef { id: other, attempt: 1 }, tokens[1].clone());
        in_flight.stop_job(id);
        assert!(tokens[0].is_cancelled());
        assert!(!tokens[1].is_cancelled());
    }

    #[test]
    fn closing_refuses_new_slots() {
        let in_flight = InFlight::new();
        in_flight.close();
        assert!(in_flight.enter().is_none());
    }
}
