//! One writer at a time on SQLite, in arrival order, woken the moment the last one commits.
//!
//! SQLite admits one write transaction at a time. Without a gate, a writer that finds the
//! lock taken is put to sleep by SQLite's busy handler for 1, 2, 5, 10, … ms between tries,
//! so a submission behind a 4 ms transaction waits 8 ms, and one behind a second writer
//! 18 ms. The gate is a fair (FIFO) async mutex held for the life of each write
//! transaction: a writer queues in the process instead, and starts as soon as the one
//! before it ends. PostgreSQL has row locks and needs no gate.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult, QueryResult,
    SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::placement::Placement;

/// Shared by every store writing to one database from this process.
#[derive(Clone, Default)]
pub struct WriteGate {
    turn: Option<Arc<Mutex<()>>>,
    /// Writers waiting for their turn now.
    waiting: Arc<AtomicUsize>,
    /// Where new job rows go on SQLite; its rowids are handed out in turn.
    placement: Option<Arc<Placement>>,
}

impl WriteGate {
    /// A gate for `db`'s engine: real on SQLite, open on PostgreSQL.
    pub fn for_backend(backend: DbBackend) -> Self {
        match backend {
            DbBackend::Sqlite => WriteGate {
                turn: Some(Arc::new(Mutex::new(()))),
                placement: Some(Arc::default()),
                ..WriteGate::default()
            },
            _ => WriteGate::default(),
        }
    }

    /// Waits for this process's turn to write, then begins the transaction (`IMMEDIATE` on
    /// SQLite: the write lock is taken now, not at the first write).
    pub async fn begin(&self, db: &DatabaseConnection) -> Result<WriteTxn, DbErr> {
        let turn = match &self.turn {
            Some(turn) => {
                let _waiting = Waiting::counted(&self.waiting);
                Some(turn.clone().lock_owned().await)
            }
            None => None,
        };
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        let txn = db.begin_with_options(options).await?;
        Ok(WriteTxn { txn, placement: self.placement.clone(), _turn: turn })
    }

    /// How many writers of this process wait for their turn now (always 0 on PostgreSQL).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// A writer counted in [`WriteGate::waiting`] until it has its turn or gives up waiting.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn counted(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A write transaction holding its turn until it commits, rolls back or is dropped.
pub struct WriteTxn {
    // Declared first, so dropped first: a dropped transaction rolls back before the turn
    // passes on.
    txn: DatabaseTransaction,
    placement: Option<Arc<Placement>>,
    _turn: Option<OwnedMutexGuard<()>>,
}

impl WriteTxn {
    /// Where this transaction's new job rows go: `None` on PostgreSQL, whose rows go
    /// where its heap has room.
    pub(super) fn placement(&self) -> Option<&Placement> {
        self.placement.as_deref()
    }

    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.commit().await
    }

    pub async fn rollback(self) -> Result<(), DbErr> {
        self.txn.rollback().await
    }
}

impl Deref for WriteTxn {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        self.txn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.txn.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.txn.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.txn.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.txn.query_all_raw(stmt).await
    }
}
