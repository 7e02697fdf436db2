//! What an executing operation can touch: its job, the event log, progress, the database.

use std::sync::Arc;

use sea_orm::DatabaseConnection;
use serde_json::{json, Value};

use crate::domain::{EventLevel, Job, NewEvent};
use crate::store::{JobStore, StoreError};

/// Handed to [`super::Operation::execute`]; cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    job: Arc<Job>,
    store: Arc<dyn JobStore>,
    db: DatabaseConnection,
}

impl JobContext {
    pub fn new(job: Job, store: Arc<dyn JobStore>, db: DatabaseConnection) -> Self {
        JobContext { job: Arc::new(job), store, db }
    }

    /// The job as it was claimed (status RUNNING, `attempts` counting this run).
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The database pool, for operations that keep tables of their own. Each call runs in
    /// its own short transaction; never hold one open across slow work.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Appends an event to the job's log in its own short transaction.
    /// `_progress_current` / `_progress_total` in `fields` are written back to the job.
    pub async fn emit(
        &self,
        event: &str,
        message: Option<&str>,
        fields: Value,
        level: EventLevel,
    ) -> Result<(), StoreError> {
        let mut new = NewEvent::new(event).fields(fields).level(level);
        if let Some(message) = message {
            new = new.message(message);
        }
        self.store.record_event(self.job.id, new).await
    }

    /// Reports progress as a `job.progress` event.
    pub async fn progress(&self, current: i64, total: i64) -> Result<(), StoreError> {
        let fields = json!({ "_progress_current": current, "_progress_total": total });
        self.emit("job.progress", None, fields, EventLevel::Info).await
    }
}
