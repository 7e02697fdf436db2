//! The tables of schedules: `schedule` and its log, `schedule_tick`.

/// `schedule`: a recurring submission and its next fire time.
pub mod schedule {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "schedule")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: Uuid,
        pub room: String,
        /// Unique in its room.
        pub name: String,
        pub cron: Option<String>,
        pub every_seconds: Option<f64>,
        pub timezone: String,
        /// The job each tick submits: a `POST /jobs` body without its times, key or parent.
        pub job: Json,
        /// `allow`, `skip` or `cancel_previous`.
        pub overlap: String,
        /// `none`, `last` or `all`.
        pub catch_up: String,
        pub max_catch_up: i32,
        pub paused: bool,
        /// The tick due next: the compare-and-set of every scheduler that decides it.
        pub next_fire_at: ChronoDateTimeUtc,
        pub last_tick_at: Option<ChronoDateTimeUtc>,
        /// The job of the last tick that fired (the overlap rules read its state).
        pub last_job_id: Option<Uuid>,
        /// `api` or `config` (declared under `[schedules.NAME]`).
        pub source: String,
        /// Raised by every change of a client's: a change made meanwhile is not overwritten.
        pub version: i64,
        pub created_at: ChronoDateTimeUtc,
        pub updated_at: ChronoDateTimeUtc,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}

    /// What a new schedule is made of; its id, log and version start fresh.
    pub struct Made {
        pub room: String,
        pub name: String,
        pub cron: Option<String>,
        pub every_seconds: Option<f64>,
        pub timezone: String,
        pub job: Json,
        pub overlap: crate::schedules::spec::Overlap,
        pub catch_up: crate::schedules::spec::CatchUp,
        pub max_catch_up: u32,
        pub paused: bool,
        /// Its first tick.
        pub first: ChronoDateTimeUtc,
        /// `api` or `config`.
        pub source: &'static str,
    }

    impl Model {
        /// A schedule made at `now`.
        pub fn made(made: Made, now: ChronoDateTimeUtc) -> Model {
            Model {
                id: Uuid::now_v7(),
                room: made.room,
                name: made.name,
                cron: made.cron,
                every_seconds: made.every_seconds,
                timezone: made.timezone,
                job: made.job,
                overlap: made.overlap.as_str().to_owned(),
                catch_up: made.catch_up.as_str().to_owned(),
                max_catch_up: made.max_catch_up as i32,
                paused: made.paused,
                next_fire_at: made.first,
                last_tick_at: None,
                last_job_id: None,
                source: made.source.to_owned(),
                version: 1,
                created_at: now,
                updated_at: now,
            }
        }
    }
}

/// `schedule_tick`: one row per decided tick (fired, skipped, missed, failed) and per
/// run-now, keyed by the schedule and the tick's time.
pub mod schedule_tick {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "schedule_tick")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub schedule_id: Uuid,
        #[sea_orm(primary_key, auto_increment = false)]
        pub tick_at: ChronoDateTimeUtc,
        /// `firing` (decided, its job being submitted), `fired`, `skipped`, `missed`,
        /// `failed` (its job was refused) or `run_now`.
        pub outcome: String,
        pub job_id: Option<Uuid>,
        /// For `missed`: how many ticks, from this one on.
        pub missed: i64,
        /// While `firing`: the job to submit, so any scheduler can finish the tick.
        pub request: Option<Json>,
        pub detail: Option<String>,
        pub recorded_at: ChronoDateTimeUtc,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
