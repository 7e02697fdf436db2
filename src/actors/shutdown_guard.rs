//! `ShutdownGuard`: owns SIGTERM and SIGINT. On the first signal it stops intake (consumers
//! drop their subscriptions, no new claims) and, side by side within `grace`, drains HTTP
//! (requests under way are answered; new connections are refused) and lets in-flight jobs
//! finish. Jobs still running then are re-queued (RUNNING → QUEUED, lease and start
//! cleared, message re-published) so another worker takes them, and their operations are
//! told to stop; a job whose requeue cannot commit is force-failed with `WorkerShutdown`.
//! Once both drains are over the process exits with 143. A second signal changes nothing:
//! one timer, one exit. It also feeds the systemd watchdog.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::dev::ServerHandle;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::oneshot;
use tracing::{error, info, warn};

use super::consumer::StopIntake;
use crate::dispatch::Dispatcher;
use crate::store::{Completion, Requeue, RunRef, RunWrites};
use crate::worker::InFlight;

/// Error class of a job force-failed because its worker stopped and could not requeue it.
pub const WORKER_SHUTDOWN: &str = "WorkerShutdown";
/// 128 + SIGTERM: what systemd and shells expect from a process stopped by SIGTERM.
pub const EXIT_CODE: i32 = 143;

pub struct ShutdownGuard {
    in_flight: Arc<InFlight>,
    store: Arc<dyn RunWrites>,
    dispatcher: Dispatcher,
    grace: Duration,
    consumers: Vec<Recipient<StopIntake>>,
    server: Option<ServerHandle>,
    /// Resolved with the exit code once shutdown is complete.
    done: Option<oneshot::Sender<i32>>,
    armed: bool,
    /// Registered first thing at start-up (see [`Signals`]), so no early signal meets the
    /// default disposition (which would kill the process without draining).
    signals: Vec<(Signal, &'static str)>,
    /// Cancelled when draining starts: what waits for clients ends.
    closing: tokio_util::sync::CancellationToken,
}

/// SIGTERM and SIGINT, caught from the moment this is made: made first thing at start-up,
/// before any consumer can claim a job, so no signal meets the default disposition (which
/// would kill the process mid-job without draining); one that arrives before the guard runs
/// waits for it.
pub struct Signals(Vec<(Signal, &'static str)>);

impl Signals {
    pub fn listen() -> Signals {
        let mut signals = Vec::new();
        for (kind, name) in [(SignalKind::terminate(), "SIGTERM"), (SignalKind::interrupt(), "SIGINT")] {
            match signal(kind) {
                Ok(stream) => signals.push((stream, name)),
                Err(err) => error!(signal = name, error = %err, "cannot listen for the signal"),
            }
        }
        Signals(signals)
    }
}

impl ShutdownGuard {
    #[allow(clippy::too_many_arguments)] // each is a part it drains, stops or signals
    pub fn new(
        in_flight: Arc<InFlight>,
        store: Arc<dyn RunWrites>,
        dispatcher: Dispatcher,
        grace: Duration,
        consumers: Vec<Recipient<StopIntake>>,
        server: Option<ServerHandle>,
        done: oneshot::Sender<i32>,
        signals: Signals,
    ) -> Self {
        let Signals(signals) = signals;
        ShutdownGuard {
            closing: tokio_util::sync::CancellationToken::new(),
            in_flight,
            store,
            dispatcher,
            grace,
            consumers,
            server,
            done: Some(done),
            armed: false,
            signals,
        }
    }

    fn listen_for_signals(&mut self, ctx: &mut Context<Self>) {
        for (mut stream, name) in self.signals.drain(..) {
            let addr = ctx.address();
            actix::spawn(async move {
                while stream.recv().await.is_some() {
                    addr.do_send(Stop { signal: name });
                }
            });
        }
    }
}

impl ShutdownGuard {
    /// The token it cancels when draining starts (the API's waiters listen to it).
    pub fn closing(mut self, closing: tokio_util::sync::CancellationToken) -> Self {
        self.closing = closing;
        self
    }
}

impl Actor for ShutdownGuard {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.listen_for_signals(ctx);
        if let Some(period) = sd_notify::watchdog_enabled() {
            ctx.run_interval(period / 2, |_, _| {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            });
        }
    }
}

/// Begin shutting down (what a signal sends).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop {
    pub signal: &'static str,
}

impl Handler<Stop> for ShutdownGuard {
    type Result = ();

    fn handle(&mut self, stop: Stop, ctx: &mut Self::Context) {
        if self.armed {
            info!(signal = stop.signal, "already shutting down");
            return;
        }
        self.armed = true;
        info!(
            signal = stop.signal,
            grace_seconds = self.grace.as_secs_f64(),
            "shutting down: intake stopped, draining"
        );
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        self.in_flight.close();
        // Long-polls, event streams and held claims answer now, so the HTTP drain does not
        // wait out the grace for clients that would wait forever.
        self.closing.cancel();
        for consumer in &self.consumers {
            consumer.do_send(StopIntake);
        }
        let server = self.server.clone();
        let (in_flight, store, dispatcher, grace) =
            (self.in_flight.clone(), self.store.clone(), self.dispatcher.clone(), self.grace);
        let drain = async move {
            // The server's own shutdown timeout is the same grace.
            let http = async {
                if let Some(server) = server {
                    server.stop(true).await;
                    info!("HTTP drained");
                }
            };
            tokio::join!(http, drain_or_requeue(&in_flight, store.as_ref(), &dispatcher, grace));
        };
        ctx.spawn(drain.into_actor(self).map(|_, actor, _| {
            if let Some(done) = actor.done.take() {
                let _ = done.send(EXIT_CODE);
            }
        }));
    }
}

/// How long re-queued runs get to stop after being told to, before the process exits with
/// whatever still runs (its writes are refused by then: the runs are no longer current).
const STOP_ABANDONED: Duration = Duration::from_secs(5);

/// Waits up to `grace` for in-flight runs; re-queues (else force-fails) what is left, tells
/// those runs to stop, and waits a little for them.
async fn drain_or_requeue(in_flight: &InFlight, store: &dyn RunWrites, dispatcher: &Dispatcher, grace: Duration) {
    if tokio::time::timeout(grace, in_flight.drained()).await.is_ok() {
        info!("in-flight jobs finished within the grace period");
        return;
    }
    let abandoned = in_flight.snapshot();
    for &run in &abandoned {
        requeue_abandoned(run, store, dispatcher).await;
        in_flight.stop(run);
    }
    if tokio::time::timeout(STOP_ABANDONED, in_flight.drained()).await.is_err() {
        let still = in_flight.snapshot().len();
        warn!(still_running = still, "some abandoned runs did not stop; exiting anyway");
    }
}

/// Re-queues one run the grace period ran out on, or force-fails it.
async fn requeue_abandoned(run: RunRef, store: &dyn RunWrites, dispatcher: &Dispatcher) {
    match store.requeue(run, &Requeue::Shutdown).await {
        Ok(Some(job)) => {
            info!(job_id = %run.id, "re-queued on shutdown");
            dispatcher.publish(&job).await;
        }
        Ok(None) => info!(job_id = %run.id, "finished while shutting down"),
        Err(err) => {
            warn!(job_id = %run.id, error = %err, "requeue failed; force-failing the job");
            let completion = Completion::Failed {
                error_code: WORKER_SHUTDOWN.into(),
                message: format!("the worker shut down and could not requeue the job: {err}"),
            };
            if let Err(err) = store.finish(run, &completion).await {
                error!(job_id = %run.id, error = %err, "force-fail failed; the lease will expire");
            }
        }
    }
}
