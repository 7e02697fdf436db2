//! `JobStore` over SeaORM: the same SQL on SQLite and PostgreSQL.
//!
//! Write transactions start with their compare-and-set `UPDATE … RETURNING`, so SQLite takes
//! its write lock first (`BEGIN IMMEDIATE`) and never fails on a lock upgrade. Each role has
//! its file: `reads.rs`, `commands.rs`, `runs.rs`, `maintenance.rs`, `dispatch_book.rs`.
//! This file holds the store itself, how it tells its observers what a commit changed, and
//! the transition every role shares.

mod autocommit;
mod commands;
mod decode;
mod dependencies;
mod dispatch_book;
mod fan_in;
mod fan_out;
mod group_commit;
mod insert_sql;
mod limits;
mod maintenance;
mod placement;
mod postgres_batch;
mod prune;
mod reads;
mod rows;

pub use rows::{of_status, startable, STATUS_INDEXED};
mod run_sql;
mod runs;
mod settle;
mod unique;
pub(super) mod write_gate;

use crate::store::clock;
use std::sync::Arc;

use chrono::Utc;
use sea_orm::sea_query::{Expr, IntoCondition};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    EntityTrait, FromQueryResult as _, QueryFilter, QueryTrait as _, Statement, UpdateMany,
};
use serde_json::Value;
use uuid::Uuid;

use self::decode::JobRow;
use self::insert_sql::MultiInsert;
use self::write_gate::{WriteGate, WriteTxn};
use super::entity::{job, job_event};
use super::{Call, Change, Hook, Observer, StoreError};
use crate::domain::{Job, JobStatus, NewEvent};

/// Group commits in flight at once on PostgreSQL (see `group_commit::Writer::start`).
const WRITER_OVERLAP: usize = 4;

/// The SQL store. Cheap to clone: it holds a connection pool.
#[derive(Clone)]
pub struct SeaStore {
    db: DatabaseConnection,
    /// Write transactions in turn, shared with the group-commit writer.
    gate: WriteGate,
    /// When set, claims and outcomes go through the group-commit writer.
    writer: Option<group_commit::Writer>,
    /// Told of every commit, in order.
    observers: Arc<Vec<Arc<dyn Observer>>>,
    /// Asked before every call and after every commit (fault injection in tests).
    hook: Option<Arc<dyn Hook>>,
    /// When set, history is pruned through this pool (see [`Self::pruning_on`]).
    pruner: Option<DatabaseConnection>,
}

impl SeaStore {
    pub fn new(db: DatabaseConnection) -> Self {
        let gate = WriteGate::for_backend(db.get_database_backend());
        SeaStore { db, gate, writer: None, observers: Arc::default(), hook: None, pruner: None }
    }

    /// Writes claims and outcomes of concurrent jobs in shared transactions of up to
    /// `max_batch`: one commit (one fsync) for many jobs. Needs a tokio runtime.
    pub fn with_group_commit(self, max_batch: usize) -> Self {
        let db = self.db.clone();
        self.with_group_commit_on(max_batch, db)
    }

    /// As [`Self::with_group_commit`], the writer committing through `writer_db`: a pool of
    /// its own keeps its connections' page and statement caches warm and never waits behind
    /// readers. On SQLite one connection is enough: it commits one batch at a time; on
    /// PostgreSQL up to [`WRITER_OVERLAP`] batches are in flight, their statements side by side.
    pub fn with_group_commit_on(mut self, max_batch: usize, writer_db: DatabaseConnection) -> Self {
        if max_batch > 1 {
            let writer_store = SeaStore::new(writer_db).sharing_gate(self.gate.clone());
            let overlap = match writer_store.db.get_database_backend() {
                DbBackend::Postgres => WRITER_OVERLAP,
                _ => 1,
            };
            self.writer = Some(group_commit::Writer::start(writer_store, max_batch, overlap));
        }
        self
    }

    /// `observer` is told of every commit from now on, after those added before it.
    pub fn observed_by(mut self, observer: Arc<dyn Observer>) -> Self {
        Arc::make_mut(&mut self.observers).push(observer);
        self
    }

    /// `hook` is asked before every call and after every commit (tests inject faults).
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The gate this store's writers take turns at: a capability with tables of its own on
    /// the same database writes in turn with the store through it (on SQLite; on PostgreSQL
    /// it is open).
    pub fn write_gate(&self) -> WriteGate {
        self.gate.clone()
    }

    /// Prunes history through `pruner_db` (in turn with every other writer):
    /// [`crate::store::connect_for_pruning`]'s connection, whose commits wait for no disk
    /// flush, so a batch holds SQLite's one writer for its statements alone.
    pub fn pruning_on(mut self, pruner_db: DatabaseConnection) -> Self {
        self.pruner = Some(pruner_db);
        self
    }

    /// Takes write transactions in turn with `gate` (the group-commit writer's store).
    fn sharing_gate(mut self, gate: WriteGate) -> Self {
        self.gate = gate;
        self
    }

    /// The hook's say before `call`: an error fails the call, nothing written.
    async fn before(&self, call: Call<'_>) -> Result<(), StoreError> {
        match &self.hook {
            Some(hook) => hook.before(call).await,
            None => Ok(()),
        }
    }

    /// Tells every observer, then the hook, what the committed `call` changed.
    async fn announce(&self, call: Call<'_>, changes: &[Change<'_>]) -> Result<(), StoreError> {
        for observer in self.observers.iter() {
            observer.committed(changes);
        }
        match &self.hook {
            Some(hook) => hook.after(call, changes, self).await,
            None => Ok(()),
        }
    }

    async fn write_txn(&self) -> Result<WriteTxn, DbErr> {
        self.gate.begin(&self.db).await
    }

    /// A write transaction for pruning: on the pruner's pool when there is one.
    pub(super) async fn pruning_txn(&self) -> Result<WriteTxn, DbErr> {
        self.gate.begin(self.pruner.as_ref().unwrap_or(&self.db)).await
    }

    /// "Now" by the clock that judges leases and times ([`rows::db_now`]): PostgreSQL's
    /// own, or this process's on SQLite.
    pub(super) async fn db_clock(&self) -> Result<chrono::DateTime<chrono::Utc>, StoreError> {
        let backend = self.db.get_database_backend();
        if backend != DbBackend::Postgres {
            return Ok(clock::now());
        }
        let now = Statement::from_string(backend, "SELECT CURRENT_TIMESTAMP AS now");
        let row = self.db.query_one_raw(now).await?;
        Ok(row
            .map(|row| row.try_get::<chrono::DateTime<chrono::Utc>>("", "now"))
            .transpose()?
            .unwrap_or_else(clock::now))
    }

    pub(super) async fn find(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let mut job: Vec<Job> = job::Entity::find_by_id(id).one(&self.db).await?.into_iter().collect();
        fan_in::apply(&self.db, &mut job).await?;
        Ok(job.pop())
    }

    /// Runs one transition: the compare-and-set, then its event, in one transaction.
    /// `None` when the job was not in any of `from` (nothing is written).
    async fn transition(
        &self,
        id: Uuid,
        from: &[JobStatus],
        to: JobStatus,
        set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
        event: NewEvent,
    ) -> Result<Option<Job>, StoreError> {
        self.transition_in(None, id, from, to, set, event).await
    }

    /// As [`Self::transition`], inside `shared` when given (a group commit: the caller
    /// commits), else in a transaction of its own.
    async fn transition_in(
        &self,
        shared: Option<&DatabaseTransaction>,
        id: Uuid,
        from: &[JobStatus],
        to: JobStatus,
        set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
        event: NewEvent,
    ) -> Result<Option<Job>, StoreError> {
        if let Some(txn) = shared {
            return apply_transition(txn, id, from, to, set, &event).await;
        }
        let txn = self.write_txn().await?;
        let job = apply_transition(&txn, id, from, to, set, &event).await?;
        if job.is_some() {
            txn.commit().await?;
        }
        Ok(job)
    }
}

/// What a retry (by hand, or by a coordinator's re-run) clears: the last run's outcome,
/// times, owner and fan-out form, and the retry budget, which starts afresh.
/// `run_after` is the database's own "now" (on PostgreSQL the transaction's start), so a
/// claim, which compares it with the same clock, never finds the job not yet due and drops
/// its message.
fn retried(backend: sea_orm::DbBackend, update: UpdateMany<job::Entity>) -> UpdateMany<job::Entity> {
    let no_time = None::<chrono::DateTime<Utc>>;
    let update = update
        .col_expr(job::Column::Result, Expr::value(None::<Value>))
        .col_expr(job::Column::ErrorCode, Expr::value(None::<String>))
        .col_expr(job::Column::ErrorMessage, Expr::value(None::<String>))
        .col_expr(job::Column::StartedAt, Expr::value(no_time))
        .col_expr(job::Column::FinishedAt, Expr::value(no_time))
        .col_expr(job::Column::LeasedUntil, Expr::value(no_time))
        .col_expr(job::Column::Owner, Expr::value(None::<String>))
        .col_expr(job::Column::RunAfter, rows::db_now(backend))
        .col_expr(job::Column::PublishedAt, Expr::value(no_time))
        .col_expr(job::Column::Failures, Expr::value(0))
        // A retry by hand runs the job now, whatever its dependencies.
        .col_expr(job::Column::WaitingSince, Expr::value(no_time))
        // A job under a limit queues again held: its limit admits it when it has room.
        .col_expr(
            job::Column::HeldSince,
            Expr::Case(Box::new(
                sea_orm::sea_query::CaseStatement::new()
                    .case(job::Column::LimitKey.is_null(), Expr::value(no_time))
                    .finally(Expr::value(Some(clock::now()))),
            )),
        );
    run_sql::forget_fan_out(update)
}

/// The compare-and-set and its event, inside `txn`; `None` (nothing written) on a miss. A
/// child job that ends settles its parent in the same transaction.
async fn apply_transition(
    txn: &DatabaseTransaction,
    id: Uuid,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
    event: &NewEvent,
) -> Result<Option<Job>, StoreError> {
    let Some(row) = compare_and_set(txn, id, from, to, set).await? else {
        return Ok(None);
    };
    append_event(txn, id, event).await?;
    if to.is_terminal() {
        fan_out::children_ended(txn, std::slice::from_ref(&row)).await?;
    }
    Ok(Some(row))
}

/// `UPDATE job SET status = to, … WHERE id = ? AND status IN (from) RETURNING *`.
/// Every `from → to` must be a legal move of the state machine.
async fn compare_and_set(
    txn: &DatabaseTransaction,
    id: Uuid,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
) -> Result<Option<job::Model>, DbErr> {
    let mut rows = compare_and_set_many(txn, job::Column::Id.eq(id), from, to, set).await?;
    Ok(rows.pop())
}

/// The compare-and-set of every row `rows` selects, in one statement: each row is judged
/// by its own current status. Returns the rows that moved.
async fn compare_and_set_many(
    txn: &DatabaseTransaction,
    rows: impl IntoCondition,
    from: &[JobStatus],
    to: JobStatus,
    set: impl FnOnce(UpdateMany<job::Entity>) -> UpdateMany<job::Entity>,
) -> Result<Vec<job::Model>, DbErr> {
    debug_assert!(from.iter().all(|status| status.can_transition_to(to)), "{from:?} -> {to}");
    let update = job::Entity::update_many()
        .col_expr(job::Column::Status, Expr::value(to.as_str()))
        .filter(rows)
        .filter(job::Column::Status.is_in(from.iter().map(|status| status.as_str())));
    let mut query = set(update).into_query();
    query.returning_all();
    let statement = txn.get_database_backend().build(&query);
    let mut moved: Vec<job::Model> =
        JobRow::find_by_statement(statement).all(txn).await?.into_iter().map(|JobRow(row)| row).collect();
    fan_in::folded(txn, &mut moved).await?;
    Ok(moved)
}

async fn append_event<C: ConnectionTrait>(db: &C, job_id: Uuid, event: &NewEvent) -> Result<(), DbErr> {
    job_event::Entity::insert(event_row(job_id, event)).exec_without_returning(db).await?;
    Ok(())
}

/// Rows per multi-row `INSERT`: keeps the bind parameters below SQLite's and PostgreSQL's
/// limits (32,766 and 65,535) for the widest row (the job's 40 columns and, on SQLite, its
/// rowid: 20,500 at most).
const INSERT_CHUNK: usize = 500;

/// Appends many events in multi-row inserts, in order, each row's values moved into the
/// statement ([`insert_sql`]).
async fn append_events(txn: &DatabaseTransaction, events: Vec<job_event::ActiveModel>) -> Result<(), DbErr> {
    let backend = txn.get_database_backend();
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        let mut insert =
            MultiInsert::new(backend, "job_event", ["job_id", "ts", "event", "message", "fields", "level"]);
        for row in events.by_ref().take(INSERT_CHUNK) {
            let job_event::ActiveModel { job_id, ts, event, message, fields, level, .. } = row;
            let values = [
                job_id.into_value(),
                ts.into_value(),
                event.into_value(),
                message.into_value(),
                fields.into_value(),
                level.into_value(),
            ];
            if values.iter().any(Option::is_none) {
                return Err(DbErr::Custom("an event row without one of its columns".into()));
            }
            insert.row(values.into_iter().flatten());
        }
        txn.execute_raw(insert.into_statement()).await?;
    }
    Ok(())
}

fn event_row(job_id: Uuid, event: &NewEvent) -> job_event::ActiveModel {
    owned_event_row(job_id, event.clone())
}

/// [`event_row`] of an event the caller is done with: its texts move into the row.
fn owned_event_row(job_id: Uuid, event: NewEvent) -> job_event::ActiveModel {
    let NewEvent { event, message, fields, level } = event;
    job_event::ActiveModel {
        job_id: Set(job_id),
        ts: Set(clock::now()),
        event: Set(event),
        message: Set(message),
        fields: Set(fields),
        level: Set(level.as_str().to_owned()),
        ..Default::default()
    }
}
