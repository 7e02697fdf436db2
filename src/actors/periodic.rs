//! The shell of every background pass (the reaper, the dispatch sweep, the remote sweep, the
//! cleaner): a pass every interval, a tick skipped while the previous pass still runs, and
//! [`RunNow`], which runs one at once and answers what it did.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use actix::prelude::*;
use tracing::warn;

/// One pass of a background actor, and how often it runs.
pub trait Pass: Unpin + 'static {
    /// What a pass answers (its counts): the default when it was skipped or failed.
    type Output: Default + 'static;

    /// The pass's name in the log (`"reaper"` logs "reaper pass failed").
    const NAME: &'static str;

    fn interval(&self) -> Duration;

    /// One pass, owning what it needs.
    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<Self::Output>>>>;
}

/// The supervised actor that runs a [`Pass`] every interval.
pub struct Periodic<P: Pass> {
    pass: P,
    /// A pass is under way; a tick that finds one skips.
    busy: bool,
}

impl<P: Pass> Periodic<P> {
    pub fn new(pass: P) -> Self {
        Periodic { pass, busy: false }
    }
}

impl<P: Pass> Actor for Periodic<P> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let interval = self.pass.interval().max(Duration::from_millis(1));
        ctx.run_interval(interval, |_, ctx| ctx.notify(RunNow::default()));
    }
}

impl<P: Pass> Supervised for Periodic<P> {}

/// Runs one pass now (the interval sends it too); answers what it did, or the default when
/// a pass was already running.
pub struct RunNow<P>(PhantomData<fn() -> P>);

impl<P> Default for RunNow<P> {
    fn default() -> Self {
        RunNow(PhantomData)
    }
}

impl<P: Pass> Message for RunNow<P> {
    type Result = P::Output;
}

impl<P: Pass> Handler<RunNow<P>> for Periodic<P> {
    type Result = ResponseActFuture<Self, P::Output>;

    fn handle(&mut self, _: RunNow<P>, _ctx: &mut Self::Context) -> Self::Result {
        if self.busy {
            return Box::pin(fut::ready(P::Output::default()));
        }
        self.busy = true;
        Box::pin(self.pass.run().into_actor(self).map(|result, actor, _| {
            actor.busy = false;
            result.unwrap_or_else(|err| {
                warn!(error = %err, "{} pass failed", P::NAME);
                P::Output::default()
            })
        }))
    }
}
