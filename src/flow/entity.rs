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
