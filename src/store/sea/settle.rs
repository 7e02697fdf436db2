//! On PostgreSQL, events read for a cursor are handed out only once no event before them can
//! still appear. The sequence gives an event its id before its transaction commits, and
//! writers commit side by side, so a read can see event 7 while event 6's transaction is
//! still open; a cursor moved to 7 would never send 6. Every event is written after its
//! job's row in the same transaction (an update, a lock or the job's insert), which gives
//! the transaction its id before the event draws its own; so a transaction holding an id
//! below a row of a read already had a transaction id once the read was done. Once every
//! transaction of this database that had one then has ended, each id up to the read's last
//! row is committed or gone, and a second read up to that row is complete.
//! (`pg_current_snapshot()` cannot tell: its `xmax` is one past the newest transaction to
//! have ended, and one begun since is in no list.)
//! Sessions of another role are not seen (PostgreSQL hides their transaction ids); the
//! service's own writers all use one. SQLite writes one transaction at a time, so its ids
//! commit in order and need none of this.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::store::StoreError;

/// How long a read waits for the transactions before its rows to end before it gives up and
/// hands out nothing (the cursor reads again on the next change).
const PATIENCE: Duration = Duration::from_secs(5);
/// The first pause between looks at whether those transactions still run; it doubles to
/// [`PAUSE_MAX`].
const PAUSE: Duration = Duration::from_millis(2);
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// Whether the events below rows just read from `db` are all there to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settled {
    /// The rows read are complete (SQLite).
    AsRead,
    /// Every transaction that could hold a lower id has ended: read again up to the last row
    /// read, and that is complete. (One that ended between the read and the look committed
    /// rows the read did not see.)
    ReadAgain,
    /// Some still run after [`PATIENCE`]: hand out nothing yet.
    NotYet,
}

/// Whether rows just read from `db` may be handed out in id order ([`Settled`]): at once on
/// SQLite; on PostgreSQL once every transaction running when they were read has ended.
pub(super) async fn settled(db: &DatabaseConnection) -> Result<Settled, StoreError> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(Settled::AsRead);
    }
    // Asked after the rows were read: the transactions running then, and maybe a few more.
    let look = "SELECT string_agg(backend_xid::text, ',') AS running FROM pg_stat_activity \
                WHERE backend_xid IS NOT NULL AND datname = current_database() AND pid <> pg_backend_pid()";
    let row = db.query_one_raw(Statement::from_string(DbBackend::Postgres, look)).await?;
    let running = row.map(|row| row.try_get::<Option<String>>("", "running")).transpose()?.flatten();
    let Some(running) = running else {
        return Ok(Settled::ReadAgain);
    };
    let check = Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT count(*) AS running FROM pg_stat_activity \
         WHERE backend_xid::text = ANY(string_to_array($1, ',')) AND datname = current_database()",
        [running.into()],
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut pause = PAUSE;
    loop {
        tokio::time::sleep(pause).await;
        let row = db.query_one_raw(check.clone()).await?;
        if row.map(|row| row.try_get::<i64>("", "running")).transpose()?.unwrap_or(0) == 0 {
            return Ok(Settled::ReadAgain);
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Ok(Settled::NotYet);
        }
        pause = (pause * 2).min(PAUSE_MAX);
    }
}
