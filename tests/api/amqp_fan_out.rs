//! Fan-out across real processes: two worker processes on PostgreSQL and RabbitMQ run a
//! coordinator's batches and fan them in, also while one of them is killed, a cancel
//! arrives, or a batch fails.

use std::process::Command;
use std::time::Duration;

use sea_orm::{ColumnTrait, Database, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::json;
use uuid::Uuid;
use yardmaster::domain::JobStatus;
use yardmaster::ops::OperationMessage;
use yardmaster::store::entity::{job, job_batch, job_event};
use yardmaster::store::{JobCommands, SeaStore};
use yardmaster::transport::{AmqpTransport, Transport};

use crate::amqp_processes::{count, insert_job, Deployment, Process};
use crate::helpers::{amqp_url, eventually, seed, Backend, TestDatabase};

/// Worker processes consuming every configured queue (jobs, batches, batch writes).
struct FanOutDeployment {
    db: DatabaseConnection,
    url: String,
    deployment: Deployment,
    counting: bool,
    /// `batches_per_message` of the `batches` queue in every worker.
    per_message: usize,
    first: Option<Process>,
    second: Option<Process>,
    _database: TestDatabase,
}

impl FanOutDeployment {
    /// Two workers, `first` and `second`. `counting`: run the example binary, which adds
    /// `count` and `fan_count`.
    async fn start(counting: bool) -> FanOutDeployment {
        let mut deployment = FanOutDeployment::start_first(counting, 1).await;
        deployment.second = Some(deployment.spawn("second"));
        deployment
    }

    /// Only the worker `first`, its batches `per_message` to a message.
    async fn start_first(counting: bool, per_message: usize) -> FanOutDeployment {
        let (database, url) = TestDatabase::create(Backend::Postgres).await;
        seed(&url, "count", 0).await;
        let db = Database::connect(&url).await.unwrap();
        let deployment = Deployment::new(&url);
        let mut started = FanOutDeployment {
            db,
            url,
            deployment,
            counting,
            per_message,
            first: None,
            second: None,
            _database: database,
        };
        started.first = Some(started.spawn("first"));
        started
    }

    fn spawn(&self, id: &str) -> Process {
        let per_message = self.per_message.to_string();
        let extra =
            [("YARDMASTER__WORKER__ID", id), ("YARDMASTER__QUEUES__BATCHES__BATCHES_PER_MESSAGE", &per_message)];
        match self.counting {
            true => self.deployment.spawn_counting(&["worker"], &extra),
            false => self.deployment.spawn(&["worker"], &extra),
        }
    }

    /// (ready, unacknowledged) messages of this deployment's `queue` at the broker.
    async fn broker_queue(&self, queue: &str) -> (i64, i64) {
        let name = format!("{}{queue}.prio", self.deployment.prefix);
        let vhost = amqp_url().rsplit('/').next().unwrap().replace("%2f", "/").replace("%2F", "/");
        let output = actix_rt::task::spawn_blocking(move || {
            let columns = ["name", "messages_ready", "messages_unacknowledged"];
            let args = ["-q", "--no-table-headers", "list_queues", "-p", &vhost];
            Command::new("rabbitmqctl").args(args).args(columns).output().expect("rabbitmqctl runs")
        })
        .await
        .unwrap();
        let listing = String::from_utf8_lossy(&output.stdout).into_owned();
        let row = listing.lines().map(|line| line.split('\t').collect::<Vec<_>>()).find(|row| row[0] == name);
        let row = row.unwrap_or_else(|| panic!("no queue {name} in {listing}"));
        (row[1].trim().parse().unwrap(), row[2].trim().parse().unwrap())
    }

    async fn parent(&self, id: Uuid) -> job::Model {
        job::Entity::find_by_id(id).one(&self.db).await.unwrap().unwrap()
    }

    /// Polls the parent until it has `status`, with a deadline.
    async fn wait_for_parent(&self, id: Uuid, status: &str, within: Duration) -> job::Model {
        eventually(&format!("parent is {status}"), within, || async {
            let parent = self.parent(id).await;
            (parent.status.as_str() == status).then_some(parent)
        })
        .await
    }

    /// Polls `sql` until it reaches at least `at_least`.
    async fn wait_until(&self, sql: &str, at_least: i64) {
        eventually(&format!("{sql} reached {at_least}"), Duration::from_secs(120), || async {
            (count(&self.db, sql).await >= at_least).then_some(())
        })
        .await;
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

/// A batch worker killed mid-run held deliveries (a batch is acknowledged only once it
/// ran): the broker delivers them again, to the other worker, and the parent closes once,
/// every batch counted once. The other worker starts only after the kill, so every batch
/// still to run then, the killed worker's included, can only have run there.
#[actix_rt::test]
async fn a_batch_worker_killed_mid_run_leaves_the_parent_neither_stuck_nor_double_counted() {
    killed_mid_run(1).await;
}

/// The same with 32 batches to a message (`batches_per_message`): a message half run when
/// its worker dies comes back whole, and what it had recorded still counts once.
#[actix_rt::test]
async fn a_worker_killed_mid_message_of_batches_leaves_every_batch_counted_once() {
    killed_mid_run(32).await;
}

async fn killed_mid_run(per_message: usize) {
    let mut deployment = FanOutDeployment::start_first(true, per_message).await;
    let id = insert_job(&deployment.url, "fan_count", json!({ "batches": 2000, "delay_ms": 10 })).await;
    deployment.wait_until("SELECT COUNT(*) FROM execution_log", 200).await;
    let (ready, held) = eventually("the worker held a batch delivery", Duration::from_secs(60), || async {
        // The only consumer: what the broker sees unacknowledged, it holds.
        let (ready, held) = deployment.broker_queue("batches").await;
        (held > 0).then_some((ready, held))
    })
    .await;
    drop(deployment.first.take()); // SIGKILL, mid-batch
    let recorded_at_kill = deployment.recorded_batches(id).await.len();
    assert!(recorded_at_kill < 2000, "the killed worker had finished");
    // 2,000 batches, `per_message` to a message: the broker holds that many messages at most.
    let most = 2000_u64.div_ceil(per_message as u64) as i64;
    assert!(ready + held <= most, "{ready} ready and {held} held: more than {most} messages");
    // The broker takes back what the dead worker held: nothing is unacknowledged any more.
    eventually("the broker took the dead worker's deliveries back", Duration::from_secs(60), || async {
        (deployment.broker_queue("batches").await.1 <= 0).then_some(())
    })
    .await;
    assert!(deployment.broker_queue("batches").await.0 > 0, "batches are left for the other worker");

    deployment.second = Some(deployment.spawn("second"));
    let parent = deployment.wait_for_parent(id, "succeeded", Duration::from_secs(120)).await;
    assert_eq!((parent.progress_current, parent.progress_total), (2000, Some(2000)));
    assert_eq!(deployment.recorded_batches(id).await.len(), 2000);
    assert_eq!(deployment.events_named(id, "job.succeeded").await.len(), 1);
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
    assert_eq!(parent.status, JobStatus::Cancelled);
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
