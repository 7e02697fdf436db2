//! `ScriptHost`: runs uploaded scripts in this process. Each of its slots claims the next
//! script job under the services' quotas ([`super::quota`]), runs it with the executor
//! (a heartbeat renews its lease; a cancel or the shutdown guard stops it, and its process
//! group dies with it) and claims again. A slot with nothing to claim waits for the write
//! that makes a job claimable or frees a quota slot (in this process through the store, in
//! another through PostgreSQL's NOTIFY), never polling the database.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::quota::{Quotas, Scope};
use crate::actors::{run_with_heartbeat, StopIntake};
use crate::domain::RUN_SCRIPT;
use crate::live::TaskWaiters;
use crate::store::{JobStore, RunRef};
use crate::worker::{Executor, InFlight};

/// Pause after a claim failed on the store.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What every slot shares.
#[derive(Clone)]
pub struct HostParts {
    pub executor: Arc<Executor>,
    pub store: Arc<dyn JobStore>,
    pub in_flight: Arc<InFlight>,
    pub claimers: Arc<TaskWaiters>,
    pub quotas: Arc<Quotas>,
    pub heartbeat: Duration,
}

pub struct ScriptHost {
    parts: HostParts,
    slots: usize,
    /// Cancelled by [`StopIntake`]: slots claim nothing more.
    stop: CancellationToken,
}

impl ScriptHost {
    pub fn new(parts: HostParts, slots: usize) -> Self {
        ScriptHost { parts, slots, stop: CancellationToken::new() }
    }
}

impl Actor for ScriptHost {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        info!(slots = self.slots, "script host started");
        for _ in 0..self.slots {
            let (parts, stop) = (self.parts.clone(), self.stop.clone());
            actix::spawn(async move { slot_loop(parts, stop).await });
        }
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.stop.cancel();
    }
}

impl Handler<StopIntake> for ScriptHost {
    type Result = ();

    fn handle(&mut self, _: StopIntake, _ctx: &mut Self::Context) {
        self.stop.cancel();
    }
}

/// One slot: claim, run, repeat; wait when there is nothing to claim.
async fn slot_loop(parts: HostParts, stop: CancellationToken) {
    let owner = parts.executor.config().owner.clone();
    let lease = parts.executor.config().lease;
    loop {
        // Watching starts before the look, so a job queued between the two is not missed.
        let mut watch = parts.claimers.watch(RUN_SCRIPT.to_owned());
        // The in-flight slot is taken before the claim, so the shutdown guard sees it.
        let Some(mut slot) = parts.in_flight.enter() else { return };
        if stop.is_cancelled() {
            return;
        }
        match parts.quotas.claim(parts.store.as_ref(), &owner, lease, &Scope::default()).await {
            Ok(Some(job)) => {
                info!(job_id = %job.id, service = ?job.service, attempt = job.attempts, "script claimed");
                let cancel = CancellationToken::new();
                slot.bind(RunRef::from(&job), cancel.clone());
                run_with_heartbeat(&parts.executor, parts.store.clone(), parts.heartbeat, Box::new(job), cancel, None)
                    .await;
                continue;
            }
            Ok(None) => drop(slot),
            Err(err) => {
                drop(slot);
                warn!(error = %err, "script claim failed; trying again");
                tokio::select! {
                    () = tokio::time::sleep(RETRY_PAUSE) => {}
                    () = stop.cancelled() => return,
                }
                continue;
            }
        }
        tokio::select! {
            () = watch.changed() => {}
            () = stop.cancelled() => return,
        }
    }
}
