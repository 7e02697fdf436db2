//! Admission under limits. A job subject to a limit is admitted (sent, claimable) only
//! while its limit has room, counted in the transaction that decides, with the limit's
//! key locked (an advisory lock on PostgreSQL; SQLite's write lock is the store's):
//!
//! - `max_running` N: the limit's admitted jobs that are QUEUED or RUNNING stay at most N,
//!   so its RUNNING ones do, whichever process claims them;
//! - `rate` N per P: its starts in the last P plus its admitted jobs not yet started stay
//!   at most N, so no window of P sees more than N starts (the last job admitted before a
//!   window's end was counted with every start before it and every job admitted ahead).
//!   Starts are those of the jobs submitted or released while the limit had its rate
//!   (`rate_key`), so a limit with no rate adds no entry to the index of starts; a rate
//!   added to a running deployment counts the starts of the jobs admitted after it.
//!
//! The rest are held (`held_since`), QUEUED with a `job.held` event naming the limit, in
//! no line and unsent, until [`DispatchBook::release`] admits them, by level, then age.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Alias, Expr, ExprTrait as _, Query, QueryStatementBuilder as _, SelectStatement};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, QueryTrait, Select, Statement,
};
use serde_json::json;
use uuid::Uuid;

use super::rows::to_chrono;
use super::{owned_event_row, SeaStore};
use crate::domain::{EventLevel, EventName, Limit, NewEvent};
use crate::store::entity::{job, job_event};
use crate::store::types::level;
use crate::store::{clock, Dispatch, Released, StoreError};

/// Serialises the decisions of one key (a limit's, a unique job's) until the transaction
/// ends. SQLite has one writer at a time already.
pub(super) async fn lock(txn: &DatabaseTransaction, key: &str) -> Result<(), DbErr> {
    if txn.get_database_backend() == DbBackend::Postgres {
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))::text",
            [key.into()],
        );
        txn.query_one_raw(statement).await?;
    }
    Ok(())
}

/// `key`'s admitted jobs that are QUEUED (or also RUNNING), as read from the partial index
/// of admitted jobs.
fn admitted_jobs(key: &str, running_too: bool) -> Select<job::Entity> {
    let admitted = job::Entity::find()
        .select_only()
        // Literals, so both engines read the partial index of admitted jobs: its term is
        // `finished_at IS NULL` on SQLite (migration 36), the status on PostgreSQL; a job
        // not yet ended is QUEUED or RUNNING, so either term alone says the same.
        .filter(Expr::cust(
            "limit_key IS NOT NULL AND held_since IS NULL AND finished_at IS NULL AND status IN ('queued', 'running')",
        ))
        .filter(job::Column::LimitKey.eq(key));
    match running_too {
        true => admitted,
        false => admitted.filter(Expr::cust("status = 'queued'")),
    }
}

/// Admitted jobs of `key` that are QUEUED or RUNNING, counted up to `most` in the
/// database: a limit far above what runs counts its many admitted jobs without a row each
/// coming back.
async fn admitted(txn: &DatabaseTransaction, key: &str, most: u64) -> Result<u64, DbErr> {
    let admitted = admitted_jobs(key, true).expr(Expr::val(1)).limit(most).into_query();
    let count = Query::select().expr(Expr::cust("COUNT(*)")).from_subquery(admitted, Alias::new("admitted")).to_owned();
    count_of(txn, &count).await
}

/// The one count `statement` reads.
async fn count_of(txn: &DatabaseTransaction, statement: &SelectStatement) -> Result<u64, DbErr> {
    let row = txn.query_one(statement).await?.ok_or_else(|| DbErr::RecordNotFound("a count".into()))?;
    Ok(u64::try_from(row.try_get_by_index::<i64>(0)?).unwrap_or(0))
}

/// The jobs whose starts `key`'s rate counts that started since `since` (their last starts:
/// a run started again within the window counts once), as read from the partial index of
/// starts under rates.
fn starts(key: &str, since: DateTime<Utc>) -> Select<job::Entity> {
    job::Entity::find()
        .select_only()
        // Literals, so both engines read the partial index of starts under rates.
        .filter(Expr::cust("rate_key IS NOT NULL AND started_at IS NOT NULL"))
        .filter(job::Column::RateKey.eq(key))
        .filter(job::Column::StartedAt.gt(since))
}

/// The starts of `key`'s jobs since `since`, oldest first.
async fn starts_since(txn: &DatabaseTransaction, key: &str, since: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, DbErr> {
    starts(key, since)
        .column(job::Column::StartedAt)
        .order_by_asc(job::Column::StartedAt)
        .into_tuple::<DateTime<Utc>>()
        .all(txn)
        .await
}

/// How many more of a limit's jobs each of its bounds admits now.
struct Room {
    running: Option<u64>,
    rate: Option<u64>,
    /// When none may be admitted and a rate is what binds: how long until one may.
    later: Option<Duration>,
}

impl Room {
    fn left(&self) -> u64 {
        Ord::min(self.running.unwrap_or(u64::MAX), self.rate.unwrap_or(u64::MAX))
    }

    /// One job admitted.
    fn take(&mut self) {
        for bound in [&mut self.running, &mut self.rate].into_iter().flatten() {
            *bound = bound.saturating_sub(1);
        }
    }

    /// What holds a job now: the bound with no room, or the jobs held already.
    fn holder(&self) -> &'static str {
        match (self.running, self.rate) {
            (Some(0), _) => "max_running",
            (_, Some(0)) => "rate",
            _ => "held_jobs",
        }
    }
}

/// How many more of `limit`'s jobs may be admitted now, by bound.
async fn room(txn: &DatabaseTransaction, limit: &Limit) -> Result<Room, DbErr> {
    let mut room = Room { running: None, rate: None, later: None };
    if let Some(most) = limit.max_running {
        let most = u64::from(most);
        room.running = Some(most.saturating_sub(admitted(txn, &limit.key, most).await?));
    }
    if let Some(rate) = limit.rate {
        let most = u64::from(rate.starts);
        let now = clock::now();
        let since = now - to_chrono(rate.per);
        // One statement, one snapshot: a job claimed meanwhile is counted once, as waiting
        // or as started, never as neither.
        let waiting = admitted_jobs(&limit.key, false).expr(Expr::cust("COUNT(*)")).into_query();
        let started = starts(&limit.key, since)
            .expr(Expr::cust("COUNT(*)"))
            .filter(Expr::cust("NOT (status = 'queued' AND held_since IS NULL)"))
            .into_query();
        let sum = Query::select()
            .expr(
                Expr::SubQuery(None, Box::new(waiting.into_sub_query_statement()))
                    .add(Expr::SubQuery(None, Box::new(started.into_sub_query_statement()))),
            )
            .to_owned();
        let used = count_of(txn, &sum).await?;
        room.rate = Some(most.saturating_sub(used));
        let starts = starts_since(txn, &limit.key, since).await?;
        let waiting = used.saturating_sub(starts.len() as u64);
        if used >= most && waiting < most {
            // Room comes when enough starts leave the window: the oldest of those.
            let leaving = (used + 1 - most) as usize;
            if let Some(start) = starts.get(leaving - 1) {
                let at = *start + to_chrono(rate.per);
                room.later = Some((at - now).to_std().unwrap_or_default() + Duration::from_millis(1));
            }
        }
    }
    Ok(room)
}

/// Whether jobs of `key` are held (not those waiting for their dependencies, which the
/// limit does not admit yet): a new one then waits behind them. One row of the index of
/// held jobs, at most.
async fn any_held<C: ConnectionTrait>(db: &C, key: &str) -> Result<bool, DbErr> {
    let held = job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        // Literals, so both engines read the partial index of held jobs.
        .filter(Expr::cust("held_since IS NOT NULL AND waiting_since IS NULL AND status = 'queued'"))
        .filter(job::Column::LimitKey.eq(key))
        .limit(1)
        .into_tuple::<Uuid>()
        .one(db)
        .await?;
    Ok(held.is_some())
}

/// What holds a job: the limit's rule and partition, and which bound.
fn held_event(limit: &Limit, by: &str) -> NewEvent {
    let (rule, concurrency_key) = Limit::split(&limit.key);
    let mut fields = json!({ "limit": rule, "concurrency_key": concurrency_key, "by": by });
    if let Some(most) = limit.max_running {
        fields["max_running"] = json!(most);
    }
    if let Some(rate) = limit.rate {
        fields["rate"] = json!({ "starts": rate.starts, "per_seconds": rate.per.as_secs_f64() });
    }
    let message = match by {
        "rate" => format!("held by {rule}: its rate is used up"),
        "max_running" => format!("held by {rule}: as many of its jobs run as it allows"),
        _ => format!("held by {rule}: behind the jobs it holds already"),
    };
    NewEvent::new(EventName::HELD).message(message).fields(fields).level(EventLevel::Info)
}

/// Decides, for rows about to be inserted, which their limits admit: each limit's rows in
/// order, while it has room and none of its jobs is held already (a new job waits behind
/// those). The others are marked held; returns their `job.held` events, to be written
/// with the rows.
pub(super) async fn admit(
    txn: &DatabaseTransaction,
    rows: &mut [job::Model],
    limits: &[Option<&Limit>],
) -> Result<Vec<job_event::ActiveModel>, DbErr> {
    let mut events = Vec::new();
    let mut decided: Vec<&str> = Vec::new();
    for (at, limit) in limits.iter().enumerate() {
        let Some(limit) = limit else { continue };
        if decided.contains(&limit.key.as_str()) {
            continue;
        }
        decided.push(&limit.key);
        lock(txn, &limit.key).await?;
        // Behind jobs it holds already, a new one waits its turn, room or not.
        let behind = any_held(txn, &limit.key).await?;
        let mut room = room(txn, limit).await?;
        let now = clock::now();
        for (row, of) in rows.iter_mut().zip(limits).skip(at) {
            if of.is_none_or(|of| of.key != limit.key) {
                continue;
            }
            match behind || room.left() == 0 {
                true => {
                    row.held_since = Some(now);
                    row.published_at = None;
                    events.push(owned_event_row(row.id, held_event(limit, room.holder())));
                }
                false => room.take(),
            }
        }
    }
    Ok(events)
}

impl SeaStore {
    pub(super) async fn release_once(&self, limit: &Limit) -> Result<Released, StoreError> {
        // Most looks find nothing held: answered from the index of held jobs, no lock taken.
        if !any_held(&self.db, &limit.key).await? {
            return Ok(Released { nothing_held: true, ..Released::default() });
        }
        let txn = self.write_txn().await?;
        lock(&txn, &limit.key).await?;
        let room = room(&txn, limit).await?;
        if room.left() == 0 {
            return Ok(Released { jobs: Vec::new(), retry_in: room.later, nothing_held: false });
        }
        let held: Vec<(Uuid, String, i32, i16)> = job::Entity::find()
            .select_only()
            .columns([job::Column::Id, job::Column::Queue, job::Column::Attempts, job::Column::EffectivePriority])
            // Literals, so both engines read the partial index of held jobs.
            .filter(Expr::cust("held_since IS NOT NULL AND waiting_since IS NULL AND status = 'queued'"))
            .filter(job::Column::LimitKey.eq(&limit.key))
            .order_by_asc(job::Column::EffectivePriority)
            .order_by_asc(job::Column::Id)
            .limit(Ord::min(room.left(), 10_000))
            .into_tuple()
            .all(&*txn)
            .await?;
        if held.is_empty() {
            return Ok(Released { jobs: Vec::new(), retry_in: None, nothing_held: true });
        }
        let ids: Vec<Uuid> = held.iter().map(|(id, ..)| *id).collect();
        // Admitted under a rate, a job's start counts toward it, whenever it was submitted.
        let rate_key = limit.rate.map(|_| limit.key.clone());
        job::Entity::update_many()
            .col_expr(job::Column::HeldSince, Expr::value(None::<DateTime<Utc>>))
            .col_expr(job::Column::RateKey, Expr::value(rate_key))
            .filter(job::Column::Id.is_in(ids))
            .filter(Expr::cust("held_since IS NOT NULL AND waiting_since IS NULL AND status = 'queued'"))
            .exec(&*txn)
            .await?;
        txn.commit().await?;
        let jobs = held
            .into_iter()
            .map(|(id, queue, attempts, stored)| Dispatch { id, queue, attempts, priority: level(stored) })
            .collect();
        Ok(Released { jobs, retry_in: None, nothing_held: false })
    }

    /// The limits that hold jobs now, with how many each holds.
    pub(super) async fn holding_once(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let held = job::Entity::find()
            .select_only()
            .column(job::Column::LimitKey)
            .column_as(Expr::cust("COUNT(*)"), "held")
            .filter(Expr::cust("held_since IS NOT NULL AND waiting_since IS NULL AND status = 'queued'"))
            .group_by(job::Column::LimitKey)
            .into_tuple::<(Option<String>, i64)>()
            .all(&self.db)
            .await?;
        Ok(held.into_iter().filter_map(|(key, held)| Some((key?, held))).collect())
    }
}
