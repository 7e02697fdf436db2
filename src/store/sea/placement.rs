//! Where SQLite puts a new job's row: jobs of one queue and level side by side, in runs, so
//! a group commit of a level's next claims rewrites a few pages of the table, not a page
//! per job.
//!
//! SQLite lays a table's rows out by rowid and gives each new row the next one, so jobs
//! submitted with interleaved levels (or queues) lie interleaved. Claims go level by level,
//! so each group commit wrote about one table page per job to the log, and that page again
//! for its outcome: a drain at levels 0-9 interleaved ran at 0.71× of the same drain at one
//! level (`BENCHMARKS.md`, issue 29). Here each (queue, level) takes rowids from a run of
//! its own, [`RUN`] rows long, cut from the end of the table when its last one is used.
//! The rowid is SQLite's storage key only: ids and times order every listing and cursor.
//!
//! Rowids are handed out under the write gate, in the inserting transaction, which SQLite
//! lets in alone. Each such transaction first reads the table's highest rowid: above
//! anything handed out here, rows came from elsewhere (another process, an `INSERT` that
//! let SQLite choose); below what the last transaction saw, rows went (the newest
//! deleted, or the table renumbered by a `VACUUM`). Either way the runs are forgotten and
//! the next starts after the table's last row. That read cannot see everything (another
//! writer's rows below a rowid handed out here whose transaction rolled back), so an insert
//! that finds a rowid taken restarts the runs after the table's last row and is made again
//! in the same transaction: SQLite undid only the failed statement, and the transaction
//! still holds the write lock, so the second cannot meet another writer's rows.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement};

use super::rows::insert_statement;
use crate::domain::LOWEST_PRIORITY;
use crate::store::entity::job;

/// Rows of one queue and level placed side by side; a group commit claims at most 128.
pub(super) const RUN: i64 = 256;

/// Queues with runs open at once; past it, every run starts again at the table's end.
const MAX_QUEUES: usize = 256;

/// The runs of one process's SQLite store. Shared by its writers, as the write gate is.
#[derive(Default)]
pub struct Placement {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The highest rowid known to be taken: handed out here, or in the table when read.
    high: i64,
    /// The table's highest rowid as the last inserting transaction read it.
    seen: i64,
    /// Where the next run starts.
    tail: i64,
    /// Each queue's open run per level (`effective_priority`).
    runs: HashMap<String, [Run; LEVELS]>,
}

const LEVELS: usize = LOWEST_PRIORITY as usize + 1;

/// Rowids `next..end` are free for one queue and level.
#[derive(Clone, Copy, Default)]
struct Run {
    next: i64,
    end: i64,
}

impl State {
    /// Forgets every run: the next starts after `last`, the table's highest rowid.
    fn restart(&mut self, last: i64) {
        self.runs.clear();
        self.high = last;
        self.tail = last + 1;
    }

    fn rowid(&mut self, queue: &str, level: i16) -> i64 {
        if !self.runs.contains_key(queue) {
            if self.runs.len() >= MAX_QUEUES {
                self.runs.clear();
            }
            self.runs.insert(queue.to_owned(), [Run::default(); LEVELS]);
        }
        let level = usize::try_from(level).unwrap_or(0).min(LEVELS - 1);
        let tail = &mut self.tail;
        let run = &mut self.runs.get_mut(queue).expect("inserted above")[level];
        if run.next >= run.end {
            *run = Run { next: *tail, end: *tail + RUN };
            *tail += RUN;
        }
        let rowid = run.next;
        run.next += 1;
        self.high = self.high.max(rowid);
        rowid
    }
}

impl Placement {
    /// Rowids for `rows`, in their order, given `last`, the table's highest rowid read in
    /// the inserting transaction; `afresh`: restart the runs after it whatever was seen.
    fn place(&self, last: i64, rows: &[job::Model], afresh: bool) -> Vec<i64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if afresh || last > state.high || last < state.seen || state.tail == 0 {
            state.restart(last);
        }
        state.seen = last;
        rows.iter().map(|row| state.rowid(&row.queue, row.effective_priority)).collect()
    }

    /// Inserts `rows` (at most a statement's worth) at the rowids their queue and level
    /// take, in `txn`, which holds the write gate.
    pub(super) async fn insert(&self, txn: &DatabaseTransaction, rows: &[job::Model]) -> Result<(), DbErr> {
        if rows.is_empty() {
            return Ok(());
        }
        let rowids = self.place(highest(txn).await?, rows, false);
        match txn.execute_raw(insert_statement(DbBackend::Sqlite, rows, Some(&rowids))).await {
            Err(err) if rowid_taken(&err) => {
                let rowids = self.place(highest(txn).await?, rows, true);
                txn.execute_raw(insert_statement(DbBackend::Sqlite, rows, Some(&rowids))).await?;
            }
            inserted => {
                inserted?;
            }
        }
        Ok(())
    }
}

/// The table's highest rowid (0 when empty).
async fn highest(txn: &DatabaseTransaction) -> Result<i64, DbErr> {
    let highest = Statement::from_string(DbBackend::Sqlite, "SELECT COALESCE(MAX(rowid), 0) AS last FROM job");
    match txn.query_one_raw(highest).await? {
        Some(row) => row.try_get("", "last"),
        None => Ok(0),
    }
}

/// Whether an insert failed on a rowid another writer took (SQLite's
/// `SQLITE_CONSTRAINT_ROWID`, which SeaORM does not tell from other failures).
fn rowid_taken(err: &DbErr) -> bool {
    err.to_string().contains("UNIQUE constraint failed: job.rowid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::NewJob;
    use crate::store::sea::rows::new_row;

    fn job(queue: &str, level: u8) -> job::Model {
        let mut row = new_row(&NewJob { priority: level, ..NewJob::new("ping") });
        row.queue = queue.into();
        row.effective_priority = level.into();
        row
    }

    #[test]
    fn a_level_takes_consecutive_rowids_whatever_comes_between() {
        let placement = Placement::default();
        let rows: Vec<_> = (0..20).map(|n| job("default", (n % 2) as u8)).collect();
        let rowids = placement.place(7, &rows, false);
        let evens: Vec<i64> = rowids.iter().step_by(2).copied().collect();
        let odds: Vec<i64> = rowids.iter().skip(1).step_by(2).copied().collect();
        assert_eq!(evens, (8..18).collect::<Vec<_>>());
        assert_eq!(odds, (8 + RUN..18 + RUN).collect::<Vec<_>>());
        // The next transaction goes on where each run stopped, and other queues cut runs of their own.
        let more = placement.place(17 + RUN, &[job("default", 0), job("other", 0), job("default", 1)], false);
        assert_eq!(more, vec![18, 8 + 2 * RUN, 18 + RUN]);
    }

    #[test]
    fn rows_placed_elsewhere_or_gone_start_runs_after_the_last() {
        let placement = Placement::default();
        assert_eq!(placement.place(0, &[job("default", 0)], false), vec![1]);
        // Someone else inserted beyond anything handed out here.
        assert_eq!(placement.place(RUN + 5, &[job("default", 0)], false), vec![RUN + 6]);
        // The highest row went (a VACUUM renumbered the table).
        assert_eq!(placement.place(3, &[job("default", 0)], false), vec![4]);
        // A run is full: the next is cut from the tail.
        let full: Vec<_> = (0..RUN).map(|_| job("default", 0)).collect();
        let rowids = placement.place(4, &full, false);
        assert_eq!(rowids[RUN as usize - 2], 4 + RUN - 1);
        assert_eq!(rowids.last(), Some(&(4 + RUN)));
        assert_eq!(placement.place(4 + RUN, &[job("default", 0)], false), vec![5 + RUN]);
    }
}
