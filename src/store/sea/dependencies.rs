//! Jobs that wait for jobs. A submission with `depends_on` is written waiting
//! (`waiting_since`, and held, so nothing sends or claims it) with a `job_dependency` row
//! per edge ([`link`]). The jobs it waits for are marked `has_dependents` under a row lock,
//! so an ending that commits after this read sees the mark, and one that committed before
//! is seen here. When a marked job ends, `dispatch::DependencyWatch` has the jobs waiting
//! for it settled ([`SeaStore::settle_dependents_once`]): each a compare-and-set on a
//! waiting job, to QUEUED proper or to CANCELLED.

use std::collections::{BTreeSet, HashMap};

use chrono::Utc;
use sea_orm::sea_query::{CaseStatement, Expr, LockType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Statement, UpdateMany,
};
use serde_json::json;
use uuid::Uuid;

use super::{append_event, apply_transition, owned_event_row, SeaStore, INSERT_CHUNK};
use crate::domain::{EventLevel, EventName, Job, JobStatus, NewEvent, NewJob, OnDependencyFailure, MAX_DEPENDENCIES};
use crate::store::entity::{job, job_dependency, job_event};
use crate::store::{clock, Change, DependencyResult, Dispatch, Linked, Links, Settled, StoreError};

/// A waiting job, as the literal both engines match to the partial index of waiting jobs.
const WAITING: &str = "waiting_since IS NOT NULL AND status = 'queued'";

/// For rows about to be inserted (`new[i]` made `rows[i]`, written waiting if it has
/// dependencies): checks that every dependency is a job of the row's room (one of these
/// rows, or one already stored, which is marked `has_dependents` and locked), writes the
/// edges, and lets go at once a row whose dependencies have all ended. Returns the
/// `job.waiting` events of the rest. A dependency already failed or cancelled refuses a
/// job that would be cancelled for it.
pub(super) async fn link(
    txn: &DatabaseTransaction,
    rows: &mut [job::Model],
    new: &[&NewJob],
) -> Result<Vec<job_event::ActiveModel>, StoreError> {
    let position: HashMap<Uuid, usize> = rows.iter().enumerate().map(|(at, row)| (row.id, at)).collect();
    let mut stored: BTreeSet<Uuid> = BTreeSet::new();
    for dependency in new.iter().flat_map(|new| &new.depends_on) {
        match position.get(dependency) {
            Some(&at) => rows[at].has_dependents = true,
            None => {
                stored.insert(*dependency);
            }
        }
    }
    let found = mark_stored(txn, stored.into_iter().collect()).await?;
    let rows_rooms: Vec<String> = rows.iter().map(|row| row.room.clone()).collect();
    let mut events = Vec::new();
    let mut edges = Vec::new();
    let now = clock::now();
    for (row, new) in rows.iter_mut().zip(new) {
        if new.depends_on.is_empty() {
            continue;
        }
        let mut pending = 0;
        let mut failed = None;
        let dependencies: BTreeSet<Uuid> = new.depends_on.iter().copied().collect();
        for &dependency in &dependencies {
            let status = match position.get(&dependency) {
                // An earlier item of the batch, in the same room (items may name their own).
                Some(&at) if at != position[&row.id] && rows_rooms[at] == row.room => JobStatus::Queued,
                Some(_) => return Err(StoreError::DependencyNotFound(dependency)),
                None => match found.get(&dependency).filter(|(room, _)| *room == row.room) {
                    Some((_, status)) => *status,
                    None => return Err(StoreError::DependencyNotFound(dependency)),
                },
            };
            match status {
                JobStatus::Queued | JobStatus::Running => pending += 1,
                JobStatus::Succeeded => {}
                JobStatus::Failed | JobStatus::Cancelled => {
                    failed.get_or_insert((dependency, status));
                }
            }
            edges.push(job_dependency::ActiveModel {
                job_id: sea_orm::ActiveValue::Set(row.id),
                dependency_id: sea_orm::ActiveValue::Set(dependency),
            });
        }
        if let (Some((id, status)), OnDependencyFailure::Cancel) = (failed, new.on_dependency_failure) {
            return Err(StoreError::DependencyFailed { id, status });
        }
        if pending == 0 {
            row.waiting_since = None;
            row.held_since = None;
            row.published_at = (new.announced && new.run_after.is_none()).then_some(now);
            continue;
        }
        let fields = json!({ "depends_on": dependencies, "pending": pending });
        let message = format!("waits for {pending} of its {} dependencies", dependencies.len());
        events.push(owned_event_row(row.id, NewEvent::new(EventName::WAITING).message(message).fields(fields)));
    }
    for chunk in edges.chunks(INSERT_CHUNK * 10) {
        job_dependency::Entity::insert_many(chunk.to_vec()).exec_without_returning(txn).await?;
    }
    Ok(events)
}

/// Marks stored jobs as having dependents, locked in id order first on PostgreSQL (an
/// ending of one commits before this reads it, or after this commits and sees the mark);
/// returns each one's room and status.
async fn mark_stored(
    txn: &DatabaseTransaction,
    ids: Vec<Uuid>,
) -> Result<HashMap<Uuid, (String, JobStatus)>, StoreError> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(INSERT_CHUNK) {
        let mut read = job::Entity::find()
            .select_only()
            .columns([job::Column::Id, job::Column::Room, job::Column::Status])
            .filter(job::Column::Id.is_in(chunk.iter().copied()))
            .order_by_asc(job::Column::Id);
        if txn.get_database_backend() == DbBackend::Postgres {
            read = read.lock(LockType::Update);
        }
        let rows: Vec<(Uuid, String, JobStatus)> = read.into_tuple().all(txn).await?;
        job::Entity::update_many()
            .col_expr(job::Column::HasDependents, Expr::value(true))
            .filter(job::Column::Id.is_in(rows.iter().map(|(id, ..)| *id)))
            .filter(job::Column::HasDependents.eq(false))
            .exec(txn)
            .await?;
        found.extend(rows.into_iter().map(|(id, room, status)| (id, (room, status))));
    }
    Ok(found)
}

/// What its dependencies say of one waiting job.
enum Verdict {
    Wait,
    Queue,
    Cancel { dependency: Uuid, status: JobStatus },
}

fn verdict(policy: OnDependencyFailure, statuses: &[(Uuid, Option<JobStatus>)]) -> Verdict {
    let mut pending = false;
    for &(dependency, status) in statuses {
        match status {
            Some(JobStatus::Queued | JobStatus::Running) => pending = true,
            Some(status @ (JobStatus::Failed | JobStatus::Cancelled)) if policy == OnDependencyFailure::Cancel => {
                return Verdict::Cancel { dependency, status };
            }
            // Succeeded, or ended with `run`.
            _ => {}
        }
    }
    match pending {
        true => Verdict::Wait,
        false => Verdict::Queue,
    }
}

impl SeaStore {
    pub(super) async fn settle_dependents_once(&self, ended: &[Uuid]) -> Result<Settled, StoreError> {
        let mut waiting = BTreeSet::new();
        for chunk in ended.chunks(INSERT_CHUNK) {
            let ids: Vec<Uuid> = job_dependency::Entity::find()
                .select_only()
                .column(job_dependency::Column::JobId)
                .filter(job_dependency::Column::DependencyId.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(&self.db)
                .await?;
            waiting.extend(ids);
        }
        self.settle(waiting.into_iter().collect()).await
    }

    pub(super) async fn settle_stranded_once(&self, most: u64) -> Result<Settled, StoreError> {
        let backend = self.db.get_database_backend();
        let dependency_in = |statuses: &str| {
            format!(
                "SELECT 1 FROM job_dependency e JOIN job d ON d.id = e.dependency_id \
                 WHERE e.job_id = job.id AND d.status IN ({statuses})"
            )
        };
        let sql = format!(
            "SELECT id FROM job WHERE {WAITING} AND (NOT EXISTS ({}) \
             OR (COALESCE(on_dependency_failure, 'cancel') = 'cancel' AND EXISTS ({}))) \
             ORDER BY waiting_since LIMIT {most}",
            dependency_in("'queued', 'running'"),
            dependency_in("'failed', 'cancelled'"),
        );
        let rows = self.db.query_all_raw(Statement::from_string(backend, sql)).await?;
        let ids = rows.iter().map(|row| row.try_get::<Uuid>("", "id")).collect::<Result<Vec<_>, _>>()?;
        self.settle(ids).await
    }

    /// Settles these jobs, those of them still waiting, in one transaction.
    async fn settle(&self, waiting: Vec<Uuid>) -> Result<Settled, StoreError> {
        if waiting.is_empty() {
            return Ok(Settled::default());
        }
        let txn = self.write_txn().await?;
        let mut policies: Vec<(Uuid, Option<String>)> = Vec::new();
        let mut edges: Vec<(Uuid, Uuid)> = Vec::new();
        for chunk in waiting.chunks(INSERT_CHUNK) {
            let still: Vec<(Uuid, Option<String>)> = job::Entity::find()
                .select_only()
                .columns([job::Column::Id, job::Column::OnDependencyFailure])
                .filter(Expr::cust(WAITING))
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(&*txn)
                .await?;
            let ids: Vec<Uuid> = still.iter().map(|(id, _)| *id).collect();
            policies.extend(still);
            edges.extend(
                job_dependency::Entity::find()
                    .select_only()
                    .columns([job_dependency::Column::JobId, job_dependency::Column::DependencyId])
                    .filter(job_dependency::Column::JobId.is_in(ids))
                    .into_tuple::<(Uuid, Uuid)>()
                    .all(&*txn)
                    .await?,
            );
        }
        let dependencies: BTreeSet<Uuid> = edges.iter().map(|(_, dependency)| *dependency).collect();
        let mut statuses: HashMap<Uuid, JobStatus> = HashMap::new();
        for chunk in dependencies.into_iter().collect::<Vec<_>>().chunks(INSERT_CHUNK) {
            let read: Vec<(Uuid, JobStatus)> = job::Entity::find()
                .select_only()
                .columns([job::Column::Id, job::Column::Status])
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(&*txn)
                .await?;
            statuses.extend(read);
        }
        let mut of: HashMap<Uuid, Vec<(Uuid, Option<JobStatus>)>> = HashMap::new();
        for (id, dependency) in edges {
            of.entry(id).or_default().push((dependency, statuses.get(&dependency).copied()));
        }
        let now = clock::now();
        let (mut cancelled, mut queued): (Vec<Job>, Vec<Job>) = (Vec::new(), Vec::new());
        for (id, policy) in policies {
            let policy = OnDependencyFailure::parse(policy.as_deref());
            match verdict(policy, of.get(&id).map(Vec::as_slice).unwrap_or_default()) {
                Verdict::Wait => {}
                Verdict::Cancel { dependency, status } => {
                    let fields = json!({ "dependency_job_id": dependency, "dependency_status": status });
                    let event = NewEvent::new(EventName::DEPENDENCY_FAILED)
                        .message(format!("dependency {dependency} was {status}"))
                        .fields(fields)
                        .level(EventLevel::Error);
                    let set = |update: UpdateMany<job::Entity>| {
                        update
                            .col_expr(job::Column::FinishedAt, Expr::value(now))
                            .col_expr(job::Column::WaitingSince, Expr::value(None::<chrono::DateTime<Utc>>))
                            .col_expr(job::Column::ErrorCode, Expr::value("DependencyFailed"))
                            .col_expr(
                                job::Column::ErrorMessage,
                                Expr::value(format!("dependency {dependency} was {status}")),
                            )
                            .filter(Expr::cust("waiting_since IS NOT NULL"))
                    };
                    let moved =
                        apply_transition(&txn, id, &[JobStatus::Queued], JobStatus::Cancelled, set, &event).await?;
                    cancelled.extend(moved);
                }
                Verdict::Queue => {
                    let no_time = None::<chrono::DateTime<Utc>>;
                    // A job under a limit stays held: its limit admits it.
                    let held = CaseStatement::new()
                        .case(job::Column::LimitKey.is_null(), Expr::value(no_time))
                        .finally(Expr::col(job::Column::HeldSince));
                    let moved = job::Entity::update_many()
                        .col_expr(job::Column::WaitingSince, Expr::value(no_time))
                        .col_expr(job::Column::HeldSince, Expr::Case(Box::new(held)))
                        .col_expr(job::Column::PublishedAt, Expr::value(no_time))
                        .filter(job::Column::Id.eq(id))
                        .filter(Expr::cust(WAITING))
                        .exec_with_returning(&*txn)
                        .await?;
                    for job in &moved {
                        let event =
                            NewEvent::new(EventName::DEPENDENCIES_MET).message("its dependencies allow it: queued");
                        append_event(&*txn, job.id, &event).await?;
                    }
                    queued.extend(moved);
                }
            }
        }
        txn.commit().await?;
        let mut changes: Vec<Change> = cancelled
            .iter()
            .map(|job| Change::Moved { job, was: &[JobStatus::Queued], event: EventName::DEPENDENCY_FAILED })
            .collect();
        changes.extend(queued.iter().map(|job| Change::Moved {
            job,
            was: &[JobStatus::Queued],
            event: EventName::DEPENDENCIES_MET,
        }));
        self.announce(crate::store::Call::Upkeep("settle_dependents"), &changes).await?;
        let ready = |job: &&Job| {
            job.held_since.is_none()
                && job.run_after.is_none_or(|at| at <= now)
                && !crate::domain::QueueName::pulled(&job.queue)
        };
        Ok(Settled {
            released: queued.iter().filter(ready).map(Dispatch::of).collect(),
            queued: queued.len(),
            cancelled: cancelled.len(),
        })
    }

    pub(super) async fn links_once(&self, id: Uuid) -> Result<Links, StoreError> {
        let dependencies = self.linked(job_dependency::Column::JobId, job_dependency::Column::DependencyId, id).await?;
        let dependents = self.linked(job_dependency::Column::DependencyId, job_dependency::Column::JobId, id).await?;
        Ok(Links { dependencies, dependents })
    }

    /// The jobs at the `to` end of `id`'s edges from the `from` end.
    async fn linked(
        &self,
        from: job_dependency::Column,
        to: job_dependency::Column,
        id: Uuid,
    ) -> Result<Vec<Linked>, StoreError> {
        let ids: Vec<Uuid> = job_dependency::Entity::find()
            .select_only()
            .column(to)
            .filter(from.eq(id))
            .order_by_asc(to)
            .limit(MAX_DEPENDENCIES as u64)
            .into_tuple()
            .all(&self.db)
            .await?;
        let mut linked = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_CHUNK) {
            let rows: Vec<(Uuid, String, JobStatus, Option<chrono::DateTime<Utc>>)> = job::Entity::find()
                .select_only()
                .columns([job::Column::Id, job::Column::Operation, job::Column::Status, job::Column::WaitingSince])
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .order_by_asc(job::Column::Id)
                .into_tuple()
                .all(&self.db)
                .await?;
            linked.extend(rows.into_iter().map(|(id, operation, status, waiting_since)| Linked {
                id,
                operation,
                status,
                waiting_since,
            }));
        }
        Ok(linked)
    }

    pub(super) async fn dependency_results_once(&self, id: Uuid) -> Result<Vec<DependencyResult>, StoreError> {
        let ids: Vec<Uuid> = job_dependency::Entity::find()
            .select_only()
            .column(job_dependency::Column::DependencyId)
            .filter(job_dependency::Column::JobId.eq(id))
            .into_tuple()
            .all(&self.db)
            .await?;
        let mut results = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_CHUNK) {
            type Row = (Uuid, String, JobStatus, Option<serde_json::Value>, Option<String>);
            let rows: Vec<Row> = job::Entity::find()
                .select_only()
                .columns([
                    job::Column::Id,
                    job::Column::Operation,
                    job::Column::Status,
                    job::Column::Result,
                    job::Column::ErrorCode,
                ])
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .order_by_asc(job::Column::Id)
                .into_tuple()
                .all(&self.db)
                .await?;
            results.extend(rows.into_iter().map(|(id, operation, status, result, error_code)| DependencyResult {
                id,
                operation,
                status,
                result,
                error_code,
            }));
        }
        Ok(results)
    }
}
