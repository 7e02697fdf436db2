//! Paused queues: the `queue_state` rows (each pause and resume a compare-and-set on
//! `paused_at`) and this process's view of which queues are paused, a `watch` its
//! consumers follow: a consumer of a paused queue gives its subscription back and takes
//! nothing until the queue resumes. The view is read again at start-up, after a pause or
//! resume in this process, and whenever another process's change is notified (on
//! PostgreSQL, `live::QUEUES_CHANNEL`); the claim itself refuses a job of a paused queue
//! whatever a view says (`store::startable`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, IntoActiveModel, QueryFilter};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use super::entity::queue_state;
use crate::domain::QueueName;
use crate::store::{clock, WriteGate};

/// The names of the queues paused, as this process last read them.
pub type Paused = BTreeSet<String>;

/// A queue's pause, when it is paused.
#[derive(Debug, Clone, PartialEq)]
pub struct Pause {
    pub at: DateTime<Utc>,
    pub by: Option<String>,
}

/// What a pause or resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Yes,
    /// The queue was already in that state.
    No,
}

/// The paused queues of the store, and this process's view of them.
pub struct QueuePauses {
    db: DatabaseConnection,
    gate: WriteGate,
    view: watch::Sender<Paused>,
    /// The queues that can be paused: the deployment's job queues, `@remote`, `@scripts`.
    names: BTreeSet<String>,
    /// Rings the dispatch sweep: a resumed queue's jobs handed back while it was paused
    /// are sent at once, not at the next tick.
    sweep: Arc<Notify>,
}

impl QueuePauses {
    /// Reads the paused queues once, so consumers start with the stored state.
    pub async fn open(
        db: DatabaseConnection,
        gate: WriteGate,
        job_queues: &BTreeSet<String>,
        sweep: Arc<Notify>,
    ) -> Result<Arc<Self>, DbErr> {
        let pulled = [QueueName::REMOTE, QueueName::SCRIPTS].map(str::to_owned);
        let names = job_queues.iter().cloned().chain(pulled).collect();
        let pauses = Arc::new(QueuePauses { db, gate, view: watch::Sender::new(Paused::new()), names, sweep });
        pauses.refresh().await?;
        Ok(pauses)
    }

    /// The queues that can be paused, by name.
    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    /// What the consumers of this process follow.
    pub fn watch(&self) -> watch::Receiver<Paused> {
        self.view.subscribe()
    }

    /// Every paused queue and its pause.
    pub async fn all(&self) -> Result<BTreeMap<String, Pause>, DbErr> {
        let rows =
            queue_state::Entity::find().filter(queue_state::Column::PausedAt.is_not_null()).all(&self.db).await?;
        let paused =
            rows.into_iter().filter_map(|row| Some((row.name, Pause { at: row.paused_at?, by: row.paused_by })));
        Ok(paused.collect())
    }

    /// Reads the paused queues into this process's view (and the metric).
    pub async fn refresh(&self) -> Result<(), DbErr> {
        let paused: Paused = self.all().await?.into_keys().collect();
        self.view.send_if_modified(|view| {
            if *view == paused {
                return false;
            }
            for name in view.difference(&paused) {
                crate::telemetry::metrics::queue_paused(name, false);
            }
            for name in &paused {
                crate::telemetry::metrics::queue_paused(name, true);
            }
            *view = paused;
            true
        });
        Ok(())
    }

    /// Pauses `queue` (a compare-and-set: only a running queue changes); this process's
    /// consumers stop at once, every other's when the change is notified.
    pub async fn pause(&self, queue: &str, by: &str) -> Result<Changed, DbErr> {
        let now = clock::now();
        let txn = self.gate.begin(&self.db).await?;
        let row = queue_state::Model { name: queue.to_owned(), paused_at: None, paused_by: None, changed_at: now };
        queue_state::Entity::insert(row.into_active_model())
            .on_conflict(OnConflict::column(queue_state::Column::Name).do_nothing().to_owned())
            .exec_without_returning(&*txn)
            .await?;
        let moved = queue_state::Entity::update_many()
            .col_expr(queue_state::Column::PausedAt, Expr::value(now))
            .col_expr(queue_state::Column::PausedBy, Expr::value(by))
            .col_expr(queue_state::Column::ChangedAt, Expr::value(now))
            .filter(queue_state::Column::Name.eq(queue))
            .filter(queue_state::Column::PausedAt.is_null())
            .exec(&*txn)
            .await?
            .rows_affected;
        txn.commit().await?;
        self.refresh().await?;
        if moved == 1 {
            info!(queue, by, "queue paused");
        }
        Ok(if moved == 1 { Changed::Yes } else { Changed::No })
    }

    /// Resumes `queue` (a compare-and-set: only a paused queue changes).
    pub async fn resume(&self, queue: &str) -> Result<Changed, DbErr> {
        let txn = self.gate.begin(&self.db).await?;
        let moved = queue_state::Entity::update_many()
            .col_expr(queue_state::Column::PausedAt, Expr::value(None::<DateTime<Utc>>))
            .col_expr(queue_state::Column::PausedBy, Expr::value(None::<String>))
            .col_expr(queue_state::Column::ChangedAt, Expr::value(clock::now()))
            .filter(queue_state::Column::Name.eq(queue))
            .filter(queue_state::Column::PausedAt.is_not_null())
            .exec(&*txn)
            .await?
            .rows_affected;
        txn.commit().await?;
        self.refresh().await?;
        if moved == 1 {
            info!(queue, "queue resumed");
            self.sweep.notify_one();
        }
        Ok(if moved == 1 { Changed::Yes } else { Changed::No })
    }

    /// Reads the view again whenever `news` rings (another process changed a queue, or the
    /// listener reconnected and may have missed a change), for as long as this lives.
    pub fn follow(self: &Arc<Self>, news: Arc<Notify>) {
        let pauses = Arc::downgrade(self);
        actix::spawn(async move {
            loop {
                news.notified().await;
                let Some(pauses) = pauses.upgrade() else { return };
                if let Err(err) = pauses.refresh().await {
                    warn!(error = %err, "could not read the paused queues; the claims still refuse their jobs");
                }
            }
        });
    }
}
