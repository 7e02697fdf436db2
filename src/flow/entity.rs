//! The table of queue states: `queue_state`, a row per queue an admin paused or resumed.

/// `queue_state`: whether a queue starts jobs (`paused_at` null) or not.
pub mod queue_state {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "queue_state")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        /// Since when the queue starts nothing; `None`: it runs.
        pub paused_at: Option<ChronoDateTimeUtc>,
        /// The user whose token paused it.
        pub paused_by: Option<String>,
        /// The last pause or resume.
        pub changed_at: ChronoDateTimeUtc,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// `queue_minute`: what a queue did in one minute, for one room (the dashboard's charts).
pub mod queue_minute {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "queue_minute")]
    pub struct Model {
        /// The minute's start.
        #[sea_orm(primary_key, auto_increment = false)]
        pub minute: ChronoDateTimeUtc,
        #[sea_orm(primary_key, auto_increment = false)]
        pub queue: String,
        /// The jobs' room; `''` for the queue's own row (its pause).
        #[sea_orm(primary_key, auto_increment = false)]
        pub room: String,
        /// Runs started in the minute.
        pub started: i64,
        pub succeeded: i64,
        pub failed: i64,
        pub cancelled: i64,
        /// First runs' waits from submission (or `run_after`) to start: a histogram,
        /// `{"bucket": count}` ([`crate::flow::rollup::bucket`]).
        pub waits: String,
        /// Samples taken in the minute (the last one): jobs QUEUED and not held (those
        /// waiting for their time included), held (by a limit or their dependencies),
        /// RUNNING.
        pub depth: Option<i64>,
        pub held: Option<i64>,
        pub running: Option<i64>,
        /// The queue was paused when sampled (on the room `''` row).
        pub paused: bool,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
