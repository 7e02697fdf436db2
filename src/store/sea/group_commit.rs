//! Group commit: claims, outcomes, lease renewals, keyless submissions and publication
//! records of concurrent jobs share one transaction, so many jobs
//! pay for one commit (one fsync) instead of one each. Each write keeps its own
//! compare-and-set; only the commit is shared. A batch is whatever arrived while the
//! previous one was committing (up to `max_batch`), so an idle system adds no delay.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use sea_orm::{ConnectionTrait, DbBackend, DbErr};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use uuid::Uuid;

use super::commands::insert_new;
use super::fan_out::children_ended;
use super::run_sql::Outcome;
use super::write_gate::WriteTxn;
use super::{append_events, owned_event_row, postgres_batch, SeaStore};
use crate::domain::{BatchOutcome, Job, JobStatus, NewEvent, NewJob};
use crate::store::entity::{job, job_event};
use crate::store::{BatchRecorded, Completion, Dispatch, Reduce, RunRef, StoreError};

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
        new: Box<NewJob>,
    },
    MarkPublished {
        jobs: Vec<Dispatch>,
    },
    /// A submission's outbox row deleted: its messages were confirmed.
    ConfirmOutbox {
        outbox: Uuid,
    },
    ExtendLease {
        run: RunRef,
        lease: Duration,
    },
    /// A batch outcome: outcomes of one parent in a batch move its counter once.
    Batch {
        outcome: BatchOutcome,
        reduce: Arc<dyn Reduce>,
    },
}

/// What a write produced.
pub(super) enum Written {
    Job(Option<Box<Job>>),
    Count(u64),
    Batch(BatchRecorded),
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
            _ => Err(StoreError::Corrupt("group commit answered a count with something else".into())),
        }
    }

    pub(super) fn into_optional_job(self) -> Result<Option<Job>, StoreError> {
        match self {
            Written::Job(job) => Ok(job.map(|job| *job)),
            _ => Err(StoreError::Corrupt("group commit answered a job with something else".into())),
        }
    }

    pub(super) fn into_batch(self) -> Result<BatchRecorded, StoreError> {
        match self {
            Written::Batch(recorded) => Ok(recorded),
            _ => Err(StoreError::Corrupt("group commit answered a batch outcome with something else".into())),
        }
    }
}

/// How long a batch in flight has before the next may start beside it: longer than a
/// commit takes on this machine, shorter than a round trip to another data centre.
const OVERLAP_AFTER: Duration = Duration::from_millis(10);

type Reply = oneshot::Sender<Result<Written, StoreError>>;

/// Why a group commit failed, and so whether its writes may be tried again.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error("{0}")]
    BeforeCommit(StoreError),
    #[error("at commit: {0}")]
    AtCommit(StoreError),
}

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
    /// Up to `overlap` batches are in flight at once: a batch still going after
    /// [`OVERLAP_AFTER`] lets the next one start beside it (PostgreSQL, whose commits far
    /// away take a round trip each); with 1, one batch at a time (SQLite).
    pub(super) fn start(store: SeaStore, max_batch: usize, overlap: usize) -> Writer {
        let (requests, mut incoming) = mpsc::unbounded_channel::<Request>();
        let turns = Arc::new(Semaphore::new(overlap.max(1)));
        tokio::spawn(async move {
            let mut previous: Option<(Instant, oneshot::Receiver<()>)> = None;
            while let Some(first) = incoming.recv().await {
                // The batch in flight has its time to end first, so that batches stay full.
                if let Some((started, mut done)) = previous.take() {
                    let _ = tokio::time::timeout_at(started + OVERLAP_AFTER, &mut done).await;
                }
                let Ok(turn) = turns.clone().acquire_owned().await else { return };
                let mut batch = vec![first];
                while batch.len() < max_batch {
                    match incoming.try_recv() {
                        Ok(request) => batch.push(request),
                        Err(_) => break,
                    }
                }
                let (ended, done) = oneshot::channel();
                previous = Some((Instant::now(), done));
                let store = store.clone();
                tokio::spawn(async move {
                    // A panic answers this batch's writers with "writer stopped" (their
                    // replies are dropped); the writer goes on with the next batch.
                    if AssertUnwindSafe(store.commit_batch(batch)).catch_unwind().await.is_err() {
                        tracing::error!("a group commit panicked; its writes were answered with an error");
                    }
                    drop(turn);
                    let _ = ended.send(());
                });
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

/// The error each write of a failed group commit gets; a connection failure stays one, so
/// its writers know nothing was refused for cause (they wait for the database and retry).
pub(super) fn failed(failure: &Failure) -> StoreError {
    let (Failure::BeforeCommit(err) | Failure::AtCommit(err)) = failure;
    match err.is_unavailable() {
        true => StoreError::Unavailable(format!("group commit failed: {failure}")),
        false => StoreError::Database(DbErr::Custom(format!("group commit failed: {failure}"))),
    }
}

impl SeaStore {
    /// Applies every write of `batch` in one transaction and answers each. If any write or
    /// the commit fails, the transaction is rolled back and every write gets the error: a
    /// write is reported done only once it is durable.
    async fn commit_batch(&self, batch: Vec<Request>) {
        let (writes, replies): (Vec<Write>, Vec<Reply>) =
            batch.into_iter().map(|request| (request.write, request.reply)).unzip();
        if let Some(answers) = self.commit_alone(&writes).await {
            metrics::histogram!("yardmaster_group_commit_batch_size").record(writes.len() as f64);
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
            return;
        }
        match self.commit_writes(&writes).await {
            Ok(answers) => {
                metrics::histogram!("yardmaster_group_commit_batch_size").record(writes.len() as f64);
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            // A statement failed before the commit, so nothing was written: one bad write or
            // a deadlock with another process must not fail its neighbours, so each write
            // is tried again in a transaction of its own.
            Err(Failure::BeforeCommit(_)) if writes.len() > 1 => {
                for (write, reply) in writes.into_iter().zip(replies) {
                    let answer = self.commit_writes(std::slice::from_ref(&write)).await;
                    let _ = reply.send(answer.map_err(|failure| failed(&failure)).and_then(|mut answers| {
                        answers.pop().ok_or_else(|| StoreError::Corrupt("group commit left a write unanswered".into()))
                    }));
                }
            }
            // A failed commit may still have been applied: nothing is tried again.
            Err(failure) => {
                for reply in replies {
                    let _ = reply.send(Err(failed(&failure)));
                }
            }
        }
    }

    pub(super) async fn commit_writes(&self, writes: &[Write]) -> Result<Vec<Written>, Failure> {
        let txn = self.write_txn().await.map_err(|err| Failure::BeforeCommit(err.into()))?;
        match self.apply_batch(&txn, writes).await {
            Ok(answers) => {
                txn.commit().await.map_err(|err| Failure::AtCommit(err.into()))?;
                Ok(answers)
            }
            Err(err) => {
                let _ = txn.rollback().await;
                Err(Failure::BeforeCommit(err))
            }
        }
    }

    /// The writes of one group commit, as few statements as the writes allow: one
    /// `UPDATE … RETURNING` per claimant for the claims, one per status for plain outcomes,
    /// one multi-row `INSERT` for submissions and one for all their events, one `DELETE` for
    /// the outbox rows of confirmed submissions. Answers in the
    /// order of `writes`.
    async fn apply_batch(&self, txn: &WriteTxn, writes: &[Write]) -> Result<Vec<Written>, StoreError> {
        let mut answers: Vec<Option<Written>> = writes.iter().map(|_| None).collect();
        let mut events = Vec::new();
        let mut claims: BTreeMap<(&str, Duration), Vec<(usize, Uuid)>> = BTreeMap::new();
        let mut outcomes: BTreeMap<&'static str, Vec<(usize, RunRef, &Completion)>> = BTreeMap::new();
        let mut submissions = Vec::new();
        let mut confirms: Vec<(usize, Uuid)> = Vec::new();
        let mut renewals: BTreeMap<Duration, Vec<(usize, RunRef)>> = BTreeMap::new();
        // Parents in a fixed order, so two processes lock them in the same order.
        let mut batches: BTreeMap<RunRef, Vec<(usize, &BatchOutcome)>> = BTreeMap::new();
        let mut reducers: HashMap<RunRef, &dyn Reduce> = HashMap::new();
        // The multi-row statements key their per-row values by job id: a second write for
        // the same job (an old run's and the current run's) goes in a statement of its own.
        let (mut finishing, mut renewing) = (HashSet::new(), HashSet::new());
        for (at, write) in writes.iter().enumerate() {
            match write {
                Write::Finish { run, completion } if !finishing.insert(run.id) => {
                    let job = self.finish_run(Some(txn), *run, completion).await?;
                    answers[at] = Some(Written::Job(job.map(Box::new)));
                }
                Write::ExtendLease { run, lease } if !renewing.insert(run.id) => {
                    let renewed = self.extend_run_leases(txn, std::slice::from_ref(run), *lease).await?;
                    answers[at] = Some(Written::Count(u64::from(renewed.contains(&run.id))));
                }
                Write::Claim { id, owner, lease } => {
                    claims.entry((owner.as_str(), *lease)).or_default().push((at, *id))
                }
                Write::Finish { run, completion } if Outcome::batchable(completion) => {
                    outcomes.entry(completion.status().as_str()).or_default().push((at, *run, completion))
                }
                Write::Finish { run, completion } => {
                    let job = self.finish_run(Some(txn), *run, completion).await?;
                    answers[at] = Some(Written::Job(job.map(Box::new)));
                }
                Write::Submit { new } => submissions.push((at, new.as_ref())),
                Write::MarkPublished { jobs } => {
                    answers[at] = Some(Written::Count(self.record_publications(txn, jobs).await?));
                }
                Write::ConfirmOutbox { outbox } => confirms.push((at, *outbox)),
                Write::ExtendLease { run, lease } => renewals.entry(*lease).or_default().push((at, *run)),
                Write::Batch { outcome, reduce } => {
                    let parent = RunRef { id: outcome.parent_job_id, attempt: outcome.attempt };
                    batches.entry(parent).or_default().push((at, outcome));
                    reducers.insert(parent, reduce.as_ref());
                }
            }
        }
        for (parent, wanted) in batches {
            let outcomes: Vec<&BatchOutcome> = wanted.iter().map(|(_, outcome)| *outcome).collect();
            let reduce = reducers
                .get(&parent)
                .copied()
                .ok_or_else(|| StoreError::Corrupt("a batch without its reducer".into()))?;
            let recorded = self.record_batches_in(txn, parent, &outcomes, reduce).await?;
            for ((at, _), recorded) in wanted.into_iter().zip(recorded) {
                answers[at] = Some(Written::Batch(recorded));
            }
        }
        for (lease, wanted) in renewals {
            let runs: Vec<RunRef> = wanted.iter().map(|(_, run)| *run).collect();
            let renewed = self.extend_run_leases(txn, &runs, lease).await?;
            for (at, run) in wanted {
                answers[at] = Some(Written::Count(u64::from(renewed.contains(&run.id))));
            }
        }
        // PostgreSQL writes the events of its claims and outcomes in the same statement.
        let postgres = txn.get_database_backend() == DbBackend::Postgres;
        for ((owner, lease), wanted) in claims {
            let ids: Vec<Uuid> = wanted.iter().map(|(_, id)| *id).collect();
            let claimed = match postgres {
                true => {
                    postgres_batch::claim(txn, &ids, owner, lease).await?.into_iter().map(|row| (row, None)).collect()
                }
                false => {
                    self.claim_runs(txn, &ids, owner, lease).await?.into_iter().map(|(r, e)| (r, Some(e))).collect()
                }
            };
            answer_moved(&mut answers, &mut events, claimed, wanted.into_iter())?;
        }
        for (status, wanted) in outcomes {
            let to = status.parse::<JobStatus>().map_err(|err| StoreError::Corrupt(err.to_string()))?;
            let runs: Vec<(RunRef, &Completion)> =
                wanted.iter().map(|(_, run, completion)| (*run, *completion)).collect();
            let finished: Vec<(job::Model, Option<NewEvent>)> = match postgres {
                true => {
                    postgres_batch::finish(txn, to, &runs, true).await?.into_iter().map(|row| (row, None)).collect()
                }
                false => self.finish_runs(txn, to, &runs).await?.into_iter().map(|(r, e)| (r, Some(e))).collect(),
            };
            children_ended(txn, finished.iter().map(|(row, _)| row)).await?;
            answer_moved(&mut answers, &mut events, finished, wanted.into_iter().map(|(at, run, _)| (at, run.id)))?;
        }
        if !confirms.is_empty() {
            let ids: Vec<Uuid> = confirms.iter().map(|(_, id)| *id).collect();
            let deleted = super::dispatch_book::confirm_outboxes(&**txn, &ids).await?;
            for (at, id) in confirms {
                answers[at] = Some(Written::Count(u64::from(deleted.contains(&id))));
            }
        }
        if !submissions.is_empty() {
            let new: Vec<&NewJob> = submissions.iter().map(|(_, new)| *new).collect();
            for ((at, _), row) in submissions.iter().zip(insert_new(txn, &new).await?) {
                answers[*at] = Some(Written::Job(Some(Box::new(row))));
            }
        }
        append_events(txn, events).await?;
        answers
            .into_iter()
            .map(|answer| answer.ok_or_else(|| StoreError::Corrupt("group commit left a write unanswered".into())))
            .collect()
    }
}

/// Answers each wanted `(index, id)` with its moved row (or `None`: its compare-and-set
/// missed) and queues the event of each row that moved, unless it was written with it. A row answers one write only, so a
/// job claimed twice in one batch goes to exactly one claimant.
fn answer_moved(
    answers: &mut [Option<Written>],
    events: &mut Vec<job_event::ActiveModel>,
    moved: Vec<(job::Model, Option<NewEvent>)>,
    wanted: impl Iterator<Item = (usize, Uuid)>,
) -> Result<(), StoreError> {
    let mut by_id: HashMap<Uuid, (job::Model, Option<NewEvent>)> =
        moved.into_iter().map(|(row, event)| (row.id, (row, event))).collect();
    for (at, id) in wanted {
        let job = match by_id.remove(&id) {
            Some((row, event)) => {
                events.extend(event.map(|event| owned_event_row(id, event)));
                Some(Box::new(row))
            }
            None => None,
        };
        answers[at] = Some(Written::Job(job));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sea_orm::error::ConnAcquireErr;

    use super::*;

    #[test]
    fn a_connection_failure_stays_one_through_a_group_commit() {
        let away = Failure::AtCommit(StoreError::Database(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)));
        assert!(failed(&away).is_unavailable(), "{}", failed(&away));
        let refused = Failure::BeforeCommit(StoreError::Database(DbErr::Custom("constraint".into())));
        assert!(!failed(&refused).is_unavailable());
    }
}
