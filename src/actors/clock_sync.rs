//! `ClockSync`: every `interval`, measures the database's clock against this host's (see
//! [`crate::store::clock`]), so the times this process writes and compares follow the
//! database even as this host's clock drifts or jumps. Logs the offset when it changes by
//! more than a second.

use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;
use tracing::{info, warn};

use crate::store::clock;

/// Between measurements.
pub const CLOCK_SYNC_INTERVAL: Duration = Duration::from_secs(30);
/// An offset change worth a log line.
const NOTEWORTHY_MS: i64 = 1_000;

pub struct ClockSync {
    db: DatabaseConnection,
    interval: Duration,
    /// A measurement is under way; a tick that finds one skips.
    busy: bool,
}

impl ClockSync {
    pub fn new(db: DatabaseConnection, interval: Duration) -> Self {
        ClockSync { db, interval, busy: false }
    }
}

impl Actor for ClockSync {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.interval, |_, ctx| ctx.notify(SyncClock));
    }
}

impl Supervised for ClockSync {}

/// Measures now; answers the offset in milliseconds (the previous one when skipped or failed).
#[derive(Message)]
#[rtype(result = "i64")]
pub struct SyncClock;

impl Handler<SyncClock> for ClockSync {
    type Result = ResponseActFuture<Self, i64>;

    fn handle(&mut self, _: SyncClock, _ctx: &mut Self::Context) -> Self::Result {
        let previous = clock::offset_ms();
        if self.busy {
            return Box::pin(fut::ready(previous));
        }
        self.busy = true;
        let db = self.db.clone();
        let measure = async move { clock::sync(&db).await };
        Box::pin(measure.into_actor(self).map(move |result, actor, _| {
            actor.busy = false;
            match result {
                Ok(offset) => {
                    if (offset - previous).abs() > NOTEWORTHY_MS {
                        info!(offset_ms = offset, previous_ms = previous, "database clock offset changed");
                    }
                    offset
                }
                Err(err) => {
                    warn!(error = %err, "cannot read the database clock; keeping the last offset");
                    previous
                }
            }
        }))
    }
}
