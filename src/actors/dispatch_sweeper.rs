//! `DispatchSweeper`, a [`Pass`] run by `Periodic`: every `interval`, sends QUEUED jobs that were never confirmed by the
//! transport, or whose RetryLater delay is over. Moves no job between states; it only
//! (re)publishes, and a duplicate is harmless because claims are compare-and-set.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::periodic::Pass;
use crate::dispatch::{DispatchSettings, Dispatcher};

pub struct DispatchSweeper {
    dispatcher: Dispatcher,
    interval: Duration,
    grace: Duration,
    batch: u64,
}

impl DispatchSweeper {
    pub fn new(dispatcher: Dispatcher, settings: &DispatchSettings) -> Self {
        DispatchSweeper {
            dispatcher,
            interval: Duration::from_millis(settings.interval_ms),
            grace: Duration::from_millis(settings.grace_ms),
            batch: settings.batch.max(1),
        }
    }
}

/// A sweep answers how many jobs it sent.
impl Pass for DispatchSweeper {
    type Output = u64;
    const NAME: &'static str = "dispatch sweep";

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<u64>>>> {
        let (dispatcher, grace, batch) = (self.dispatcher.clone(), self.grace, self.batch);
        Box::pin(async move { Ok(dispatcher.sweep_once(grace, batch).await?) })
    }
}
