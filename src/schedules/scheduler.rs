//! `Scheduler`, a [`Pass`] run by `Periodic` in every process that runs upkeep: finishes
//! ticks a dead scheduler left half done, decides the due ticks of the schedules read from
//! the index by next fire time, and sleeps until the next one (or `interval_ms`, or its
//! bell: a schedule made or changed here). Once a minute it removes ticks past
//! `scheduler.keep_ticks_days`.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt as _};
use tokio::sync::Notify;

use super::fire::Fired;
use super::service::Schedules;
use crate::actors::Pass;
use crate::store::clock;

/// How often a scheduler removes old ticks.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

pub struct Scheduler {
    schedules: Arc<Schedules>,
    /// When this scheduler last removed old ticks.
    pruned: Cell<Option<Instant>>,
}

impl Scheduler {
    pub fn new(schedules: Arc<Schedules>) -> Self {
        Scheduler { schedules, pruned: Cell::new(None) }
    }

    /// Whether this pass removes old ticks: the first, then one a minute.
    fn prunes(&self) -> bool {
        let due = self.pruned.get().is_none_or(|at| at.elapsed() >= PRUNE_EVERY);
        if due {
            self.pruned.set(Some(Instant::now()));
        }
        due
    }
}

/// What a pass did, and when the next tick is due.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ticked {
    pub fired: Fired,
    pub next_due: Option<Duration>,
}

impl Pass for Scheduler {
    type Output = Ticked;
    const NAME: &'static str = "scheduler";

    fn interval(&self) -> Duration {
        Duration::from_millis(self.schedules.settings.interval_ms)
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<Ticked>>>> {
        let (schedules, prunes) = (self.schedules.clone(), self.prunes());
        Box::pin(async move {
            let now = clock::now();
            if prunes {
                let kept = chrono::TimeDelta::days(schedules.settings.keep_ticks_days as i64);
                schedules.book.prune_ticks(now - kept).await?;
            }
            let mut fired = schedules.finish_stranded(now).await?;
            let due = schedules.book.due(now, schedules.settings.batch).await?;
            let full = due.len() as u64 >= schedules.settings.batch;
            let mut advanced = stream::iter(due)
                .map(|s| {
                    let schedules = schedules.clone();
                    async move { (s.id, schedules.advance(s, now).await) }
                })
                .buffer_unordered(schedules.settings.concurrency.max(1));
            while let Some((id, result)) = advanced.next().await {
                match result {
                    Ok(done) => fired.add(done),
                    Err(err) => {
                        tracing::warn!(schedule = %id, error = %err, "a schedule's tick is left for the next pass")
                    }
                }
            }
            let next_due = match full {
                true => Some(Duration::ZERO),
                false => schedules
                    .book
                    .next_due()
                    .await?
                    .map(|next| (next - clock::now()).to_std().unwrap_or(Duration::ZERO)),
            };
            Ok(Ticked { fired, next_due })
        })
    }

    fn due_in(pass: &Ticked) -> Option<Duration> {
        pass.next_due
    }

    fn bell(&self) -> Option<Arc<Notify>> {
        Some(self.schedules.bell.clone())
    }
}
