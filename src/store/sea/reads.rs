//! What the API reads: a job, pages of summaries (the payload and result never read, so a
//! page of 500 jobs costs the same whatever clients submitted), events, and a queued job's
//! place in its line.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, Iterable, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::fan_in;
use super::rows::{beside_status, db_now, of_status, to_event};
use super::settle::{self, Settled};
use super::SeaStore;
use crate::domain::{Job, JobEvent, JobStatus, JobSummary, QueueName};
use crate::store::entity::{job, job_event};
use crate::store::overview::QueueFigures;
use crate::store::{clock, Call, DependencyResult, JobFilter, JobHead, JobReads, Links, Page, StoreError};

#[async_trait]
impl JobReads for SeaStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.before(Call::Read("ping", None)).await?;
        self.db.ping().await.map_err(StoreError::from)
    }

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.before(Call::Read("get", Some(id))).await?;
        self.find(id).await
    }

    async fn head(&self, id: Uuid) -> Result<Option<JobHead>, StoreError> {
        self.before(Call::Read("head", Some(id))).await?;
        let row: Option<(String, String)> = job::Entity::find_by_id(id)
            .select_only()
            .columns([job::Column::Status, job::Column::Room])
            .into_tuple()
            .one(&self.db)
            .await?;
        row.map(|(status, room)| {
            let status = status.parse::<JobStatus>().map_err(|err| StoreError::Corrupt(err.to_string()))?;
            Ok(JobHead { status, room })
        })
        .transpose()
    }

    async fn get_many(&self, ids: &[Uuid]) -> Result<Vec<Job>, StoreError> {
        self.before(Call::Read("get_many", None)).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        // Within either engine's limit of bound parameters.
        for some in ids.chunks(500) {
            jobs.extend(job::Entity::find().filter(job::Column::Id.is_in(some.iter().copied())).all(&self.db).await?);
        }
        fan_in::apply(&self.db, &mut jobs).await?;
        Ok(jobs)
    }

    async fn list(&self, filter: &JobFilter) -> Result<Page, StoreError> {
        self.before(Call::Read("list", None)).await?;
        use job::Column as C;
        // Every column a summary shows (it decodes them by name); the error message cut.
        let plain =
            C::iter().filter(|column| !matches!(column, C::Payload | C::Result | C::RetryPolicy | C::ErrorMessage));
        // SUBSTR counts characters on both engines.
        let message = Expr::cust(format!("SUBSTR(error_message, 1, {})", JobSummary::MESSAGE_CHARS));
        let mut query = job::Entity::find().select_only().columns(plain).column_as(message, "error_message");
        let col = |column: C| beside_status(self.db.get_database_backend(), filter.status, column);
        if let Some(rooms) = &filter.rooms {
            query = query.filter(col(C::Room).is_in(rooms.iter().map(String::as_str)));
        }
        if let Some(status) = filter.status {
            // A literal with its index's term: PostgreSQL plans each status on its own, so
            // any but succeeded reads the partial status indexes (migration 32), never a
            // generic plan that could not prove its predicate and walks the room's whole
            // history; SQLite reads them, or its index of running jobs, by the term.
            query = query.filter(Expr::cust(of_status(status)));
        }
        if let Some(operation) = &filter.operation {
            query = query.filter(col(C::Operation).eq(operation.as_str()));
        }
        if let Some(queue) = &filter.queue {
            query = query.filter(col(C::Queue).eq(queue.as_str()));
        }
        if let Some(parent) = filter.parent_job_id {
            query = query.filter(col(C::ParentJobId).eq(parent));
        }
        if let Some(before) = filter.before {
            query = query.filter(col(C::Id).lt(before));
        }
        if let Some(not_before) = filter.not_before {
            query = query.filter(col(C::Id).gte(not_before));
        }
        if let Some(key) = &filter.idempotency_key {
            query = query.filter(col(C::IdempotencyKey).eq(key.as_str()));
        }
        let mut jobs =
            query.order_by_desc(C::Id).limit(filter.limit + 1).into_model::<JobSummary>().all(&self.db).await?;
        fan_in::apply(&self.db, &mut jobs).await?;
        let next_cursor = match jobs.len() as u64 > filter.limit {
            true => {
                jobs.truncate(filter.limit as usize);
                jobs.last().map(|job| job.id)
            }
            false => None,
        };
        Ok(Page { jobs, next_cursor })
    }

    async fn events(&self, id: Uuid, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.before(Call::Read("events", Some(id))).await?;
        self.events_where(job_event::Column::JobId.eq(id), after, limit).await
    }

    async fn room_events(&self, room: &str, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.before(Call::Read("room_events", None)).await?;
        let jobs = sea_orm::sea_query::Query::select()
            .column(job::Column::Id)
            .from(job::Entity)
            .and_where(job::Column::Room.eq(room))
            .to_owned();
        let of_room = || job_event::Column::JobId.in_subquery(jobs.clone());
        let events = self.events_where(of_room(), after, limit).await?;
        let Some(last) = events.last().map(|event| event.id) else { return Ok(events) };
        // A room's events come from many jobs' transactions, committing in any order.
        match settle::settled(&self.db).await? {
            Settled::AsRead => Ok(events),
            Settled::ReadAgain => self.events_where(of_room().and(job_event::Column::Id.lte(last)), after, limit).await,
            Settled::NotYet => Ok(Vec::new()),
        }
    }

    async fn queue_figures(
        &self,
        queues: &[String],
        rooms: Option<&[String]>,
    ) -> Result<BTreeMap<String, QueueFigures>, StoreError> {
        self.before(Call::Read("queue_figures", None)).await?;
        let mut figures: BTreeMap<String, QueueFigures> =
            queues.iter().map(|name| (name.clone(), QueueFigures::default())).collect();
        // A look for each status, each reading its index: the status indexes for queued
        // jobs, and on SQLite `ix_job_running_lease` for running ones (migration 37), which
        // holds no time a running look could use, so only the queued look asks for one.
        let look = |status: JobStatus| {
            let mut query = job::Entity::find();
            if let Some(rooms) = rooms {
                let room = beside_status(self.db.get_database_backend(), Some(status), job::Column::Room);
                query = query.filter(room.is_in(rooms.iter().map(String::as_str)));
            }
            query
                .select_only()
                .column(job::Column::Queue)
                .column_as(Expr::cust("COUNT(*)"), "jobs")
                .filter(Expr::cust(of_status(status)))
                .group_by(job::Column::Queue)
        };
        let queued: Vec<(String, i64, Option<chrono::DateTime<chrono::Utc>>)> = look(JobStatus::Queued)
            .column_as(Expr::cust("MIN(COALESCE(run_after, created_at))"), "oldest_due")
            .into_tuple()
            .all(&self.db)
            .await?;
        for (name, jobs, oldest_due) in queued {
            let queue = figures.entry(name).or_default();
            queue.queued = jobs;
            queue.oldest_due = oldest_due;
        }
        let running: Vec<(String, i64)> = look(JobStatus::Running).into_tuple().all(&self.db).await?;
        for (name, jobs) in running {
            figures.entry(name).or_default().running = jobs;
        }
        Ok(figures)
    }

    async fn links(&self, id: Uuid) -> Result<Links, StoreError> {
        self.before(Call::Read("links", Some(id))).await?;
        self.links_once(id).await
    }

    async fn dependency_results(&self, id: Uuid) -> Result<Vec<DependencyResult>, StoreError> {
        self.before(Call::Read("dependency_results", Some(id))).await?;
        self.dependency_results_once(id).await
    }

    /// 1 + the runnable jobs ahead of `job` in its line (of a better level, or of its level
    /// and older): its type's for a registered type (whatever their room: they wait for the
    /// same workers), its queue's otherwise.
    async fn queue_position(&self, of: &Job) -> Result<Option<i64>, StoreError> {
        self.before(Call::Read("queue_position", Some(of.id))).await?;
        // A job that waits for its time, or that its limit holds, is in no line yet.
        let waiting = of.run_after.is_some_and(|at| at > clock::now()) || of.held_since.is_some();
        if of.status != JobStatus::Queued || waiting {
            return Ok(None);
        }
        let backend = self.db.get_database_backend();
        let mut ahead = job::Entity::find()
            .filter(Expr::cust("status = 'queued'"))
            .filter(job::Column::Queue.eq(of.queue.as_str()))
            .filter(job::Column::HeldSince.is_null())
            // Ahead: a better level, or the same level and older.
            .filter(
                Expr::col(job::Column::EffectivePriority).lt(of.effective_priority).or(Expr::col(
                    job::Column::EffectivePriority,
                )
                .eq(of.effective_priority)
                .and(Expr::col(job::Column::Id).lt(of.id))),
            )
            .filter(
                Expr::col(job::Column::RunAfter).is_null().or(Expr::col(job::Column::RunAfter).lte(db_now(backend))),
            );
        if of.queue == QueueName::REMOTE {
            ahead = ahead.filter(job::Column::Operation.eq(of.operation.as_str()));
        }
        if of.queue == QueueName::SCRIPTS {
            ahead = ahead.filter(job::Column::Service.eq(of.service.as_deref()));
        }
        Ok(Some(ahead.count(&self.db).await? as i64 + 1))
    }
}

impl SeaStore {
    /// Events of the jobs `which` picks, in the order written, after event id `after`.
    async fn events_where(
        &self,
        which: sea_orm::sea_query::SimpleExpr,
        after: Option<i64>,
        limit: u64,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let rows = job_event::Entity::find()
            .filter(which)
            .filter(job_event::Column::Id.gt(after.unwrap_or(0)))
            .order_by_asc(job_event::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        rows.into_iter().map(to_event).collect()
    }
}
