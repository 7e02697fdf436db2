//! PostgreSQL's group commits without a transaction: a batch of claims, plain outcomes and
//! lease renewals is a few single statements, each atomic by itself, so each runs on its
//! own (`BEGIN` and `COMMIT` would be two more round trips) and all of them at once, on the
//! writer's connections. A worker far from its database pays one round trip per commit.
//!
//! Each statement is still the compare-and-set with its events ([`super::postgres_batch`]).
//! A child's outcome is left out of its statement, since its parent's counter must move in
//! the same transaction: a run that did not move goes through a transaction, as a batch
//! holding anything else does.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures_util::future::join_all;
use sea_orm::DbBackend;
use uuid::Uuid;

use super::group_commit::{failed, Failure, Write, Written};
use super::run_sql::Outcome;
use super::{postgres_batch, SeaStore};
use crate::domain::JobStatus;
use crate::store::entity::job;
use crate::store::{Completion, RunRef, StoreError};

/// Outcomes of one status, each with the index of its write.
type Finishing<'a> = Vec<(usize, RunRef, &'a Completion)>;

/// One statement of a batch and the writes (by index) it answers.
enum Statement<'a> {
    Claim { owner: &'a str, lease: Duration, wanted: Vec<(usize, Uuid)> },
    Finish { to: JobStatus, wanted: Finishing<'a> },
    Renew { lease: Duration, wanted: Vec<(usize, RunRef)> },
}

/// What one statement did: each of its writes answered, or left to a transaction.
type Answers = Vec<(usize, Result<Written, StoreError>)>;

impl SeaStore {
    /// Commits `writes` as statements of their own and answers each, in order; `None` when
    /// the batch needs a transaction (a write of another kind, two writes for one job, or
    /// SQLite).
    pub(super) async fn commit_alone(&self, writes: &[Write]) -> Option<Vec<Result<Written, StoreError>>> {
        let statements = plan(self.db.get_database_backend(), writes)?;
        let mut answers: Vec<Option<Result<Written, StoreError>>> = writes.iter().map(|_| None).collect();
        let mut leftover = Vec::new();
        for done in join_all(statements.into_iter().map(|statement| self.run_alone(statement))).await {
            for (at, answer) in done {
                answers[at] = Some(answer);
            }
        }
        // Outcomes that did not move: a child's, or a run no longer current. A transaction
        // moves the child with its parent's counter, or finds the run gone again.
        for (at, write) in writes.iter().enumerate() {
            if let (None, Write::Finish { run, completion }) = (&answers[at], write) {
                leftover.push((at, Write::Finish { run: *run, completion: completion.clone() }));
            }
        }
        if !leftover.is_empty() {
            let (places, writes): (Vec<usize>, Vec<Write>) = leftover.into_iter().unzip();
            match self.commit_writes(&writes).await {
                Ok(written) => places.iter().zip(written).for_each(|(at, answer)| answers[*at] = Some(Ok(answer))),
                Err(failure) => places.iter().for_each(|at| answers[*at] = Some(Err(failed(&failure)))),
            }
        }
        Some(
            answers
                .into_iter()
                .map(|answer| answer.unwrap_or_else(|| Err(StoreError::Corrupt("a write was left unanswered".into()))))
                .collect(),
        )
    }

    /// Runs one statement. A refusal (not a lost connection) wrote nothing, so each of its
    /// writes is tried again alone, in a transaction; a lost connection may have committed.
    async fn run_alone(&self, statement: Statement<'_>) -> Answers {
        let result = match &statement {
            Statement::Claim { owner, lease, wanted } => {
                let ids: Vec<Uuid> = wanted.iter().map(|(_, id)| *id).collect();
                postgres_batch::claim(&self.db, &ids, owner, *lease)
                    .await
                    .map(|rows| moved(rows, wanted.iter().copied()))
            }
            Statement::Finish { to, wanted } => {
                let runs: Vec<(RunRef, &Completion)> = wanted.iter().map(|(_, run, c)| (*run, *c)).collect();
                let rows = postgres_batch::finish(&self.db, *to, &runs, false).await;
                // A run that did not move stays unanswered here: the caller gives it a transaction.
                rows.map(|rows| {
                    let mut answers = moved(rows, wanted.iter().map(|(at, run, _)| (*at, run.id)));
                    answers.retain(|(_, answer)| matches!(answer, Ok(Written::Job(Some(_)))));
                    answers
                })
            }
            Statement::Renew { lease, wanted } => {
                let runs: Vec<RunRef> = wanted.iter().map(|(_, run)| *run).collect();
                self.extend_run_leases(&self.db, &runs, *lease).await.map(|renewed| {
                    let renewed = |run: &RunRef| u64::from(renewed.contains(&run.id));
                    wanted.iter().map(|(at, run)| (*at, Ok(Written::Count(renewed(run))))).collect()
                })
            }
        };
        let err = match result {
            Ok(answers) => return answers,
            Err(err) => StoreError::from(err),
        };
        if err.is_unavailable() {
            let failure = Failure::AtCommit(err);
            return statement.places().into_iter().map(|at| (at, Err(failed(&failure)))).collect();
        }
        tracing::debug!(error = %err, "a statement of a group commit was refused; its writes are tried one by one");
        let mut answers = Vec::new();
        for (at, write) in statement.writes() {
            let answer = self.commit_writes(std::slice::from_ref(&write)).await;
            answers.push((at, answer.map_err(|failure| failed(&failure)).and_then(single)));
        }
        answers
    }
}

/// The statements of `writes`, or `None` when they need a transaction.
fn plan(backend: DbBackend, writes: &[Write]) -> Option<Vec<Statement<'_>>> {
    if backend != DbBackend::Postgres {
        return None;
    }
    let mut claims: BTreeMap<(&str, Duration), Vec<(usize, Uuid)>> = BTreeMap::new();
    let mut outcomes: BTreeMap<&'static str, (JobStatus, Finishing)> = BTreeMap::new();
    let mut renewals: BTreeMap<Duration, Vec<(usize, RunRef)>> = BTreeMap::new();
    let (mut finishing, mut renewing) = (HashSet::new(), HashSet::new());
    for (at, write) in writes.iter().enumerate() {
        match write {
            Write::Claim { id, owner, lease } => claims.entry((owner.as_str(), *lease)).or_default().push((at, *id)),
            Write::Finish { run, completion } if Outcome::batchable(completion) && finishing.insert(run.id) => {
                let to = completion.status();
                outcomes.entry(to.as_str()).or_insert_with(|| (to, Vec::new())).1.push((at, *run, completion))
            }
            Write::ExtendLease { run, lease } if renewing.insert(run.id) => {
                renewals.entry(*lease).or_default().push((at, *run))
            }
            _ => return None,
        }
    }
    let claims = claims.into_iter().map(|((owner, lease), wanted)| Statement::Claim { owner, lease, wanted });
    let outcomes = outcomes.into_values().map(|(to, wanted)| Statement::Finish { to, wanted });
    let renewals = renewals.into_iter().map(|(lease, wanted)| Statement::Renew { lease, wanted });
    Some(claims.chain(outcomes).chain(renewals).collect())
}

impl Statement<'_> {
    fn places(&self) -> Vec<usize> {
        match self {
            Statement::Claim { wanted, .. } => wanted.iter().map(|(at, _)| *at).collect(),
            Statement::Finish { wanted, .. } => wanted.iter().map(|(at, ..)| *at).collect(),
            Statement::Renew { wanted, .. } => wanted.iter().map(|(at, _)| *at).collect(),
        }
    }

    /// The statement's writes again, each to be committed alone.
    fn writes(&self) -> Vec<(usize, Write)> {
        match self {
            Statement::Claim { owner, lease, wanted } => wanted
                .iter()
                .map(|(at, id)| (*at, Write::Claim { id: *id, owner: owner.to_string(), lease: *lease }))
                .collect(),
            Statement::Finish { wanted, .. } => wanted
                .iter()
                .map(|(at, run, completion)| (*at, Write::Finish { run: *run, completion: (*completion).clone() }))
                .collect(),
            Statement::Renew { lease, wanted } => {
                wanted.iter().map(|(at, run)| (*at, Write::ExtendLease { run: *run, lease: *lease })).collect()
            }
        }
    }
}

/// Each wanted `(index, id)` answered with its moved row, or `None` (its compare-and-set missed).
fn moved(rows: Vec<job::Model>, wanted: impl Iterator<Item = (usize, Uuid)>) -> Answers {
    let mut by_id: std::collections::HashMap<Uuid, job::Model> = rows.into_iter().map(|row| (row.id, row)).collect();
    wanted.map(|(at, id)| (at, Ok(Written::Job(by_id.remove(&id).map(Box::new))))).collect()
}

fn single(mut answers: Vec<Written>) -> Result<Written, StoreError> {
    answers.pop().ok_or_else(|| StoreError::Corrupt("group commit left a write unanswered".into()))
}
