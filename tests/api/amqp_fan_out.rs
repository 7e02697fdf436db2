//! Fan-out across real processes: two worker processes on PostgreSQL and RabbitMQ run a
//! coordinator's batches and fan them in, also while one of them is killed, a cancel
//! arrives, or a batch fails.

use std::time::{Duration, Instant};

use sea_orm::{ColumnTrait, Database, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::json;
use uuid::Uuid;
use yardmaster::ops::OperationMessage;
use yardmaster::store::entity::{job, job_batch, job_event};
use yardmaster::store::{JobStore, SeaStore};
use yardmaster::transport::{AmqpTransport, Transport};

use crate::amqp_processes::{count, insert_job, Deployment, Process};
use crate::helpers::{amqp_url, seed, Backend, TestDatabase};

/// Two worker processes consuming every configured queue (jobs, batches, batch writes).
struct FanOutDeployment {
    db: DatabaseConnection,
    url: String,
    deployment: Deployment,
    first: Option<Process>,
    _second: Process,
    _database: TestDatabase,
}

impl FanOutDeployment {
    /// `counting`: run the example binary, which adds `count` and `fan_count`.
    async fn start(counting: bool) -> FanOutDeployment {
        let (database, url) = TestDatabase::create(Backend::Postgres).await;
        seed(&url, "count", 0).await;
        let deployment = Deployment::new(&url);
        let spawn = |id: &'static str| {
            let extra = [("YARDMASTER__WORKER__ID", id)];
            match counting {
                true => deployment.spawn_counting(&["worker"], &extra),
                false => deployment.spawn(&["worker"], &extra),
            }
        };
        let (first, second) = (spawn("first"), spawn("second"));
        let db = Database::connect(&url).await.unwrap();
        FanOutDeployment { db, url, deployment, first: Some(first), _second: second, _database: database }
    }

    async fn parent(&self, id: Uuid) -> job::Model {
        job::Entity::find_by_id(id).one(&self.db).await.unwrap().unwrap()
    }

    /// Polls the parent until it has `status`, with a deadline.
    async fn wait_for_parent(&self, id: Uuid, status: &str, within: Duration) -> job::Model {
        let deadline = Instant::now() + within;
        loop {
            let parent = self.parent(id).await;
            if parent.status == status {
                return parent;
            }
            assert!(Instant::now() < deadline, "parent is {} after {within:?}, expected {status}", parent.status);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls `sql` until it reaches at least `at_least`.
    async fn wait_until(&self, sql: &str, at_least: i64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while count(&self.db, sql).await < at_least {
            assert!(Instant::now() < deadline, "{sql} never reached {at_least}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn recorded_batches(&self, parent: Uuid) -> Vec<job_batch::Model> {
        job_batch::Entity::find().filter(job_batch::Column::ParentJobId.eq(parent)).all(&self.db).await.unwrap()
    }

    async fn events_named(&self, parent: Uuid, name: &str) -> Vec<job_event::Model> {
        let events = job_event::Entity::find().filter(job_event::Column::JobId.eq(parent));
        events.filter(job_event::Column::Event.eq(name)).all(&self.db).await.unwrap()
    }
}

#[actix_rt::test]
async fn ten_thousand_batches_fan_in_exactly_once_across_two_worker_processes() {
    let deployment = FanOutDeployment::start(false).await;
    let payload = json!({ "start": 1, "end": 100_000, "batch_size": 10 });
    let id = insert_job(&deployment.url, "sum_squares", payload).await;
    let parent = deployment.wait_for_parent(id, "succeeded", Duration::from_secs(300)).await;

    assert_eq!((parent.progress_current, parent.progress_total), (10_000, Some(10_000)));
    assert_eq!(parent.attempts, 1);
    let batches = deployment.recorded_batches(id).await;
    assert_eq!(batches.len(), 10_000);
    let sum: u64 = batches.iter().map(|batch| batch.output.as_ref().unwrap()["sum"].as_u64().unwrap()).sum();
    assert_eq!(sum, 100_000 * 100_001 * 200_001 / 6);
    assert_eq!(parent.result, Some(json!({ "batches": 10_000, "sum": sum })));
    assert_eq!(deployment.events_named(id, "job.succeeded").await.len(), 1);
}

#[actix_rt::test]
async fn a_batch_worker_killed_mid_run_leaves_the_parent_neither_stuck_nor_double_counted() {
    let mut deployment = FanOutDeployment::start(true).await;
    let id = insert_job(&deployment.url, "fan_count", json!({ "batches": 2000, "delay_ms": 10 })).await;
    deployment.wait_until("SELECT COUNT(*) FROM execution_log", 200).await;
    drop(deployment.first.take()); // SIGKILL, mid-batch

    let parent = deployment.wait_for_parent(id, "succeeded", Duration::from_secs(300)).await;
    assert_eq!((parent.progress_current, parent.progress_total), (2000, Some(2000)));
    assert_eq!(deployment.recorded_batches(id).await.len(), 2000);
    assert_eq!(deployment.events_named(id, "job.succeeded").await.len(), 1);
    // Batches the killed worker held were delivered again: run at least once each.
    assert!(count(&deployment.db, "SELECT COUNT(*) FROM execution_log").await >= 2000);
}

#[actix_rt::test]
async fn cancelling_mid_run_stops_the_remaining_batches() {
    let deployment = FanOutDeployment::start(true).await;
    let id = insert_job(&deployment.url, "fan_count", json!({ "batches": 2000, "delay_ms": 20 })).await;
    deployment.wait_until("SELECT COUNT(*) FROM execution_log", 100).await;
    let store = SeaStore::new(deployment.db.clone());
    assert!(store.cancel(id).await.unwrap().changed);

    // A message sent after the cancel runs once the batches before it left the queue.
    let mut amqp = yardmaster::Settings::default().transport.amqp;
    (amqp.url, amqp.queue_prefix) = (amqp_url(), deployment.deployment.prefix.clone());
    let transport = AmqpTransport::new(amqp).unwrap();
    let sentinel = OperationMessage::new("count", json!({ "tag": "sentinel" }));
    transport.publish("batches", sentinel.encode()).await.unwrap();
    deployment.wait_until("SELECT COUNT(*) FROM execution_log WHERE job_id = 'sentinel'", 1).await;

    let executed = count(&deployment.db, "SELECT COUNT(*) FROM execution_log WHERE job_id = 'ephemeral'").await;
    assert!(executed < 1000, "batches kept running after the cancel: {executed} of 2000 ran");
    let parent = deployment.parent(id).await;
    assert_eq!(parent.status, "cancelled");
    assert_eq!(parent.progress_current, deployment.recorded_batches(id).await.len() as i64);
    assert!(deployment.events_named(id, "job.succeeded").await.is_empty());
}

#[actix_rt::test]
async fn one_failing_batch_fails_the_parent_with_its_reason() {
    let deployment = FanOutDeployment::start(false).await;
    let payload = json!({ "start": 1, "end": 10_000, "batch_size": 10, "fail_batch": 7 });
    let id = insert_job(&deployment.url, "sum_squares", payload).await;
    let parent = deployment.wait_for_parent(id, "failed", Duration::from_secs(120)).await;
    assert_eq!(parent.error_code.as_deref(), Some("ChildFailed"));
    assert!(parent.error_message.as_deref().unwrap_or("").contains("batch 7"), "{:?}", parent.error_message);
    let child_failed = deployment.events_named(id, "child.failed").await;
    assert_eq!(child_failed.len(), 1);
    assert_eq!(child_failed[0].fields["batch"], 7);
}
