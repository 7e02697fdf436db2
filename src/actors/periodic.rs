//! The shell of every background pass (the reaper, the dispatch sweep, the remote sweep, the
//! cleaner): a pass every interval, a tick skipped while the previous pass still runs, an
//! earlier pass when the last one said when work falls due ([`Pass::due_in`]), and
//! [`RunNow`], which runs one at once and answers what it did.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::Notify;
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

    /// When the next work falls due, as a pass found it: a pass runs then, if that is
    /// sooner than the next tick. By default a pass runs on ticks only.
    fn due_in(_output: &Self::Output) -> Option<Duration> {
        None
    }

    /// Rung when new work may fall due before the next tick: a pass runs at once (or right
    /// after the one under way), to learn when. By default nothing rings.
    fn bell(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// The supervised actor that runs a [`Pass`] every interval.
pub struct Periodic<P: Pass> {
    pass: P,
    /// A pass is under way; a tick that finds one skips.
    busy: bool,
    /// The one early pass planned ([`Pass::due_in`]); a later plan replaces it.
    early: Option<SpawnHandle>,
    /// The bell rang during a pass: another runs when it ends.
    again: bool,
}

impl<P: Pass> Periodic<P> {
    pub fn new(pass: P) -> Self {
        Periodic { pass, busy: false, early: None, again: false }
    }

    /// Plans a pass `due_in` from now, in place of any planned before, unless the tick
    /// comes first.
    fn plan(&mut self, due_in: Option<Duration>, ctx: &mut Context<Self>) {
        if let Some(early) = self.early.take() {
            ctx.cancel_future(early);
        }
        if let Some(due_in) = due_in.filter(|due_in| *due_in < self.pass.interval()) {
            self.early = Some(ctx.run_later(due_in, |actor, ctx| {
                actor.early = None;
                ctx.notify(RunNow::default());
            }));
        }
    }
}

impl<P: Pass> Actor for Periodic<P> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let interval = self.pass.interval().max(Duration::from_millis(1));
        ctx.run_interval(interval, |_, ctx| ctx.notify(RunNow::default()));
        if let Some(bell) = self.pass.bell() {
            let me = ctx.address();
            ctx.spawn(
                async move {
                    loop {
                        bell.notified().await;
                        me.do_send(Rung);
                    }
                }
                .into_actor(self),
            );
        }
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

/// The pass's bell rang.
#[derive(Message)]
#[rtype(result = "()")]
struct Rung;

impl<P: Pass> Handler<Rung> for Periodic<P> {
    type Result = ();

    fn handle(&mut self, _: Rung, ctx: &mut Self::Context) {
        match self.busy {
            true => self.again = true,
            false => ctx.notify(RunNow::default()),
        }
    }
}

impl<P: Pass> Handler<RunNow<P>> for Periodic<P> {
    type Result = ResponseActFuture<Self, P::Output>;

    fn handle(&mut self, _: RunNow<P>, _ctx: &mut Self::Context) -> Self::Result {
        if self.busy {
            return Box::pin(fut::ready(P::Output::default()));
        }
        self.busy = true;
        Box::pin(self.pass.run().into_actor(self).map(|result, actor, ctx| {
            actor.busy = false;
            let output = result.unwrap_or_else(|err| {
                warn!(error = %err, "{} pass failed", P::NAME);
                P::Output::default()
            });
            actor.plan(P::due_in(&output), ctx);
            if std::mem::take(&mut actor.again) {
                ctx.notify(RunNow::default());
            }
            output
        }))
    }
}
