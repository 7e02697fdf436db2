//! The queues' per-minute rollup (`queue_minute`), which the dashboard draws. Every process
//! counts what it commits ([`RollupWatch`], an observer of the store: runs started, jobs
//! ended, first runs' waits) by minute, queue and room, and adds it to the table every
//! [`FLUSH`] ([`Rollup::flush`], each row locked while it is added to, so processes add up);
//! API processes also sample the waiting depth, held and running jobs and the pauses every
//! [`SAMPLE`]. Rows older than [`KEEP`] are deleted: the table stays a few hours long
//! whatever the traffic. A process killed -9 loses what it counted since its last flush.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, LockType, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter,
    QuerySelect,
};
use tracing::warn;

use super::entity::queue_minute;
use super::QueuePauses;
use crate::domain::{EventName, Job, JobStatus};
use crate::store::{clock, Change, Observer, WriteGate};

/// How often a process adds what it counted.
pub const FLUSH: Duration = Duration::from_secs(5);
/// How often an API process samples the queues.
pub const SAMPLE: Duration = Duration::from_secs(10);
/// How long rows are kept.
pub const KEEP: chrono::Duration = chrono::Duration::hours(3);
/// Minutes a chart shows.
pub const MINUTES: usize = 60;

/// Waits are counted in buckets an eighth of a doubling wide (9%): bucket 0 holds waits
/// under a millisecond, bucket `k` those from 2^((k-1)/8) ms to 2^(k/8) ms.
pub fn bucket(wait: chrono::Duration) -> u16 {
    let ms = wait.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0;
    if ms < 1.0 {
        return 0;
    }
    ((ms.log2() * 8.0).floor() as u16 + 1).min(8 * 40)
}

/// A bucket's middle, in milliseconds.
pub fn middle(bucket: u16) -> f64 {
    match bucket {
        0 => 0.5,
        k => 2f64.powf((f64::from(k) - 0.5) / 8.0),
    }
}

/// The start of `at`'s minute.
pub fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    let seconds = at.timestamp();
    DateTime::from_timestamp(seconds - seconds.rem_euclid(60), 0).unwrap_or(at)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    minute: DateTime<Utc>,
    queue: String,
    room: String,
}

#[derive(Debug, Default, Clone)]
struct Tally {
    started: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
    waits: BTreeMap<u16, i64>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.started += other.started;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
        for (bucket, count) in &other.waits {
            *self.waits.entry(*bucket).or_default() += count;
        }
    }
}

type Tallies = Arc<Mutex<BTreeMap<Key, Tally>>>;

/// Counts this process's commits by minute, queue and room.
pub struct RollupWatch {
    tallies: Tallies,
}

impl RollupWatch {
    /// The watch, and the counts it keeps, for [`Rollup::new`].
    pub fn new() -> (RollupWatch, Counted) {
        let tallies = Tallies::default();
        (RollupWatch { tallies: tallies.clone() }, Counted(tallies))
    }
}

/// What a [`RollupWatch`] counted, not yet added to the table.
pub struct Counted(Tallies);

impl Observer for RollupWatch {
    /// Counted within the commit by minute, queue and room first, then added to the shared
    /// counts once per group: a commit of 64 jobs of one queue copies its names once, not
    /// twice per job.
    fn committed(&self, changes: &[Change<'_>]) {
        let mut counts: Counts<'_> = Vec::new();
        for change in changes {
            let Change::Moved { job, was, event } = change else { continue };
            if *event == EventName::STARTED {
                if let Some(started) = job.started_at {
                    let tally = tally_of(&mut counts, job, started);
                    tally.started += 1;
                    if job.attempts <= 1 {
                        let due = job.run_after.map_or(job.created_at, |after| after.max(job.created_at));
                        *tally.waits.entry(bucket(started - due)).or_default() += 1;
                    }
                }
            }
            if job.status.is_terminal() && was.iter().any(|status| !status.is_terminal()) {
                let tally = tally_of(&mut counts, job, job.finished_at.unwrap_or_else(clock::now));
                match job.status {
                    JobStatus::Succeeded => tally.succeeded += 1,
                    JobStatus::Failed => tally.failed += 1,
                    _ => tally.cancelled += 1,
                }
            }
        }
        if counts.is_empty() {
            return;
        }
        let mut tallies = self.tallies.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for ((minute, queue, room), tally) in counts {
            let key = Key { minute, queue: queue.to_owned(), room: room.to_owned() };
            tallies.entry(key).or_default().add(&tally);
        }
    }
}

/// One commit's counts, by minute, queue and room (names borrowed from its jobs).
type Counts<'j> = Vec<((DateTime<Utc>, &'j str, &'j str), Tally)>;

/// The tally of `job`'s queue and room in the minute of `at`, made if it is the first.
fn tally_of<'c, 'j>(counts: &'c mut Counts<'j>, job: &'j Job, at: DateTime<Utc>) -> &'c mut Tally {
    let slot = (minute_of(at), job.queue.as_str(), job.room.as_str());
    let at = match counts.iter().position(|(seen, _)| *seen == slot) {
        Some(at) => at,
        None => {
            counts.push((slot, Tally::default()));
            counts.len() - 1
        }
    };
    &mut counts[at].1
}

/// Adds the counts to the table, and samples the queues.
pub struct Rollup {
    db: DatabaseConnection,
    gate: WriteGate,
    tallies: Tallies,
}

impl Rollup {
    pub fn new(db: DatabaseConnection, gate: WriteGate, counted: Counted) -> Arc<Rollup> {
        Arc::new(Rollup { db, gate, tallies: counted.0 })
    }

    /// Flushes every [`FLUSH`] for the life of the process; with `pauses` (an API
    /// process), samples the queues every [`SAMPLE`] too.
    pub fn start(self: &Arc<Self>, pauses: Option<Arc<QueuePauses>>) {
        let rollup = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FLUSH).await;
                if let Err(err) = rollup.flush().await {
                    warn!(error = %err, "queue figures not added; trying again");
                }
            }
        });
        let Some(pauses) = pauses else { return };
        let rollup = self.clone();
        tokio::spawn(async move {
            let mut last = BTreeSet::new();
            loop {
                match rollup.sample(&pauses, &last).await {
                    Ok(sampled) => last = sampled,
                    Err(err) => warn!(error = %err, "queues not sampled"),
                }
                tokio::time::sleep(SAMPLE).await;
            }
        });
    }

    /// Adds what this process counted since the last flush; on failure keeps it for the
    /// next.
    pub async fn flush(&self) -> Result<(), DbErr> {
        let taken = std::mem::take(&mut *self.tallies.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        if taken.is_empty() {
            return Ok(());
        }
        let written = self.add(&taken).await;
        if written.is_err() {
            let mut tallies = self.tallies.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            for (key, tally) in taken {
                tallies.entry(key).or_default().add(&tally);
            }
        }
        written
    }

    async fn add(&self, tallies: &BTreeMap<Key, Tally>) -> Result<(), DbErr> {
        let txn = self.gate.begin(&self.db).await?;
        for (key, tally) in tallies {
            let mut row = ensure(&*txn, key).await?;
            let mut waits: BTreeMap<u16, i64> = serde_json::from_str(&row.waits).unwrap_or_default();
            for (bucket, count) in &tally.waits {
                *waits.entry(*bucket).or_default() += count;
            }
            row.started += tally.started;
            row.succeeded += tally.succeeded;
            row.failed += tally.failed;
            row.cancelled += tally.cancelled;
            queue_minute::Entity::update_many()
                .col_expr(queue_minute::Column::Started, Expr::value(row.started))
                .col_expr(queue_minute::Column::Succeeded, Expr::value(row.succeeded))
                .col_expr(queue_minute::Column::Failed, Expr::value(row.failed))
                .col_expr(queue_minute::Column::Cancelled, Expr::value(row.cancelled))
                .col_expr(queue_minute::Column::Waits, Expr::value(serde_json::to_string(&waits).unwrap_or_default()))
                .filter(matches(key))
                .exec(&*txn)
                .await?;
        }
        txn.commit().await
    }

    /// Samples the queues' depth, held and running jobs by room, and the pauses, into this
    /// minute's rows; a queue and room sampled last time and empty now gets zeros. Deletes
    /// rows past [`KEEP`]. Returns what it sampled.
    async fn sample(
        &self,
        pauses: &QueuePauses,
        last: &BTreeSet<(String, String)>,
    ) -> Result<BTreeSet<(String, String)>, DbErr> {
        use crate::store::entity::job::{Column, Entity};
        // A look for each status, each reading its index: the status indexes for queued
        // jobs, and on SQLite `ix_job_running_lease` for running ones (migration 37).
        let look = |status: JobStatus| {
            Entity::find()
                .select_only()
                .column(Column::Queue)
                .column(Column::Room)
                .filter(Expr::cust(crate::store::of_status(status)))
                .group_by(Column::Queue)
                .group_by(Column::Room)
        };
        let queued: Vec<(String, String, i64, i64)> = look(JobStatus::Queued)
            .column_as(Expr::cust("SUM(CASE WHEN held_since IS NULL THEN 1 ELSE 0 END)"), "depth")
            .column_as(Expr::cust("SUM(CASE WHEN held_since IS NOT NULL THEN 1 ELSE 0 END)"), "held")
            .into_tuple()
            .all(&self.db)
            .await?;
        let running: Vec<(String, String, i64)> =
            look(JobStatus::Running).column_as(Expr::cust("COUNT(*)"), "running").into_tuple().all(&self.db).await?;
        let mut figures: BTreeMap<(String, String), [i64; 3]> = BTreeMap::new();
        for (queue, room, depth, held) in queued {
            let sample = figures.entry((queue, room)).or_default();
            (sample[0], sample[1]) = (depth, held);
        }
        for (queue, room, running) in running {
            figures.entry((queue, room)).or_default()[2] = running;
        }
        let paused: Vec<String> = pauses.all().await.map(|paused| paused.keys().cloned().collect()).unwrap_or_default();
        let now = clock::now();
        let minute = minute_of(now);
        // Every write of this sample, in key order: a flush locks rows in the same order,
        // so the two never wait for each other in a circle.
        let mut writes: BTreeMap<(String, String), Option<[i64; 3]>> = BTreeMap::new();
        for (key, sample) in figures {
            writes.insert(key, Some(sample));
        }
        let sampled: BTreeSet<(String, String)> = writes.keys().cloned().collect();
        for emptied in last.difference(&sampled) {
            writes.insert(emptied.clone(), Some([0, 0, 0]));
        }
        for queue in paused {
            writes.insert((queue, String::new()), None);
        }
        let txn = self.gate.begin(&self.db).await?;
        for ((queue, room), sample) in writes {
            let key = Key { minute, queue, room };
            match sample {
                Some(sample) => set_sample(&*txn, &key, sample).await?,
                None => {
                    ensure(&*txn, &key).await?;
                    queue_minute::Entity::update_many()
                        .col_expr(queue_minute::Column::Paused, Expr::value(true))
                        .filter(matches(&key))
                        .exec(&*txn)
                        .await?;
                }
            }
        }
        queue_minute::Entity::delete_many().filter(queue_minute::Column::Minute.lt(now - KEEP)).exec(&*txn).await?;
        txn.commit().await?;
        Ok(sampled)
    }
}

fn matches(key: &Key) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(queue_minute::Column::Minute.eq(key.minute))
        .add(queue_minute::Column::Queue.eq(key.queue.as_str()))
        .add(queue_minute::Column::Room.eq(key.room.as_str()))
}

/// The row of `key`, made if missing, locked on PostgreSQL until the transaction ends.
async fn ensure<C: ConnectionTrait>(db: &C, key: &Key) -> Result<queue_minute::Model, DbErr> {
    let row = queue_minute::ActiveModel {
        minute: Set(key.minute),
        queue: Set(key.queue.clone()),
        room: Set(key.room.clone()),
        ..Default::default()
    };
    let conflict =
        OnConflict::columns([queue_minute::Column::Minute, queue_minute::Column::Queue, queue_minute::Column::Room])
            .do_nothing()
            .to_owned();
    queue_minute::Entity::insert(row).on_conflict(conflict).exec_without_returning(db).await?;
    let mut read = queue_minute::Entity::find().filter(matches(key));
    if db.get_database_backend() == DbBackend::Postgres {
        read = read.lock(LockType::Update);
    }
    read.one(db).await?.ok_or_else(|| DbErr::RecordNotFound(format!("queue_minute {key:?}")))
}

async fn set_sample<C: ConnectionTrait>(db: &C, key: &Key, [depth, held, running]: [i64; 3]) -> Result<(), DbErr> {
    ensure(db, key).await?;
    queue_minute::Entity::update_many()
        .col_expr(queue_minute::Column::Depth, Expr::value(depth))
        .col_expr(queue_minute::Column::Held, Expr::value(held))
        .col_expr(queue_minute::Column::Running, Expr::value(running))
        .filter(matches(key))
        .exec(db)
        .await?;
    Ok(())
}

/// One minute of a queue, its rooms added up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Minute {
    pub started: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub depth: Option<i64>,
    pub held: Option<i64>,
    pub running: Option<i64>,
    pub paused: bool,
    /// Waits from submission to a first run's start, in milliseconds.
    pub wait_p50_ms: Option<f64>,
    pub wait_p99_ms: Option<f64>,
}

/// The last [`MINUTES`] minutes to `now` (the current one last) of every queue with rows,
/// in `rooms` (every room when `None`; a queue's pauses whatever the rooms).
pub async fn hour(
    db: &DatabaseConnection,
    now: DateTime<Utc>,
    rooms: Option<&[String]>,
) -> Result<BTreeMap<String, Vec<Minute>>, DbErr> {
    let last = minute_of(now);
    let first = last - chrono::Duration::minutes(MINUTES as i64 - 1);
    let mut read = queue_minute::Entity::find().filter(queue_minute::Column::Minute.gte(first));
    if let Some(rooms) = rooms {
        let visible = rooms.iter().map(String::as_str).chain([""]);
        read = read.filter(queue_minute::Column::Room.is_in(visible));
    }
    let rows = read.all(db).await?;
    let mut waits: HashMap<(String, usize), BTreeMap<u16, i64>> = HashMap::new();
    let mut queues: BTreeMap<String, Vec<Minute>> = BTreeMap::new();
    for row in rows {
        let at = ((row.minute - first).num_minutes().max(0) as usize).min(MINUTES - 1);
        let minute = &mut queues.entry(row.queue.clone()).or_insert_with(|| vec![Minute::default(); MINUTES])[at];
        minute.started += row.started;
        minute.succeeded += row.succeeded;
        minute.failed += row.failed;
        minute.cancelled += row.cancelled;
        let sum = |total: Option<i64>, more: Option<i64>| match (total, more) {
            (None, None) => None,
            (total, more) => Some(total.unwrap_or(0) + more.unwrap_or(0)),
        };
        minute.depth = sum(minute.depth, row.depth);
        minute.held = sum(minute.held, row.held);
        minute.running = sum(minute.running, row.running);
        minute.paused |= row.paused;
        let merged = waits.entry((row.queue, at)).or_default();
        for (bucket, count) in serde_json::from_str::<BTreeMap<u16, i64>>(&row.waits).unwrap_or_default() {
            *merged.entry(bucket).or_default() += count;
        }
    }
    for ((queue, at), histogram) in waits {
        if let Some(minute) = queues.get_mut(&queue).map(|minutes| &mut minutes[at]) {
            minute.wait_p50_ms = quantile(&histogram, 0.5);
            minute.wait_p99_ms = quantile(&histogram, 0.99);
        }
    }
    Ok(queues)
}

/// The `q` quantile of a histogram of waits, as its bucket's middle.
pub fn quantile(histogram: &BTreeMap<u16, i64>, q: f64) -> Option<f64> {
    let total: i64 = histogram.values().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (bucket, count) in histogram {
        seen += count;
        if seen >= rank {
            return Some(middle(*bucket));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_an_eighth_of_a_doubling() {
        let ms = |ms: i64| chrono::Duration::milliseconds(ms);
        assert_eq!(bucket(chrono::Duration::microseconds(300)), 0);
        assert_eq!(bucket(ms(1)), 1);
        assert_eq!(bucket(ms(2)), 9);
        for wait in [3, 17, 250, 1_000, 65_000, 3_600_000] {
            let middle = middle(bucket(ms(wait)));
            let error = (middle - wait as f64).abs() / wait as f64;
            assert!(error < 0.05, "{wait} ms read back as {middle}");
        }
        let histogram = BTreeMap::from([(bucket(ms(10)), 98), (bucket(ms(1000)), 2)]);
        assert!((quantile(&histogram, 0.5).unwrap() - 10.0).abs() < 0.5);
        assert!((quantile(&histogram, 0.99).unwrap() - 1000.0).abs() < 50.0);
        assert_eq!(minute_of("2026-11-27T17:21:59.9Z".parse().unwrap()).to_rfc3339(), "2026-11-27T17:21:00+00:00");
    }
}
