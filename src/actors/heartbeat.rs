//! `Heartbeat`: one per in-flight job that outlives one interval (the consumer starts it when
//! the first renewal is due, so a short job never pays for one). It renews the run's lease
//! at once, then every interval, each in its own short statement. When the renewal finds the run no longer current (cancelled, finished,
//! reaped) it fires the run's cancellation token, so a cooperative operation stops, and
//! stops itself. If the heartbeat dies the lease simply expires and the reaper takes over.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument as _};

use crate::domain::Job;
use crate::store::{RunRef, RunWrites};
use crate::worker::{Executor, HandleOutcome};

pub struct Heartbeat {
    run: RunRef,
    store: Arc<dyn RunWrites>,
    lease: Duration,
    interval: Duration,
    cancel: CancellationToken,
    /// A renewal is under way; a tick that finds one skips.
    busy: bool,
}

impl Heartbeat {
    pub fn new(
        run: RunRef,
        store: Arc<dyn RunWrites>,
        lease: Duration,
        interval: Duration,
        cancel: CancellationToken,
    ) -> Self {
        Heartbeat { run, store, lease, interval, cancel, busy: false }
    }

    fn beat(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        self.busy = true;
        let (store, run, lease) = (self.store.clone(), self.run, self.lease);
        let renew = async move { store.extend_lease(run, lease).await };
        ctx.spawn(renew.into_actor(self).map(|renewed, actor, ctx| {
            actor.busy = false;
            match renewed {
                Ok(true) => {}
                Ok(false) => {
                    info!(job_id = %actor.run.id, "run no longer current; signalling the operation to stop");
                    actor.cancel.cancel();
                    ctx.stop();
                }
                Err(err) => warn!(job_id = %actor.run.id, error = %err, "lease not renewed; will retry"),
            }
        }));
    }
}

impl Actor for Heartbeat {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.beat(ctx);
        ctx.run_interval(self.interval, |actor, ctx| actor.beat(ctx));
    }
}

/// The run ended: stop renewing.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopHeartbeat;

impl Handler<StopHeartbeat> for Heartbeat {
    type Result = ();

    fn handle(&mut self, _: StopHeartbeat, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Runs a claimed job with the executor, renewing its lease with a [`Heartbeat`] once the
/// first renewal is due (a short job never has one), and stopping it however the run ends.
/// `returned` hears when the operation is done, as its outcome starts on its way.
pub async fn run_with_heartbeat(
    executor: &Executor,
    store: Arc<dyn RunWrites>,
    interval: Duration,
    job: Box<Job>,
    cancel: CancellationToken,
    returned: Option<oneshot::Sender<()>>,
) -> HandleOutcome {
    let run = RunRef::from(&*job);
    // Every line logged while the job runs, its operation's included, names the run.
    let span = tracing::info_span!("job", id = %job.id, attempt = job.attempts, operation = %job.operation);
    let running = executor.run(job, cancel.clone(), returned).instrument(span);
    tokio::pin!(running);
    let heartbeat = tokio::select! {
        biased;
        outcome = &mut running => return outcome,
        () = tokio::time::sleep(interval) => {
            let lease = executor.config().lease;
            StopOnDrop(Heartbeat::new(run, store, lease, interval, cancel).start())
        }
    };
    let outcome = running.await;
    // Stops the heartbeat however the run ends, a panic included.
    drop(heartbeat);
    outcome
}

/// Sends [`StopHeartbeat`] when dropped.
struct StopOnDrop(Addr<Heartbeat>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.do_send(StopHeartbeat);
    }
}
