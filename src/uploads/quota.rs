//! Which uploaded script runs next: quotas per user per service and per service, users
//! served in turn.
//!
//! A claim for a service takes the service's lock (in this process a mutex, and on
//! PostgreSQL a transaction-scoped advisory lock, so claimers in every process take turns),
//! counts the service's RUNNING jobs by user, and, when the service has a free slot, picks
//! among the users under their quota the one with the fewest runs, then the one waiting
//! longest, and claims that user's oldest runnable job with the lifecycle's own
//! compare-and-set. Counts come from the job rows themselves, so nothing drifts: a job that
//! ends, however it ends, frees its slot, and the write that ends it wakes the claimers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Statement, TransactionTrait,
};
use uuid::Uuid;

use super::settings::ServiceSettings;
use crate::domain::Job;
use crate::store::entity::job;
use crate::store::{RunWrites, StoreError};

/// Runnable jobs of one user tried per claim (others may take them meanwhile).
const TRIES: u64 = 8;

/// Which script jobs a claimer may take: of these services, in these rooms (`None`: all).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub services: Option<Vec<String>>,
    pub rooms: Option<Vec<String>>,
}

/// The quota gate of every service.
pub struct Quotas {
    db: DatabaseConnection,
    services: Arc<BTreeMap<String, ServiceSettings>>,
    locks: HashMap<String, tokio::sync::Mutex<()>>,
    /// Where the next claim starts among the services, so one busy service does not
    /// starve the others.
    next: AtomicUsize,
}

/// What a new job of a service waits behind: its user's jobs and all the service's jobs
/// that are running or queued before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub user_ahead: u32,
    pub service_ahead: u32,
}

impl Quotas {
    pub fn new(db: DatabaseConnection, services: Arc<BTreeMap<String, ServiceSettings>>) -> Self {
        let locks = services.keys().map(|name| (name.clone(), tokio::sync::Mutex::new(()))).collect();
        Quotas { db, services, locks, next: AtomicUsize::new(0) }
    }

    /// Claims the next script job of any service in `scope` under its quotas, for `owner`.
    pub async fn claim(
        &self,
        runs: &dyn RunWrites,
        owner: &str,
        lease: Duration,
        scope: &Scope,
    ) -> Result<Option<Job>, StoreError> {
        let names: Vec<&String> = self
            .services
            .keys()
            .filter(|name| scope.services.as_ref().is_none_or(|only| only.contains(name)))
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for offset in 0..names.len() {
            let name = names[(start + offset) % names.len()];
            if let Some(job) = self.claim_in(name, runs, owner, lease, scope).await? {
                return Ok(Some(job));
            }
        }
        Ok(None)
    }

    /// What job `id` of `service` waits behind: the service's jobs running or queued before
    /// it, `user`'s and all. Queued ones count, so the answer does not depend on whether a
    /// script host has claimed the jobs before it yet.
    pub async fn load(&self, service: &str, user: &str, id: Uuid) -> Result<Load, StoreError> {
        let rows: Vec<(String, i64)> = job::Entity::find()
            .select_only()
            .column_as(Expr::col(job::Column::SubmittedBy).if_null(""), "user")
            .column_as(Expr::col(job::Column::Id).count(), "ahead")
            .filter(Expr::cust("status IN ('queued', 'running') AND queue = '@scripts'"))
            .filter(job::Column::Service.eq(service))
            .filter(job::Column::Id.lt(id))
            .group_by(job::Column::SubmittedBy)
            .into_tuple()
            .all(&self.db)
            .await?;
        let ahead = |of: Option<&str>| {
            rows.iter().filter(|(user, _)| of.is_none_or(|of| of == user)).map(|(_, ahead)| *ahead as u32).sum()
        };
        Ok(Load { user_ahead: ahead(Some(user)), service_ahead: ahead(None) })
    }

    async fn claim_in(
        &self,
        service: &str,
        runs: &dyn RunWrites,
        owner: &str,
        lease: Duration,
        scope: &Scope,
    ) -> Result<Option<Job>, StoreError> {
        let (Some(settings), Some(lock)) = (self.services.get(service), self.locks.get(service)) else {
            return Ok(None);
        };
        let _turn = lock.lock().await;
        let txn = self.db.begin().await?;
        if txn.get_database_backend() == DbBackend::Postgres {
            let sql = "SELECT pg_advisory_xact_lock(hashtext($1))";
            let key = format!("yardmaster:scripts:{service}");
            txn.execute_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, [key.into()])).await?;
        }
        let claimed = pick_and_claim(&txn, service, settings, runs, owner, lease, scope).await;
        // Ended explicitly: a transaction merely dropped is rolled back only when its
        // connection is next used, and would hold the service's lock until then.
        match claimed {
            Ok(job) => {
                txn.commit().await?;
                Ok(job)
            }
            Err(err) => {
                let _ = txn.rollback().await;
                Err(err)
            }
        }
    }
}

/// Under the service's lock: the next job by the quotas, claimed.
async fn pick_and_claim(
    txn: &sea_orm::DatabaseTransaction,
    service: &str,
    settings: &ServiceSettings,
    runs: &dyn RunWrites,
    owner: &str,
    lease: Duration,
    scope: &Scope,
) -> Result<Option<Job>, StoreError> {
    let running = running_by_user(txn, service).await?;
    let in_scope = || match &scope.rooms {
        Some(rooms) => job::Column::Room.is_in(rooms.iter().map(String::as_str)),
        None => Expr::value(true),
    };
    if running.values().sum::<u32>() >= settings.total {
        return Ok(None);
    }
    // Users with runnable jobs, longest waiting first; then fewest running first.
    let mut waiting: Vec<String> = job::Entity::find()
        .select_only()
        .column_as(Expr::col(job::Column::SubmittedBy).if_null(""), "user")
        .filter(Expr::cust("status = 'queued' AND queue = '@scripts'"))
        .filter(job::Column::Service.eq(service))
        .filter(crate::store::startable(txn.get_database_backend()))
        .filter(in_scope())
        .group_by(job::Column::SubmittedBy)
        .order_by_asc(Expr::col(job::Column::CreatedAt).min())
        .into_tuple::<String>()
        .all(txn)
        .await?;
    waiting.retain(|user| running.get(user).copied().unwrap_or(0) < settings.per_user);
    waiting.sort_by_key(|user| running.get(user).copied().unwrap_or(0));
    for user in waiting {
        let submitted_by = match user.as_str() {
            "" => job::Column::SubmittedBy.is_null(),
            user => job::Column::SubmittedBy.eq(user),
        };
        let candidates: Vec<Uuid> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(Expr::cust("status = 'queued' AND queue = '@scripts'"))
            .filter(job::Column::Service.eq(service))
            .filter(submitted_by)
            .filter(crate::store::startable(txn.get_database_backend()))
            .filter(in_scope())
            .order_by_asc(job::Column::EffectivePriority)
            .order_by_asc(job::Column::Id)
            .limit(TRIES)
            .into_tuple()
            .all(txn)
            .await?;
        for id in candidates {
            if let Some(job) = runs.claim(id, owner, lease).await? {
                return Ok(Some(job));
            }
        }
    }
    Ok(None)
}

/// RUNNING jobs of `service` by user (`""` for jobs with no recorded user).
async fn running_by_user(db: &impl ConnectionTrait, service: &str) -> Result<HashMap<String, u32>, StoreError> {
    let rows: Vec<(String, i64)> = job::Entity::find()
        .select_only()
        .column_as(Expr::col(job::Column::SubmittedBy).if_null(""), "user")
        .column_as(Expr::col(job::Column::Id).count(), "running")
        .filter(Expr::cust("status = 'running' AND queue = '@scripts'"))
        .filter(job::Column::Service.eq(service))
        .group_by(job::Column::SubmittedBy)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows.into_iter().map(|(user, running)| (user, running as u32)).collect())
}
