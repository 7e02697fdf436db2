//! Every SQL statement about remote workers: register (with the types served), renew
//! (a compare-and-set on `gone_at IS NULL` by the token that registered it), leave, the
//! live-worker check a submission makes, and the sweeper's marking of silent workers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect};
use serde::Serialize;
use uuid::Uuid;

use super::entity::{remote_worker, remote_worker_type};
use crate::store::{clock, WriteGate};

/// Most workers [`WorkerBook`] remembers before it drops the stale ones.
const MAX_REMEMBERED: usize = 10_000;

/// A worker as its registration and heartbeats answer it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WorkerInfo {
    pub id: Uuid,
    pub name: String,
    /// The types it serves (full names).
    pub types: Vec<String>,
    /// The upload services whose scripts it runs.
    pub services: Vec<String>,
    pub registered_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    /// It is gone (its tasks go back to the queue) unless heard from before this.
    pub expires_at: DateTime<Utc>,
    /// Seconds between heartbeats that keep it and its tasks' leases alive.
    pub heartbeat_seconds: u64,
    /// Seconds a claim leases its task.
    pub lease_seconds: u64,
}

/// Why a worker's request is refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("no worker {0}")]
    NotFound(Uuid),
    #[error("worker {0} was registered by another token")]
    NotYours(Uuid),
    #[error("worker {0} is gone (silent past its deadline, or it left): register again")]
    Gone(Uuid),
    #[error(transparent)]
    Database(#[from] DbErr),
}

/// A live worker, as a request of it found it.
#[derive(Debug, Clone)]
pub struct LiveWorker {
    pub id: Uuid,
    /// What it serves: registered types by full name, and upload services as
    /// [`SERVICE_PREFIX`]`name`.
    pub types: Vec<String>,
}

/// How a served upload service is recorded among a worker's types (no type's room starts
/// with `@scripts`, so none can clash).
pub const SERVICE_PREFIX: &str = "@scripts:";

impl LiveWorker {
    /// The upload services it runs scripts of.
    pub fn services(&self) -> Vec<String> {
        self.types.iter().filter_map(|name| name.strip_prefix(SERVICE_PREFIX)).map(str::to_owned).collect()
    }

    pub fn serves_service(&self, service: &str) -> bool {
        self.types.iter().any(|name| name.strip_prefix(SERVICE_PREFIX) == Some(service))
    }

    /// What its claims write to `job.owner`.
    pub fn owner(&self) -> String {
        owner(self.id)
    }
}

/// `job.owner` of a remote worker's runs.
pub fn owner(id: Uuid) -> String {
    format!("remote:{id}")
}

/// What this process knows of a live worker it saw lately.
struct Seen {
    token: Uuid,
    types: Vec<String>,
    /// When it was last found live (by a check or a renewal).
    checked: Instant,
    /// When this process last moved its deadline; a check does not.
    renewed: Option<Instant>,
}

/// Live workers seen lately, by id.
type Recent = HashMap<Uuid, Seen>;

pub struct WorkerBook {
    db: DatabaseConnection,
    /// The store's write turn: on SQLite the registry's writes queue with the job store's
    /// instead of meeting them in SQLite's busy handler.
    gate: WriteGate,
    ttl: Duration,
    /// Workers this process found live lately, with when: a claim or report within
    /// [`WorkerBook::fresh`] of that reads no row (a worker gone since counts within it).
    recent: Mutex<Recent>,
}

impl WorkerBook {
    pub fn new(db: DatabaseConnection, gate: WriteGate, ttl: Duration) -> Self {
        WorkerBook { db, gate, ttl, recent: Mutex::default() }
    }

    /// How long a live worker is taken as such without a read: a quarter of its deadline.
    fn fresh(&self) -> Duration {
        self.ttl / 4
    }

    /// The worker, if this process found it live within [`WorkerBook::fresh`] (`renewed`:
    /// and moved its deadline within it, which a check does not).
    fn remembered(&self, id: Uuid, token: Uuid, renewed: bool) -> Option<LiveWorker> {
        let recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let seen = recent.get(&id)?;
        let at = if renewed { seen.renewed? } else { seen.checked };
        (seen.token == token && at.elapsed() < self.fresh()).then(|| LiveWorker { id, types: seen.types.clone() })
    }

    fn remember(&self, token: Uuid, worker: &LiveWorker, renewed: bool) {
        let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() >= MAX_REMEMBERED {
            let fresh = self.fresh();
            recent.retain(|_, seen| seen.checked.elapsed() < fresh);
        }
        let now = Instant::now();
        let before = recent.get(&worker.id).filter(|seen| seen.token == token).and_then(|seen| seen.renewed);
        let seen = Seen {
            token,
            types: worker.types.clone(),
            checked: now,
            renewed: if renewed { Some(now) } else { before },
        };
        recent.insert(worker.id, seen);
    }

    fn forget(&self, id: Uuid) {
        self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&id);
    }

    /// [`WorkerBook::renew`], unless this process renewed it within [`WorkerBook::fresh`]
    /// (a claim: its deadline is far off). A check in between does not count: a worker that
    /// only claims and reports would otherwise outlive its deadline unrenewed.
    pub async fn renew_lately(&self, id: Uuid, token: Uuid) -> Result<LiveWorker, WorkerError> {
        match self.remembered(id, token, true) {
            Some(worker) => Ok(worker),
            None => self.renew(id, token).await,
        }
    }

    /// [`WorkerBook::check`], unless this process found it live within
    /// [`WorkerBook::fresh`] (a report).
    pub async fn check_lately(&self, id: Uuid, token: Uuid) -> Result<LiveWorker, WorkerError> {
        match self.remembered(id, token, false) {
            Some(worker) => Ok(worker),
            None => self.check(id, token).await,
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn deadline(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono::Duration::from_std(self.ttl).unwrap_or_default()
    }

    /// Registers a worker of `token` serving `types` (full names, and services as
    /// [`SERVICE_PREFIX`]`name`), in one transaction.
    pub async fn register(&self, token: Uuid, name: &str, types: &[String]) -> Result<(Uuid, DateTime<Utc>), DbErr> {
        let (id, now) = (Uuid::now_v7(), clock::now());
        let expires_at = self.deadline(now);
        let txn = self.gate.begin(&self.db).await?;
        let row = remote_worker::ActiveModel {
            id: Set(id),
            token_id: Set(token),
            name: Set(name.to_owned()),
            registered_at: Set(now),
            last_seen_at: Set(now),
            expires_at: Set(expires_at),
            gone_at: Set(None),
        };
        remote_worker::Entity::insert(row).exec_without_returning(&txn).await?;
        let served = types
            .iter()
            .map(|name| remote_worker_type::ActiveModel { worker_id: Set(id), type_name: Set(name.clone()) });
        remote_worker_type::Entity::insert_many(served).exec_without_returning(&txn).await?;
        txn.commit().await?;
        Ok((id, expires_at))
    }

    /// A sign of life from worker `id`, speaking with `token`: its deadline moves on. Only
    /// while it is not gone (a compare-and-set); a gone, unknown or foreign worker is an
    /// error.
    pub async fn renew(&self, id: Uuid, token: Uuid) -> Result<LiveWorker, WorkerError> {
        let now = clock::now();
        let renewed = remote_worker::Entity::update_many()
            .col_expr(remote_worker::Column::LastSeenAt, Expr::value(now))
            .col_expr(remote_worker::Column::ExpiresAt, Expr::value(self.deadline(now)))
            .filter(remote_worker::Column::Id.eq(id))
            .filter(remote_worker::Column::TokenId.eq(token))
            .filter(remote_worker::Column::GoneAt.is_null());
        let txn = self.gate.begin(&self.db).await?;
        let renewed = renewed.exec(&txn).await?;
        txn.commit().await?;
        if renewed.rows_affected == 0 {
            self.forget(id);
            return Err(self.refusal(id, token).await);
        }
        let worker = LiveWorker { id, types: self.types_of(id).await? };
        self.remember(token, &worker, true);
        Ok(worker)
    }

    /// Worker `id` as `token` may use it, without renewing it (a task report).
    pub async fn check(&self, id: Uuid, token: Uuid) -> Result<LiveWorker, WorkerError> {
        let row = remote_worker::Entity::find_by_id(id).one(&self.db).await?;
        match row {
            None => Err(WorkerError::NotFound(id)),
            Some(row) if row.token_id != token => Err(WorkerError::NotYours(id)),
            Some(row) if row.gone_at.is_some() => Err(WorkerError::Gone(id)),
            Some(_) => {
                let worker = LiveWorker { id, types: self.types_of(id).await? };
                self.remember(token, &worker, false);
                Ok(worker)
            }
        }
    }

    async fn refusal(&self, id: Uuid, token: Uuid) -> WorkerError {
        match self.check(id, token).await {
            Ok(_) => WorkerError::Gone(id),
            Err(err) => err,
        }
    }

    async fn types_of(&self, id: Uuid) -> Result<Vec<String>, DbErr> {
        remote_worker_type::Entity::find()
            .select_only()
            .column(remote_worker_type::Column::TypeName)
            .filter(remote_worker_type::Column::WorkerId.eq(id))
            .into_tuple::<String>()
            .all(&self.db)
            .await
    }

    /// The worker as its answers show it.
    pub async fn info(&self, id: Uuid, lease: Duration) -> Result<Option<WorkerInfo>, DbErr> {
        let Some(row) = remote_worker::Entity::find_by_id(id).one(&self.db).await? else { return Ok(None) };
        let (services, types): (Vec<String>, Vec<String>) =
            self.types_of(id).await?.into_iter().partition(|name| name.starts_with(SERVICE_PREFIX));
        let services = services.iter().map(|name| name[SERVICE_PREFIX.len()..].to_owned()).collect();
        Ok(Some(WorkerInfo {
            id: row.id,
            name: row.name,
            types,
            services,
            registered_at: row.registered_at,
            last_seen_at: row.last_seen_at,
            expires_at: row.expires_at,
            heartbeat_seconds: (self.ttl.as_secs() / 3).max(1),
            lease_seconds: lease.as_secs(),
        }))
    }

    /// Marks worker `id` gone (it leaves); true when this call did it.
    pub async fn leave(&self, id: Uuid) -> Result<bool, DbErr> {
        self.forget(id);
        let left = remote_worker::Entity::update_many()
            .col_expr(remote_worker::Column::GoneAt, Expr::value(clock::now()))
            .filter(remote_worker::Column::Id.eq(id))
            .filter(remote_worker::Column::GoneAt.is_null());
        let txn = self.gate.begin(&self.db).await?;
        let left = left.exec(&txn).await?;
        txn.commit().await?;
        Ok(left.rows_affected == 1)
    }

    /// Whether a live worker serves `type_name` (a full name).
    pub async fn serving(&self, type_name: &str) -> Result<bool, DbErr> {
        let live = remote_worker_type::Entity::find()
            .select_only()
            .column(remote_worker_type::Column::WorkerId)
            .filter(remote_worker_type::Column::TypeName.eq(type_name))
            .into_tuple::<Uuid>()
            .all(&self.db)
            .await?;
        if live.is_empty() {
            return Ok(false);
        }
        let found = remote_worker::Entity::find()
            .select_only()
            .column(remote_worker::Column::Id)
            .filter(remote_worker::Column::Id.is_in(live))
            .filter(remote_worker::Column::GoneAt.is_null())
            .filter(remote_worker::Column::ExpiresAt.gt(clock::now()))
            .limit(1)
            .into_tuple::<Uuid>()
            .one(&self.db)
            .await?;
        Ok(found.is_some())
    }

    /// Marks gone every worker silent past its deadline (a compare-and-set each on
    /// `gone_at IS NULL`); returns their ids. Their tasks' leases lapse and the reaper
    /// requeues or fails them by the retry rules.
    pub async fn sweep_silent(&self, limit: u64) -> Result<Vec<Uuid>, DbErr> {
        let now = clock::now();
        let silent = remote_worker::Entity::find()
            .select_only()
            .column(remote_worker::Column::Id)
            .filter(remote_worker::Column::GoneAt.is_null())
            .filter(remote_worker::Column::ExpiresAt.lt(now))
            .limit(limit)
            .into_tuple::<Uuid>()
            .all(&self.db)
            .await?;
        if silent.is_empty() {
            return Ok(Vec::new());
        }
        let mut gone = Vec::with_capacity(silent.len());
        let txn = self.gate.begin(&self.db).await?;
        for id in silent {
            let marked = remote_worker::Entity::update_many()
                .col_expr(remote_worker::Column::GoneAt, Expr::value(now))
                .filter(remote_worker::Column::Id.eq(id))
                .filter(remote_worker::Column::GoneAt.is_null())
                .filter(remote_worker::Column::ExpiresAt.lt(now))
                .exec(&txn)
                .await?;
            if marked.rows_affected == 1 {
                gone.push(id);
            }
        }
        txn.commit().await?;
        Ok(gone)
    }
}
