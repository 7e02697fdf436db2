//! `DispatchSweeper`, a [`Pass`] run by `Periodic`: every `interval`, sends QUEUED jobs
//! that were never confirmed by the transport, or whose time has come (a RetryLater or
//! retry delay over, a `run_at` reached); and between ticks, at the time the next waiting
//! job falls due, so that job starts on time. Moves no job between states; it only
//! (re)publishes, and a duplicate is harmless because claims are compare-and-set.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

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

/// What a sweep did, and when it must look again.
#[derive(Debug, Default, Clone, Copy)]
pub struct Swept {
    /// Jobs sent (confirmed by the transport).
    pub sent: u64,
    /// Until the next waiting job falls due, if one waits.
    pub next_due: Option<Duration>,
}

impl Pass for DispatchSweeper {
    type Output = Swept;
    const NAME: &'static str = "dispatch sweep";

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<Swept>>>> {
        let (dispatcher, grace, batch) = (self.dispatcher.clone(), self.grace, self.batch);
        Box::pin(async move {
            let sent = dispatcher.sweep_once(grace, batch).await?;
            // A full batch leaves more due at once: the next pass comes now.
            let next_due = match sent >= batch {
                true => Some(Duration::ZERO),
                false => dispatcher.next_due().await?,
            };
            Ok(Swept { sent, next_due })
        })
    }

    fn due_in(swept: &Swept) -> Option<Duration> {
        swept.next_due
    }

    fn bell(&self) -> Option<Arc<Notify>> {
        Some(self.dispatcher.waiting_bell())
    }
}
