//! `RemoteSweeper`: every `interval`, marks remote workers silent past their deadline gone
//! and soft-deletes types that no live worker serves and no pending job needs (the reaper's
//! shape: an interval, a pass skipped while one runs, `run_once` returning counts). The
//! tasks of a gone worker are the reaper's: their leases lapse and it requeues or fails
//! them by the retry rules, as for any worker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::info;

use super::Remote;
use crate::actors::Pass;

/// Most workers marked per pass.
const BATCH: u64 = 500;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, MessageResponse)]
pub struct SweepCounts {
    pub workers_gone: u64,
    pub types_deleted: u64,
}

/// One pass.
pub async fn run_once(remote: &Remote) -> Result<SweepCounts, sea_orm::DbErr> {
    let gone = remote.workers.sweep_silent(BATCH).await?;
    for id in &gone {
        info!(worker_id = %id, "remote worker silent past its deadline: marked gone");
    }
    // A type is spared for one worker deadline after its registration, time for its
    // worker to register.
    let types_deleted = remote.types.sweep_orphans(remote.workers.ttl()).await?;
    let counts = SweepCounts { workers_gone: gone.len() as u64, types_deleted };
    if types_deleted > 0 {
        info!(?counts, "remote sweep");
    }
    Ok(counts)
}

pub struct RemoteSweeper {
    remote: Arc<Remote>,
    interval: Duration,
}

impl RemoteSweeper {
    pub fn new(remote: Arc<Remote>, interval: Duration) -> Self {
        RemoteSweeper { remote, interval }
    }
}

impl Pass for RemoteSweeper {
    type Output = SweepCounts;
    const NAME: &'static str = "remote sweep";

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<SweepCounts>>>> {
        let remote = self.remote.clone();
        Box::pin(async move { Ok(run_once(&remote).await?) })
    }
}
