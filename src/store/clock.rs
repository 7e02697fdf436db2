//! The database's clock. Every time the lifecycle writes (`created_at`, `started_at`, event
//! times, delays) or compares (leases, stalls, timeouts) comes from it, so hosts whose
//! clocks disagree still agree on what is late. In SQL, PostgreSQL's own `CURRENT_TIMESTAMP`
//! is used ([`super::sea`]'s `db_now`); a time computed here is this host's clock corrected
//! by the offset last measured against the database ([`sync`], kept fresh by the
//! `ClockSync` actor). SQLite is embedded: one host, one clock, no offset.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait};

/// Milliseconds to add to this host's clock to read the database's.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Now, by the database's clock.
pub fn now() -> DateTime<Utc> {
    Utc::now() + Duration::milliseconds(OFFSET_MS.load(Ordering::Relaxed))
}

/// The offset in force, in milliseconds (database minus this host).
pub fn offset_ms() -> i64 {
    OFFSET_MS.load(Ordering::Relaxed)
}

/// Round trips [`sync`] takes; the quickest is kept.
const SAMPLES: usize = 5;

/// Measures the database's clock against this host's and keeps the difference; returns it
/// in milliseconds. Each read is taken to have happened halfway through its round trip, and
/// of [`SAMPLES`] reads the one with the shortest round trip is kept (NTP's filter): a
/// single round trip that this process was slow to resume after (a loaded machine) puts its
/// midpoint late by half the delay, and every time written from this host early by as much.
pub async fn sync(db: &DatabaseConnection) -> Result<i64, DbErr> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(0);
    }
    let sql = "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)";
    // The connection is taken first, so only the queries' round trips are timed (a wait for
    // the pool would skew the midpoint).
    let txn = db.begin().await?;
    let mut best: Option<(Duration, i64)> = None;
    for _ in 0..SAMPLES {
        let before = Utc::now();
        let row = txn.query_one_raw(Statement::from_string(DbBackend::Postgres, sql)).await?;
        let after = Utc::now();
        let database_ms: i64 =
            row.ok_or_else(|| DbErr::Custom("the clock query returned no row".into()))?.try_get_by_index(0)?;
        let midpoint = before + (after - before) / 2;
        let sample = (after - before, database_ms - midpoint.timestamp_millis());
        if best.is_none_or(|(round_trip, _)| sample.0 < round_trip) {
            best = Some(sample);
        }
    }
    txn.commit().await?;
    let offset = best.map_or(0, |(_, offset)| offset);
    OFFSET_MS.store(offset, Ordering::Relaxed);
    Ok(offset)
}
