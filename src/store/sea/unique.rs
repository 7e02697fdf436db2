//! Unique jobs: a submission made `unique` inserts nothing when its room already has a job
//! of the same unique key, created within the window and now in one of the states named;
//! that job answers it. The lookup takes a lock of the key first (an advisory lock on
//! PostgreSQL; SQLite has one writer), so of submissions racing each other exactly one
//! inserts, and the others find its row.

use sea_orm::{ColumnTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QueryOrder};

use super::limits::lock;
use super::rows::to_chrono;
use crate::domain::{Job, Unique};
use crate::store::clock;
use crate::store::entity::job;

/// The newest job of `room` that answers `unique`, if one does.
pub(super) async fn earlier(txn: &DatabaseTransaction, room: &str, unique: &Unique) -> Result<Option<Job>, DbErr> {
    lock(txn, &format!("unique\u{1f}{room}\u{1f}{}", unique.key)).await?;
    let since = clock::now() - to_chrono(unique.window);
    let mut earlier: Vec<Job> = job::Entity::find()
        .filter(job::Column::Room.eq(room))
        .filter(job::Column::UniqueKey.eq(unique.key.as_str()))
        .filter(job::Column::CreatedAt.gt(since))
        .filter(job::Column::Status.is_in(unique.states.iter().copied()))
        .order_by_desc(job::Column::Id)
        .one(txn)
        .await?
        .into_iter()
        .collect();
    super::fan_in::apply(txn, &mut earlier).await?;
    Ok(earlier.pop())
}
