//! Group commit: claims, outcomes, keyless submissions and publication records of concurrent
//! jobs share one transaction, so many jobs
//! pay for one commit (one fsync) instead of one each. Each write keeps its own
//! compare-and-set; only the commit is shared. A batch is whatever arrived while the
//! previous one was committing (up to `max_batch`), so an idle system adds no delay.

use std::time::Duration;

use sea_orm::DbErr;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::SeaStore;
use crate::domain::{Job, NewJob};
use crate::store::{Completion, Dispatch, RunRef, StoreError};

/// A write the group-commit writer performs.
pub(super) enum Write {
    Claim {
        id: Uuid,
        owner: String,
        lease: Duration,
    },
    Finish {
        run: RunRef,
        completion: Completion,
    },
    /// A submission without an idempotency key (it cannot conflict).
    Submit {
        new: NewJob,
    },
    MarkPublished {
        jobs: Vec<Dispatch>,
    },
}

/// What a write produced.
pub(super) enum Written {
    Job(Option<Box<Job>>),
    Count(u64),
}

impl Written {
    pub(super) fn into_job(self) -> Result<Job, StoreError> {
        match self {
            Written::Job(Some(job)) => Ok(*job),
            _ => Err(StoreError::Corrupt("group commit answered a submission without its job".into())),
        }
    }

    pub(super) fn into_count(self) -> Result<u64, StoreError> {
        match self {
            Written::Count(count) => Ok(count),
            Written::Job(_) => Err(StoreError::Corrupt("group commit answered a count with a job".into())),
        }
    }

    pub(super) fn into_optional_job(self) -> Result<Option<Job>, StoreError> {
        match self {
            Written::Job(job) => Ok(job.map(|job| *job)),
            Written::Count(_) => Err(StoreError::Corrupt("group commit answered a job with a count".into())),
        }
    }
}

type Reply = oneshot::Sender<Result<Written, StoreError>>;

struct Request {
    write: Write,
    reply: Reply,
}

/// The handle callers send writes through.
#[derive(Clone)]
pub(super) struct Writer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Writer {
    /// Spawns the writer task on the current tokio runtime; `store` must have no writer.
    pub(super) fn start(store: SeaStore, max_batch: usize) -> Writer {
        let (requests, mut incoming) = mpsc::unbounded_channel::<Request>();
        tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let mut batch = vec![first];
                while batch.len() < max_batch {
                    match incoming.try_recv() {
                        Ok(request) => batch.push(request),
                        Err(_) => break,
                    }
                }
                store.commit_batch(batch).await;
            }
        });
        Writer { requests }
    }

    pub(super) async fn write(&self, write: Write) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.requests.send(Request { write, reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> StoreError {
    StoreError::Database(DbErr::Custom("the group-commit writer stopped".into()))
}

fn failed(err: &dyn std::fmt::Display) -> StoreError {
    StoreError::Database(DbErr::Custom(format!("group commit failed, nothing in it was written: {err}")))
}

impl SeaStore {
    /// Applies every write of `batch` in one transaction and answers each. If any write or
    /// the commit fails, the transaction is rolled back and every write gets the error: a
    /// write is reported done only once it is durable.
    async fn commit_batch(&self, batch: Vec<Request>) {
        let txn = match self.write_txn().await {
            Ok(txn) => txn,
            Err(err) => return answer_all(batch.into_iter().map(|request| request.reply), &err),
        };
        let mut done = Vec::with_capacity(batch.len());
        let mut pending = batch.into_iter();
        for request in pending.by_ref() {
            let result = match &request.write {
                Write::Claim { id, owner, lease } => {
                    self.claim_run(Some(&txn), *id, owner, *lease).await.map(|job| Written::Job(job.map(Box::new)))
                }
                Write::Finish { run, completion } => {
                    self.finish_run(Some(&txn), *run, completion).await.map(|job| Written::Job(job.map(Box::new)))
                }
                Write::Submit { new } => self.insert_in(&txn, new).await.map(|job| Written::Job(Some(Box::new(job)))),
                Write::MarkPublished { jobs } => self.record_publications(&txn, jobs).await.map(Written::Count),
            };
            match result {
                Ok(job) => done.push((request.reply, job)),
                Err(err) => {
                    let _ = txn.rollback().await;
                    let _ = request.reply.send(Err(failed(&err)));
                    let rest = done.into_iter().map(|(reply, _)| reply).chain(pending.map(|request| request.reply));
                    return answer_all(rest, &err);
                }
            }
        }
        match txn.commit().await {
            Ok(()) => {
                for (reply, job) in done {
                    let _ = reply.send(Ok(job));
                }
            }
            Err(err) => answer_all(done.into_iter().map(|(reply, _)| reply), &err),
        }
    }
}

fn answer_all(replies: impl Iterator<Item = Reply>, err: &dyn std::fmt::Display) {
    for reply in replies {
        let _ = reply.send(Err(failed(err)));
    }
}
