//! Where SQLite puts new jobs' rows: jobs of one queue and level side by side, however
//! their submissions interleave the levels, so claims level by level rewrite few pages;
//! and two stores on one file (two processes) never hand out one rowid twice.

use sea_orm::{ConnectionTrait as _, DatabaseConnection, DbBackend, Statement};
use yardmaster::domain::{NewJob, QueueName};
use yardmaster::store::JobCommands as _;

use crate::helpers::{migrated_store, Backend, TestDatabase};

/// Pings at levels 0-9 in turn, on `queue`.
fn interleaved(count: usize, queue: &str) -> Vec<NewJob> {
    (0..count)
        .map(|n| NewJob { priority: (n % 10) as u8, queue: QueueName::parse(queue).unwrap(), ..NewJob::new("ping") })
        .collect()
}

/// (queue, level) of every job, in the table's rowid order.
async fn layout(db: &DatabaseConnection) -> Vec<(String, i64)> {
    let sql = "SELECT queue, effective_priority FROM job ORDER BY rowid";
    let rows = db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql)).await.unwrap();
    rows.iter().map(|row| (row.try_get_by_index(0).unwrap(), row.try_get_by_index(1).unwrap())).collect()
}

/// How often the next row down the table is of another queue or level.
fn changes(layout: &[(String, i64)]) -> usize {
    layout.windows(2).filter(|pair| pair[0] != pair[1]).count()
}

#[actix_rt::test]
async fn jobs_of_one_queue_and_level_lie_side_by_side() {
    let (_database, url) = TestDatabase::create(Backend::Sqlite).await;
    let (db, store) = migrated_store(&url).await;
    // Batches, single submissions (keyed and not) and two queues, the levels interleaved.
    for round in 0..3 {
        store.submit_many(interleaved(100, "default")).await.unwrap();
        store.submit_many(interleaved(50, "other")).await.unwrap();
        for n in 0..10 {
            let key = Some(format!("single-{round}-{n}"));
            let keyed = NewJob { idempotency_key: key, ..interleaved(10, "default").swap_remove(n) };
            store.submit(keyed).await.unwrap();
            store.submit(interleaved(10, "default").swap_remove(n)).await.unwrap();
        }
    }
    let layout = layout(&db).await;
    assert_eq!(layout.len(), 3 * (100 + 50 + 20));
    // Interleaved rows would change on nearly every row (509 times); each of the 20
    // (queue, level) pairs is one run here.
    assert_eq!(changes(&layout), 19, "{layout:?}");
}

#[actix_rt::test]
async fn two_stores_on_one_file_never_share_a_rowid() {
    let (_database, url) = TestDatabase::create(Backend::Sqlite).await;
    let (db, first) = migrated_store(&url).await;
    let (_, second) = migrated_store(&url).await;
    for _ in 0..5 {
        first.submit_many(interleaved(30, "default")).await.unwrap();
        second.submit_many(interleaved(30, "default")).await.unwrap();
        second.submit(NewJob::new("ping")).await.unwrap();
        first.submit(NewJob { priority: 3, ..NewJob::new("ping") }).await.unwrap();
    }
    assert_eq!(layout(&db).await.len(), 5 * 62);
}

/// A rowid handed out by a transaction that rolled back is not in the table, so another
/// store can take the rowids below it unseen; the next insert that meets one of them
/// starts its runs again after the table's last row instead of failing.
#[actix_rt::test]
async fn a_rowid_taken_unseen_is_stepped_over() {
    let (_database, url) = TestDatabase::create(Backend::Sqlite).await;
    let (db, first) = migrated_store(&url).await;
    let (_, second) = migrated_store(&url).await;
    let keyed = NewJob { idempotency_key: Some("once".into()), ..NewJob::new("ping") };
    second.submit(keyed.clone()).await.unwrap();
    first.submit(NewJob::new("ping")).await.unwrap();
    // At level 1 it cuts a run past the table's end; its insert fails on the key, and the
    // transaction rolls back (the submission answers as a conflicting retry of the key).
    let _ = first.submit(NewJob { priority: 1, ..keyed }).await;
    // The second store sees a row it did not place and starts after it.
    second.submit_many(vec![NewJob::new("ping"), NewJob::new("ping")]).await.unwrap();
    // The first store's level-0 run goes on below its rolled-back rowid, where the second's rows now are.
    first.submit(NewJob::new("ping")).await.unwrap();
    first.submit_many(interleaved(20, "default")).await.unwrap();
    assert_eq!(layout(&db).await.len(), 1 + 1 + 2 + 1 + 20);
}
