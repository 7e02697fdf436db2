//! Every SQL statement about schedules: create, read, list, change (a compare-and-set on
//! `version`), delete; the scheduler's reads of what is due (from the index of schedules
//! not paused, by next fire time), its decision on a tick (a compare-and-set on
//! `next_fire_at` that writes the tick's row in the same transaction), and the ends of a
//! firing tick.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, DatabaseConnection, DbErr, EntityTrait,
    IntoActiveModel, Order, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::Value;
use uuid::Uuid;

use super::entity::{schedule, schedule_tick};
use crate::store::{clock, WriteGate, WriteTxn};

/// What a decided tick was.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Its job is to be submitted: this request (the schedule's job as it was).
    Fire { request: Value },
    /// The last tick's job was unfinished and the overlap policy is `skip`.
    Skip,
    /// It and `count - 1` ticks after it passed unfired, by the catch-up policy.
    Miss { count: u64 },
}

impl Decision {
    fn outcome(&self) -> &'static str {
        match self {
            Decision::Fire { .. } => FIRING,
            Decision::Skip => "skipped",
            Decision::Miss { .. } => "missed",
        }
    }
}

pub const FIRING: &str = "firing";

/// The schedule's name is taken in its room.
#[derive(Debug)]
pub struct NameTaken;

pub struct ScheduleBook {
    db: DatabaseConnection,
    /// The store's write gate: on SQLite, a schedule's write waits its turn with the
    /// store's writers (in arrival order) instead of in SQLite's busy handler.
    gate: WriteGate,
}

impl ScheduleBook {
    pub fn new(db: DatabaseConnection, gate: WriteGate) -> Self {
        ScheduleBook { db, gate }
    }

    async fn write(&self) -> Result<WriteTxn, DbErr> {
        self.gate.begin(&self.db).await
    }

    pub async fn insert(&self, row: schedule::Model) -> Result<Result<schedule::Model, NameTaken>, DbErr> {
        let txn = self.write().await?;
        let inserted = schedule::Entity::insert(row.clone().into_active_model())
            .on_conflict(OnConflict::columns([schedule::Column::Room, schedule::Column::Name]).do_nothing().to_owned())
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        Ok(match inserted {
            1 => Ok(row),
            _ => Err(NameTaken),
        })
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<schedule::Model>, DbErr> {
        schedule::Entity::find_by_id(id).one(&self.db).await
    }

    pub async fn find(&self, room: &str, name: &str) -> Result<Option<schedule::Model>, DbErr> {
        let named = Condition::all().add(schedule::Column::Room.eq(room)).add(schedule::Column::Name.eq(name));
        schedule::Entity::find().filter(named).one(&self.db).await
    }

    /// Schedules oldest first (ids are UUIDv7) after the id `after`, which need not exist
    /// any more; of `rooms` only when given.
    pub async fn list(
        &self,
        rooms: Option<&[String]>,
        after: Option<Uuid>,
        limit: u64,
    ) -> Result<Vec<schedule::Model>, DbErr> {
        let mut query = schedule::Entity::find();
        if let Some(rooms) = rooms {
            query = query.filter(schedule::Column::Room.is_in(rooms.iter().cloned()));
        }
        if let Some(after) = after {
            query = query.filter(schedule::Column::Id.gt(after));
        }
        query.order_by(schedule::Column::Id, Order::Asc).limit(limit).all(&self.db).await
    }

    /// Writes `changed` over the row if nobody changed it since it was read (same
    /// `version`), raising the version; the row as written, or `None` when it changed or
    /// went meanwhile.
    pub async fn update(&self, mut changed: schedule::Model) -> Result<Option<schedule::Model>, DbErr> {
        let read = changed.version;
        changed.version = read + 1;
        changed.updated_at = clock::now();
        let mut active = changed.clone().into_active_model().reset_all();
        active.id = sea_orm::ActiveValue::Unchanged(changed.id);
        let txn = self.write().await?;
        let written = schedule::Entity::update_many()
            .set(active)
            .filter(schedule::Column::Id.eq(changed.id))
            .filter(schedule::Column::Version.eq(read))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok((written.rows_affected == 1).then_some(changed))
    }

    /// Deletes a schedule and its log; false when it was not there.
    pub async fn delete(&self, id: Uuid) -> Result<bool, DbErr> {
        let txn = self.write().await?;
        let gone = schedule::Entity::delete_by_id(id).exec(&txn).await?.rows_affected == 1;
        schedule_tick::Entity::delete_many().filter(schedule_tick::Column::ScheduleId.eq(id)).exec(&txn).await?;
        txn.commit().await?;
        Ok(gone)
    }

    /// Schedules not paused whose next tick is due at `now`, soonest first (the index of
    /// schedules by next fire time).
    pub async fn due(&self, now: DateTime<Utc>, limit: u64) -> Result<Vec<schedule::Model>, DbErr> {
        schedule::Entity::find()
            .filter(schedule::Column::Paused.eq(false))
            .filter(schedule::Column::NextFireAt.lte(now))
            .order_by(schedule::Column::NextFireAt, Order::Asc)
            .limit(limit)
            .all(&self.db)
            .await
    }

    /// The next fire time of any schedule not paused: one step down the same index.
    pub async fn next_due(&self) -> Result<Option<DateTime<Utc>>, DbErr> {
        let next = schedule::Entity::find()
            .select_only()
            .column(schedule::Column::NextFireAt)
            .filter(schedule::Column::Paused.eq(false))
            .order_by(schedule::Column::NextFireAt, Order::Asc)
            .into_tuple::<DateTime<Utc>>()
            .one(&self.db)
            .await?;
        Ok(next)
    }

    /// Decides the tick due at `s.next_fire_at`: moves the schedule on to `next` and
    /// writes the tick's row, in one transaction, only if no scheduler decided it first
    /// (and nobody paused or changed the schedule). The schedule as moved, or `None`.
    pub async fn decide(
        &self,
        s: &schedule::Model,
        decision: &Decision,
        next: DateTime<Utc>,
    ) -> Result<Option<schedule::Model>, DbErr> {
        let now = clock::now();
        let tick_at = s.next_fire_at;
        let txn = self.write().await?;
        let mut update = schedule::Entity::update_many()
            .col_expr(schedule::Column::NextFireAt, Expr::value(next))
            .filter(schedule::Column::Id.eq(s.id))
            .filter(schedule::Column::NextFireAt.eq(tick_at))
            .filter(schedule::Column::Version.eq(s.version))
            .filter(schedule::Column::Paused.eq(false));
        let lasts = !matches!(decision, Decision::Miss { .. });
        if lasts {
            update = update.col_expr(schedule::Column::LastTickAt, Expr::value(tick_at));
        }
        if update.exec(&txn).await?.rows_affected != 1 {
            return Ok(None);
        }
        let (request, missed) = match decision {
            Decision::Fire { request } => (Some(request.clone()), 0),
            Decision::Skip => (None, 0),
            Decision::Miss { count } => (None, *count as i64),
        };
        let detail = match decision {
            Decision::Skip => s.last_job_id.map(|job| format!("job {job} of the last tick is unfinished")),
            _ => None,
        };
        let tick = schedule_tick::ActiveModel {
            schedule_id: Set(s.id),
            tick_at: Set(tick_at),
            outcome: Set(decision.outcome().to_owned()),
            job_id: Set(None),
            missed: Set(missed),
            request: Set(request),
            detail: Set(detail),
            recorded_at: Set(now),
        };
        schedule_tick::Entity::insert(tick)
            .on_conflict(
                OnConflict::columns([schedule_tick::Column::ScheduleId, schedule_tick::Column::TickAt])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        let mut moved = s.clone();
        moved.next_fire_at = next;
        if lasts {
            moved.last_tick_at = Some(tick_at);
        }
        Ok(Some(moved))
    }

    /// Ticks decided to fire whose job is not yet recorded, decided before `before`: their
    /// scheduler may have died between the decision and the submission.
    pub async fn firing(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<schedule_tick::Model>, DbErr> {
        schedule_tick::Entity::find()
            .filter(schedule_tick::Column::Outcome.eq(FIRING))
            .filter(schedule_tick::Column::RecordedAt.lt(before))
            .order_by(schedule_tick::Column::RecordedAt, Order::Asc)
            .limit(limit)
            .all(&self.db)
            .await
    }

    /// A firing tick's end: `fired` with its job (which becomes the schedule's last job, if
    /// this is still its last tick), or `failed` with why. False when another scheduler
    /// ended it first.
    pub async fn settle(
        &self,
        schedule_id: Uuid,
        tick_at: DateTime<Utc>,
        job: Result<Uuid, String>,
    ) -> Result<bool, DbErr> {
        let txn = self.write().await?;
        let (outcome, job_id, detail) = match &job {
            Ok(job) => ("fired", Some(*job), None),
            Err(why) => ("failed", None, Some(why.clone())),
        };
        let settled = schedule_tick::Entity::update_many()
            .col_expr(schedule_tick::Column::Outcome, Expr::value(outcome))
            .col_expr(schedule_tick::Column::JobId, Expr::value(job_id))
            .col_expr(schedule_tick::Column::Detail, Expr::value(detail))
            .col_expr(schedule_tick::Column::Request, Expr::value(None::<Value>))
            .filter(schedule_tick::Column::ScheduleId.eq(schedule_id))
            .filter(schedule_tick::Column::TickAt.eq(tick_at))
            .filter(schedule_tick::Column::Outcome.eq(FIRING))
            .exec(&txn)
            .await?
            .rows_affected
            == 1;
        if settled && job_id.is_some() {
            schedule::Entity::update_many()
                .col_expr(schedule::Column::LastJobId, Expr::value(job_id))
                .filter(schedule::Column::Id.eq(schedule_id))
                .filter(schedule::Column::LastTickAt.eq(tick_at))
                .exec(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(settled)
    }

    /// Records a job submitted by hand (run-now) as the schedule's last.
    pub async fn ran_now(&self, schedule_id: Uuid, at: DateTime<Utc>, job: Uuid) -> Result<(), DbErr> {
        let txn = self.write().await?;
        let tick = schedule_tick::ActiveModel {
            schedule_id: Set(schedule_id),
            tick_at: Set(at),
            outcome: Set("run_now".to_owned()),
            job_id: Set(Some(job)),
            missed: Set(0),
            request: Set(None),
            detail: Set(None),
            recorded_at: Set(at),
        };
        schedule_tick::Entity::insert(tick)
            .on_conflict(
                OnConflict::columns([schedule_tick::Column::ScheduleId, schedule_tick::Column::TickAt])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
        schedule::Entity::update_many()
            .col_expr(schedule::Column::LastJobId, Expr::value(Some(job)))
            .col_expr(schedule::Column::LastTickAt, Expr::value(Some(at)))
            .filter(schedule::Column::Id.eq(schedule_id))
            .exec(&txn)
            .await?;
        txn.commit().await
    }

    /// Removes decided ticks recorded before `before` (never one still firing); how many.
    pub async fn prune_ticks(&self, before: DateTime<Utc>) -> Result<u64, DbErr> {
        let txn = self.write().await?;
        let old = schedule_tick::Entity::delete_many()
            .filter(schedule_tick::Column::RecordedAt.lt(before))
            .filter(schedule_tick::Column::Outcome.ne(FIRING))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(old.rows_affected)
    }

    /// A schedule's log, newest first, before `before`; only ticks with a job when `jobs`.
    pub async fn ticks(
        &self,
        schedule_id: Uuid,
        before: Option<DateTime<Utc>>,
        jobs: bool,
        limit: u64,
    ) -> Result<Vec<schedule_tick::Model>, DbErr> {
        let mut query = schedule_tick::Entity::find().filter(schedule_tick::Column::ScheduleId.eq(schedule_id));
        if let Some(before) = before {
            query = query.filter(schedule_tick::Column::TickAt.lt(before));
        }
        if jobs {
            query = query.filter(schedule_tick::Column::JobId.is_not_null());
        }
        query.order_by(schedule_tick::Column::TickAt, Order::Desc).limit(limit).all(&self.db).await
    }
}
