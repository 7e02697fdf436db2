//! Flow across real processes on PostgreSQL and RabbitMQ: an API process and three worker
//! processes. A pause reaches every worker (each gives its subscription back: the broker
//! sees no consumer of the queue) and no job starts after it; a resume starts them again.

use std::time::Duration;

use sea_orm::Database;
use serde_json::json;

use crate::amqp_processes::{broker_consumers, count, wait_for_count, Deployment};
use crate::helpers::{eventually, read, Backend, TestDatabase};

/// Consumers of this deployment's `queue` at the broker.
async fn consumers(deployment: &Deployment, queue: &str) -> Option<i64> {
    Some(broker_consumers(&format!("{}{queue}.prio", deployment.prefix)).await)
}

#[actix_rt::test]
async fn amqp_a_pause_reaches_every_worker_process_and_no_job_starts_after_it() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let _api = deployment.spawn(&["serve", "--no-workers"], &[("YARDMASTER__SERVER__BIND", &bind)]);
    let base = format!("http://{bind}");
    let client = deployment.client();
    eventually("the API to answer", Duration::from_secs(60), || async {
        client.get(format!("{base}/healthz")).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    let _workers: Vec<_> = ["first", "second", "third"]
        .into_iter()
        .map(|id| deployment.spawn(&["worker", "--queue", "default"], &[("YARDMASTER__WORKER__ID", id)]))
        .collect();
    eventually("three consumers", Duration::from_secs(60), || async {
        (consumers(&deployment, "default").await == Some(3)).then_some(())
    })
    .await;
    let jobs: Vec<_> =
        (0..400).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.05, "steps": 1 } })).collect();
    let (status, _) =
        read(client.post(format!("{base}/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await;
    assert_eq!(status, 201);
    let db = Database::connect(&url).await.unwrap();
    eventually("jobs to run", Duration::from_secs(60), || async {
        (count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'").await >= 20).then_some(())
    })
    .await;

    let (status, paused) = read(client.post(format!("{base}/admin/queues/default/pause")).send().await.unwrap()).await;
    assert_eq!((status, paused["state"].as_str()), (200, Some("paused")), "{paused}");
    // Every worker process heard of it and gave its subscription back.
    eventually("no consumer of the paused queue", Duration::from_secs(10), || async {
        (consumers(&deployment, "default").await == Some(0)).then_some(())
    })
    .await;
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'running'", 0, Duration::from_secs(30)).await;
    // A claim already under way as the pause commits may still start (its time stamped a few
    // milliseconds on, by its own process's clock): none may start a second after.
    let late = "SELECT COUNT(*) FROM job_event e JOIN job j ON j.id = e.job_id JOIN queue_state q ON q.name = j.queue \
                WHERE e.event = 'job.started' AND e.ts > q.paused_at + INTERVAL '1 second'";
    assert_eq!(count(&db, late).await, 0, "a job started over a second after its queue was paused");
    let waiting = count(&db, "SELECT COUNT(*) FROM job WHERE status = 'queued'").await;
    assert!(waiting > 0, "the pause came after every job started: nothing shows it held");

    let (status, _) = read(client.post(format!("{base}/admin/queues/default/resume")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    eventually("three consumers again", Duration::from_secs(10), || async {
        (consumers(&deployment, "default").await == Some(3)).then_some(())
    })
    .await;
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 400, Duration::from_secs(120)).await;
}

/// Limits hold across an API process and three worker processes: `max_running` 2 over
/// 500 jobs (sampled from the rows every 50 ms), a rate of 20 a second (any 21 starts span
/// a second, give or take the processes' clocks), and a partitioned limit shares the
/// workers between a key with 2,000 jobs and one with 20.
#[actix_rt::test]
async fn amqp_limits_hold_across_three_worker_processes() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let limits = [
        ("YARDMASTER__JOBS__OPERATIONS__SLEEP__MAX_RUNNING", "2"),
        ("YARDMASTER__JOBS__OPERATIONS__PING__RATE", "20"),
        ("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", "8"),
    ];
    let mut api_env = limits.to_vec();
    api_env.push(("YARDMASTER__SERVER__BIND", &bind));
    let _api = deployment.spawn(&["serve", "--no-workers"], &api_env);
    let base = format!("http://{bind}");
    let client = deployment.client();
    eventually("the API to answer", Duration::from_secs(60), || async {
        client.get(format!("{base}/healthz")).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    let _workers: Vec<_> = ["first", "second", "third"]
        .into_iter()
        .map(|id| {
            let mut env = limits.to_vec();
            env.push(("YARDMASTER__WORKER__ID", id));
            deployment.spawn(&["worker", "--queue", "default"], &env)
        })
        .collect();
    eventually("three consumers", Duration::from_secs(60), || async {
        (consumers(&deployment, "default").await == Some(3)).then_some(())
    })
    .await;
    let db = Database::connect(&url).await.unwrap();
    let submit = |jobs: Vec<serde_json::Value>| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            for chunk in jobs.chunks(400) {
                let body = json!({ "jobs": chunk });
                let (status, answer) =
                    read(client.post(format!("{base}/jobs:batch")).json(&body).send().await.unwrap()).await;
                assert_eq!(status, 201, "{answer}");
            }
        }
    };

    submit((0..500).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.005, "steps": 1 } })).collect())
        .await;
    let running =
        async || count(&db, "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running'").await;
    let done = async || count(&db, "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'succeeded'").await;
    let most = crate::limits::sample_running(running, done, 500).await;
    assert!(most <= 2, "{most} sleep jobs RUNNING at once under max_running 2, across three processes");

    submit((0..100).map(|_| json!({ "operation": "ping" })).collect()).await;
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM job WHERE operation = 'ping' AND status = 'succeeded'",
        100,
        Duration::from_secs(60),
    )
    .await;
    let starts: Vec<chrono::DateTime<chrono::Utc>> = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
        use yardmaster::store::entity::job;
        job::Entity::find()
            .select_only()
            .column(job::Column::StartedAt)
            .filter(job::Column::Operation.eq("ping"))
            .order_by_asc(job::Column::StartedAt)
            .into_tuple::<Option<chrono::DateTime<chrono::Utc>>>()
            .all(&db)
            .await
            .unwrap()
            .into_iter()
            .flatten()
            .collect()
    };
    for window in starts.windows(21) {
        let span = window[20] - window[0];
        assert!(span >= chrono::Duration::milliseconds(950), "21 starts within {span} under a rate of 20/s");
    }

    let job = |tenant: &str| json!({ "operation": "sleep", "concurrency_key": tenant, "payload": { "seconds": 0.05, "steps": 1 } });
    // The limit of sleep is partitioned by the submission's key: 2 of each key at once.
    submit((0..2000).map(|_| job("big")).collect()).await;
    submit((0..20).map(|_| job("small")).collect()).await;
    wait_for_count(
        &db,
        "SELECT COUNT(*) FROM job WHERE limit_key LIKE '%small' AND status = 'succeeded'",
        20,
        Duration::from_secs(60),
    )
    .await;
    let big = count(&db, "SELECT COUNT(*) FROM job WHERE limit_key LIKE '%big' AND status = 'succeeded'").await;
    assert!(big < 200, "{big} of the big key's 2,000 jobs finished before the small key's 20");
}
