//! Settling the jobs that wait for jobs. [`DependencyWatch`], an observer of the store,
//! hears every committed ending of a job that others wait for and hands its id to the
//! [`Settler`], which has the waiting jobs settled (`DispatchBook::settle_dependents`: each
//! queues, is cancelled, or waits on) and sends those that queued. A cancelled one that
//! others wait for is an ending too, so a failure travels down the graph a level per
//! settling. Nothing polls to find a job's dependencies done: as a safety net for a process
//! that stopped between an ending's commit and its settling, every `recheck` settles the
//! waiting jobs whose dependencies let them move (`settle_stranded`).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{debug, warn};
use uuid::Uuid;

use super::Dispatcher;
use crate::store::{Change, Observer, Settled};

/// Hands the id of every ended job that others wait for to the settler.
pub struct DependencyWatch {
    ended: mpsc::UnboundedSender<Uuid>,
}

impl DependencyWatch {
    /// The watch, and what the settler reads.
    pub fn new() -> (DependencyWatch, Ended) {
        let (ended, receiver) = mpsc::unbounded_channel();
        (DependencyWatch { ended: ended.clone() }, Ended { receiver, again: ended })
    }
}

impl Observer for DependencyWatch {
    /// An ended job that others wait for; and the parent of every ended child, which the
    /// child's ending may have closed in the same commit (a coordinator's last child closes
    /// it unannounced): most have no dependents, found so by one read of the edges.
    fn committed(&self, changes: &[Change<'_>]) {
        for change in changes {
            if let Change::Moved { job, .. } = change {
                if !job.status.is_terminal() {
                    continue;
                }
                if job.has_dependents {
                    let _ = self.ended.send(job.id);
                }
                if let Some(parent) = job.parent_job_id {
                    let _ = self.ended.send(parent);
                }
            }
        }
    }
}

/// The ended jobs whose dependents are to be settled, as the watch sends them.
pub struct Ended {
    receiver: mpsc::UnboundedReceiver<Uuid>,
    /// For the settler's own returns (a settling that failed).
    again: mpsc::UnboundedSender<Uuid>,
}

/// Settles the jobs waiting for ended ones, and sends those that queued.
pub struct Settler {
    dispatcher: Dispatcher,
    recheck: Duration,
}

/// Ended jobs settled in one transaction at most; waiting jobs looked at per safety-net pass.
const SETTLE_BATCH: usize = 1_000;

impl Settler {
    pub fn new(dispatcher: Dispatcher, recheck: Duration) -> Self {
        Settler { dispatcher, recheck }
    }

    /// Runs for the life of the process: the safety net now and every `recheck`, and each
    /// ended job as the watch names it, those named meanwhile settled together.
    pub fn start(self, mut ended: Ended) {
        let net = Settler { dispatcher: self.dispatcher.clone(), recheck: self.recheck };
        let watched = ended.again.clone();
        tokio::spawn(async move {
            loop {
                loop {
                    match net.dispatcher.store.settle_stranded(SETTLE_BATCH as u64).await {
                        Ok(settled) => {
                            let more = settled.queued + settled.cancelled >= SETTLE_BATCH;
                            if settled.queued + settled.cancelled > 0 {
                                debug!(queued = settled.queued, cancelled = settled.cancelled, "settled stranded jobs");
                            }
                            net.send(settled).await;
                            if !more {
                                break;
                            }
                        }
                        Err(err) => {
                            warn!(error = %err, "could not settle waiting jobs");
                            break;
                        }
                    }
                }
                if watched.is_closed() {
                    return;
                }
                tokio::time::sleep(net.recheck).await;
            }
        });
        tokio::spawn(async move {
            while let Some(first) = ended.receiver.recv().await {
                let mut due = BTreeSet::from([first]);
                while due.len() < SETTLE_BATCH {
                    match ended.receiver.try_recv() {
                        Ok(id) => {
                            due.insert(id);
                        }
                        Err(_) => break,
                    }
                }
                let ids: Vec<Uuid> = due.into_iter().collect();
                match self.dispatcher.store.settle_dependents(&ids).await {
                    Ok(settled) => self.send(settled).await,
                    Err(err) => {
                        warn!(jobs = ids.len(), error = %err, "could not settle waiting jobs; trying again in a second");
                        let again = ended.again.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            for id in ids {
                                let _ = again.send(id);
                            }
                        });
                    }
                }
            }
        });
    }

    async fn send(&self, settled: Settled) {
        if !settled.released.is_empty() {
            debug!(jobs = settled.released.len(), "dependencies met: sending");
            self.dispatcher.publish_all(&settled.released).await;
        }
    }
}
