//! `DispatchSweeper`: every `interval`, sends QUEUED jobs that were never confirmed by the
//! transport, or whose RetryLater delay is over. Moves no job between states; it only
//! (re)publishes, and a duplicate is harmless because claims are compare-and-set.

use std::time::Duration;

use actix::prelude::*;
use tracing::warn;

use crate::dispatch::DispatchSettings;
use crate::dispatch::Dispatcher;

pub struct DispatchSweeper {
    dispatcher: Dispatcher,
    interval: Duration,
    grace: Duration,
    batch: u64,
    /// A sweep is under way; a tick that finds one skips.
    busy: bool,
}

impl DispatchSweeper {
    pub fn new(dispatcher: Dispatcher, settings: &DispatchSettings) -> Self {
        DispatchSweeper {
            dispatcher,
            interval: Duration::from_millis(settings.interval_ms),
            grace: Duration::from_millis(settings.grace_ms),
            batch: settings.batch.max(1),
            busy: false,
        }
    }
}

impl Actor for DispatchSweeper {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.interval, |_, ctx| ctx.notify(Tick));
    }
}

impl Supervised for DispatchSweeper {}

/// Runs one sweep now; answers how many jobs were sent (0 when a sweep was already running).
#[derive(Message)]
#[rtype(result = "u64")]
pub struct Tick;

impl Handler<Tick> for DispatchSweeper {
    type Result = ResponseActFuture<Self, u64>;

    fn handle(&mut self, _: Tick, _ctx: &mut Self::Context) -> Self::Result {
        if self.busy {
            return Box::pin(fut::ready(0));
        }
        self.busy = true;
        let (dispatcher, grace, batch) = (self.dispatcher.clone(), self.grace, self.batch);
        let sweep = async move { dispatcher.sweep_once(grace, batch).await };
        Box::pin(sweep.into_actor(self).map(|result, actor, _| {
            actor.busy = false;
            result.unwrap_or_else(|err| {
                warn!(error = %err, "dispatch sweep failed");
                0
            })
        }))
    }
}
