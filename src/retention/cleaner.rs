//! `Cleaner`: every `interval`, one pass (the reaper's shape: a pass skipped while one
//! runs, `run_once` returning counts):
//!
//! 1. finished uploaded jobs past their service's age: marked cleaned (compare-and-set,
//!    `job.cleaned`), then their directory removed;
//! 2. upload directories nothing refers to any more: staging left by a crash, the files of a
//!    job whose row is gone or that is marked cleaned (a crash between mark and removal);
//! 3. history past its age, batch after batch until none is left: each batch one
//!    transaction sized to last a few milliseconds, then a pause twice as long, so
//!    submissions and claims keep flowing between them even while a large backlog is
//!    pruned (on SQLite, the one writer, a submission waits at most one batch).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use tracing::{info, warn};
use uuid::Uuid;

use super::settings::RetentionSettings;
use crate::actors::Pass;
use crate::domain::JobStatus;
use crate::store::entity::job;
use crate::store::{clock, Maintenance, StoreError};
use crate::uploads::Uploads;

/// How old a directory with no job must be before it is taken for an orphan: an upload
/// writes its files before its row exists.
const ORPHAN_GRACE: Duration = Duration::from_secs(3600);
/// Directories looked up per query.
const LOOKUP_CHUNK: usize = 500;

/// How long one history batch should hold its transaction, and the first batch's size.
const BATCH_TIME: Duration = Duration::from_micros(1000);
const FIRST_BATCH: u64 = 50;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, MessageResponse)]
pub struct CleanCounts {
    pub files_cleaned: u64,
    pub orphans_removed: u64,
    pub jobs_pruned: u64,
    pub children_pruned: u64,
    pub events_pruned: u64,
}

impl CleanCounts {
    pub fn total(&self) -> u64 {
        self.files_cleaned + self.orphans_removed + self.jobs_pruned
    }
}

/// One pass.
pub async fn run_once(
    store: &dyn Maintenance,
    db: &DatabaseConnection,
    uploads: &Uploads,
    settings: &RetentionSettings,
) -> Result<CleanCounts, StoreError> {
    let mut counts = CleanCounts::default();
    for (service, limits) in uploads.services.iter() {
        let age = Duration::from_secs(limits.max_age_hours.saturating_mul(3600));
        for id in due_for_cleaning(db, service, age, settings.batch).await? {
            if store.mark_cleaned(id).await?.is_some() {
                remove(uploads, id).await;
                counts.files_cleaned += 1;
            }
        }
    }
    counts.orphans_removed = remove_orphans(db, uploads, settings.batch).await?;
    let ages = [
        (JobStatus::Succeeded, settings.succeeded_days),
        (JobStatus::Failed, settings.failed_days),
        (JobStatus::Cancelled, settings.cancelled_days),
    ];
    for (status, days) in ages.into_iter().filter(|(_, days)| *days > 0.0) {
        let age = Duration::from_secs_f64(days * 86_400.0);
        let mut size = Ord::min(settings.batch, FIRST_BATCH);
        loop {
            let pruned = store.prune(status, age, size).await?;
            counts.jobs_pruned += pruned.jobs;
            counts.children_pruned += pruned.children;
            counts.events_pruned += pruned.events;
            if pruned.jobs < size {
                break;
            }
            // The next batch sized to hold the writer about BATCH_TIME (a submission behind
            // it waits as much at most), within 1..=batch and at most half or twice this one
            // (one slow commit does not collapse the size); then everything else gets the
            // database for twice as long as the batch held it.
            let held = pruned.held.max(Duration::from_micros(100));
            let scaled = size as f64 * BATCH_TIME.as_secs_f64() / held.as_secs_f64();
            let (floor, ceiling) = (Ord::max(size / 2, 1), size * 2);
            size = Ord::min((scaled as u64).clamp(floor, ceiling), settings.batch);
            // SQLite: the log this batch wrote goes into the database file now, by the
            // cleaner (a passive checkpoint takes no writer's turn), not by whichever
            // submission's commit next finds it long.
            if db.get_database_backend() == DbBackend::Sqlite {
                let checkpoint = std::time::Instant::now();
                if let Err(err) = db.execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)").await {
                    warn!(error = %err, "checkpoint after a history batch failed");
                }
                tracing::debug!(took = ?checkpoint.elapsed(), next = size, "checkpoint after a history batch");
            }
            tokio::time::sleep(held * 2).await;
        }
    }
    if counts.total() > 0 {
        info!(?counts, "cleaner pass");
    }
    use crate::telemetry::metrics::{maintenance, Maintenance::Cleaner};
    maintenance(Cleaner, "files_cleaned", counts.files_cleaned);
    maintenance(Cleaner, "orphans_removed", counts.orphans_removed);
    maintenance(Cleaner, "jobs_pruned", counts.jobs_pruned + counts.children_pruned);
    maintenance(Cleaner, "events_pruned", counts.events_pruned);
    Ok(counts)
}

/// Finished uploaded jobs of `service` whose files are older than `age`, oldest first.
async fn due_for_cleaning(
    db: &DatabaseConnection,
    service: &str,
    age: Duration,
    limit: u64,
) -> Result<Vec<Uuid>, StoreError> {
    let cutoff = match db.get_database_backend() {
        DbBackend::Postgres => Expr::cust(format!("CURRENT_TIMESTAMP - INTERVAL '{} seconds'", age.as_secs())),
        _ => Expr::value(clock::now() - chrono::Duration::seconds(age.as_secs() as i64)),
    };
    Ok(job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        // Literals, so both engines use the partial index on files not yet cleaned.
        .filter(Expr::cust(
            "queue = '@scripts' AND cleaned_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled')",
        ))
        .filter(job::Column::Service.eq(service))
        .filter(Expr::col(job::Column::FinishedAt).lt(cutoff))
        .order_by_asc(job::Column::FinishedAt)
        .limit(limit)
        .into_tuple()
        .all(db)
        .await?)
}

/// Removes a job's blobs and its runs' directories.
async fn remove(uploads: &Uploads, id: Uuid) {
    let (blobs, workspace) = (uploads.blobs.clone(), uploads.workspace.clone());
    let removed =
        tokio::task::spawn_blocking(move || Ok::<_, std::io::Error>(blobs.remove(id)? | workspace.remove(id)?));
    match removed.await {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => warn!(job_id = %id, error = %err, "files not removed; the next pass tries again"),
        Err(err) => warn!(job_id = %id, error = %err, "files not removed; the next pass tries again"),
    }
}

/// Directories of the upload store that no job needs, up to `limit`.
async fn remove_orphans(db: &DatabaseConnection, uploads: &Uploads, limit: u64) -> Result<u64, StoreError> {
    let (blobs, workspace) = (uploads.blobs.clone(), uploads.workspace.clone());
    let listed = tokio::task::spawn_blocking(move || {
        // Runs' directories count as the job's files (a job's runs left after its blobs
        // went, or runs of a job whose row is gone, are orphans too); a job with both is
        // as young as the younger.
        let mut newest: HashMap<(Uuid, bool), SystemTime> = HashMap::new();
        let runs = workspace.entries()?.into_iter().map(|(id, modified)| (id, false, modified));
        for (id, partial, modified) in blobs.entries()?.into_iter().chain(runs) {
            let seen = newest.entry((id, partial)).or_insert(modified);
            *seen = Ord::max(*seen, modified);
        }
        Ok::<Vec<_>, std::io::Error>(
            newest.into_iter().map(|((id, partial), modified)| (id, partial, modified)).collect(),
        )
    });
    let entries = match listed.await {
        Ok(Ok(entries)) => entries,
        Ok(Err(err)) => {
            warn!(error = %err, "the upload store cannot be listed");
            return Ok(0);
        }
        Err(_) => return Ok(0),
    };
    let now = SystemTime::now();
    let old = |modified: SystemTime| now.duration_since(modified).is_ok_and(|age| age >= ORPHAN_GRACE);
    // Which directories' jobs still exist, and which of those are cleaned: one query per
    // chunk of directories, not one per directory.
    let named: Vec<Uuid> = entries.iter().filter(|(_, partial, _)| !partial).map(|(id, _, _)| *id).collect();
    let mut known: HashMap<Uuid, bool> = HashMap::with_capacity(named.len());
    for chunk in named.chunks(LOOKUP_CHUNK) {
        let rows: Vec<(Uuid, Option<chrono::DateTime<chrono::Utc>>)> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::CleanedAt)
            .filter(job::Column::Id.is_in(chunk.iter().copied()))
            .into_tuple()
            .all(db)
            .await?;
        known.extend(rows.into_iter().map(|(id, cleaned)| (id, cleaned.is_some())));
    }
    let mut removed = 0;
    for (id, partial, modified) in entries {
        if removed >= limit {
            break;
        }
        let orphan = match (partial, known.get(&id)) {
            (true, _) | (false, None) => old(modified),
            (false, Some(cleaned)) => *cleaned,
        };
        if !orphan {
            continue;
        }
        let (blobs, workspace) = (uploads.blobs.clone(), uploads.workspace.clone());
        let gone = tokio::task::spawn_blocking(move || match partial {
            true => blobs.remove_partial(id),
            false => Ok(blobs.remove(id)? | workspace.remove(id)?),
        })
        .await;
        match gone {
            Ok(Ok(true)) => removed += 1,
            Ok(Ok(false)) => {}
            Ok(Err(err)) => warn!(job_id = %id, error = %err, "orphaned upload files not removed"),
            Err(err) => warn!(job_id = %id, error = %err, "orphaned upload files not removed"),
        }
    }
    Ok(removed)
}

pub struct Cleaner {
    store: Arc<dyn Maintenance>,
    db: DatabaseConnection,
    uploads: Arc<Uploads>,
    settings: RetentionSettings,
}

impl Cleaner {
    pub fn new(
        store: Arc<dyn Maintenance>,
        db: DatabaseConnection,
        uploads: Arc<Uploads>,
        settings: RetentionSettings,
    ) -> Self {
        Cleaner { store, db, uploads, settings }
    }
}

impl Pass for Cleaner {
    type Output = CleanCounts;
    const NAME: &'static str = "cleaner";

    fn interval(&self) -> Duration {
        Duration::from_millis(self.settings.interval_ms)
    }

    fn run(&self) -> Pin<Box<dyn Future<Output = anyhow::Result<CleanCounts>>>> {
        let (store, db, uploads, settings) =
            (self.store.clone(), self.db.clone(), self.uploads.clone(), self.settings.clone());
        Box::pin(async move { Ok(run_once(store.as_ref(), &db, &uploads, &settings).await?) })
    }
}
