//! The scheduler's cost (`BENCH_ONLY=scheduler`), on the embedded default and on one process
//! with PostgreSQL: CPU per second of a process whose store holds 10,000 schedules
//! (`BENCH_SCHEDULES`) that are not due, against the same process with none and its
//! scheduler off, over `BENCH_SCHEDULER_WINDOW` seconds (default 20); and the drain of
//! `jobs` pings with that scheduler on (the 10,000 idle, and 10 every-second schedules
//! firing `sleep` jobs meanwhile) against the scheduler off, in the same run; and how late
//! the ticks' jobs are submitted and started, during that drain and with 100 every-second
//! schedules and nothing else.

use std::time::Duration;

use chrono::Utc;
use sea_orm::{DatabaseConnection, EntityTrait};
use serde_json::json;
use yardmaster::schedules::entity::schedule;
use yardmaster::schedules::spec::{CatchUp, Overlap};
use yardmaster::Application;

use super::cpu::Role;
use super::{
    bench_settings, count, drain_seconds, migrated, number_or, sampler, seed, Scratch, Store, PINGS_SUCCEEDED,
};

/// One line of the group.
pub struct Line {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
    pub ratio: Option<f64>,
    pub note: String,
}

impl Line {
    pub fn print(&self) {
        let ratio = self.ratio.map(|ratio| format!("{ratio:>6.3}×")).unwrap_or_default();
        println!("scheduler {:<70} {:>10.2} {:<8} {ratio:>8}  {}", self.name, self.value, self.unit, self.note);
    }
}

pub async fn figures(jobs: usize) -> Vec<Line> {
    let schedules = number_or("BENCH_SCHEDULES", 10_000);
    let window = Duration::from_secs(number_or("BENCH_SCHEDULER_WINDOW", 20) as u64);
    let mut lines = Vec::new();
    for store in [Store::Sqlite, Store::Postgres] {
        let label = match store {
            Store::Sqlite => "embedded (SQLite)",
            Store::Postgres => "one process, PostgreSQL",
        };
        let off = idle(store, 0, false, window).await;
        let on = idle(store, schedules, true, window).await;
        lines.push(Line {
            name: format!("{label}: idle, scheduler off, no schedules"),
            value: off * 1e3,
            unit: "ms CPU/s",
            ratio: None,
            note: format!("over {} s; this process and PostgreSQL's backends", window.as_secs()),
        });
        lines.push(Line {
            name: format!("{label}: idle, scheduler on, {schedules} schedules not due"),
            value: on * 1e3,
            unit: "ms CPU/s",
            ratio: None,
            note: format!("+{:.2} ms CPU/s for the scheduler", (on - off) * 1e3),
        });
        let (without, _) = drain(store, jobs, 0, false).await;
        let (with, late) = drain(store, jobs, schedules, true).await;
        lines.push(Line {
            name: format!("{label}: {jobs} pings drained, scheduler off"),
            value: without,
            unit: "jobs/s",
            ratio: None,
            note: String::new(),
        });
        lines.push(Line {
            name: format!("{label}: {jobs} pings drained, scheduler on ({schedules} idle + 10 every second)"),
            value: with,
            unit: "jobs/s",
            ratio: Some(with / without),
            note: "ratio: to the scheduler off, same run".to_owned(),
        });
        lines.push(late.line(format!("{label}: ticks during that drain, submitted minus tick"), false));
        lines.push(late.line(format!("{label}: ticks during that drain, started minus tick (behind the pings)"), true));
        let ticking = ticking(store, 100, window).await;
        lines.push(
            ticking.line(format!("{label}: 100 every-second schedules, nothing else, submitted minus tick"), false),
        );
        lines
            .push(ticking.line(format!("{label}: 100 every-second schedules, nothing else, started minus tick"), true));
    }
    lines
}

/// `count` schedules that do not fall due in the run (yearly, on New Year's night), and
/// `firing` every-second schedules that submit a short `sleep`.
async fn fill(db: &DatabaseConnection, count: usize, firing: usize) {
    let now = Utc::now();
    let row = |n: usize, every: bool| {
        let made = schedule::Made {
            room: "default".to_owned(),
            name: format!("bench-{n}"),
            cron: (!every).then(|| "0 0 1 1 *".to_owned()),
            every_seconds: every.then_some(1.0),
            timezone: "UTC".to_owned(),
            job: json!({ "operation": "sleep", "payload": { "seconds": 0.01 } }),
            overlap: Overlap::Allow,
            catch_up: CatchUp::Last,
            max_catch_up: 10,
            paused: false,
            first: match every {
                true => now + chrono::Duration::seconds(1),
                false => now + chrono::Duration::days(400),
            },
            source: "api",
        };
        schedule::Model::made(made, now)
    };
    let rows: Vec<schedule::Model> =
        (0..count).map(|n| row(n, false)).chain((0..firing).map(|n| row(count + n, true))).collect();
    for chunk in rows.chunks(500) {
        let active = chunk.iter().cloned().map(sea_orm::IntoActiveModel::into_active_model);
        schedule::Entity::insert_many(active).exec_without_returning(db).await.unwrap();
    }
}

/// CPU seconds per second of this process and PostgreSQL's backends while an application
/// with `schedules` not due stands idle for `window`.
async fn idle(store: Store, schedules: usize, scheduler: bool, window: Duration) -> f64 {
    let scratch = Scratch::create(store).await;
    let db = migrated(&scratch.url).await;
    fill(&db, schedules, 0).await;
    let mut settings = bench_settings(&scratch.url);
    settings.scheduler.enabled = scheduler;
    let app = Application::builder(settings).without_api().build().await.unwrap();
    // Past start-up, then the window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = sampler().snapshot();
    tokio::time::sleep(window).await;
    let usage = sampler().since(&before);
    drop(app);
    db.close().await.ok();
    scratch.remove().await;
    (usage.get(Role::Bench) + usage.get(Role::Postgres)) / window.as_secs_f64()
}

/// How late the ticks' jobs were submitted and started, against the tick time in each
/// job's key, in ms, sorted.
#[derive(Default)]
struct TickLateness {
    submitted: Vec<f64>,
    started: Vec<f64>,
}

impl TickLateness {
    fn line(&self, name: String, started: bool) -> Line {
        let late = if started { &self.started } else { &self.submitted };
        let at = |q: f64| late.get(((late.len() as f64 * q) as usize).min(late.len().saturating_sub(1))).copied();
        Line {
            name,
            value: at(0.99).unwrap_or_default(),
            unit: "ms p99",
            ratio: None,
            note: format!(
                "{} ticks; p50 {:.1} ms, max {:.1} ms, early: {}",
                late.len(),
                at(0.5).unwrap_or_default(),
                late.last().copied().unwrap_or_default(),
                late.iter().filter(|ms| **ms < 0.0).count()
            ),
        }
    }
}

async fn tick_lateness(db: &DatabaseConnection) -> TickLateness {
    use sea_orm::{ColumnTrait, QueryFilter};
    use yardmaster::store::entity::job;
    let rows = job::Entity::find().filter(job::Column::IdempotencyKey.like("schedule:%")).all(db).await.unwrap();
    let (mut submitted, mut started) = (Vec::new(), Vec::new());
    for row in &rows {
        let Some(tick) = row.idempotency_key.as_deref().and_then(|key| key.splitn(3, ':').nth(2)) else { continue };
        let Ok(tick) = chrono::DateTime::parse_from_rfc3339(tick) else { continue };
        let tick = tick.with_timezone(&Utc);
        let ms = |at: chrono::DateTime<Utc>| (at - tick).num_microseconds().unwrap_or_default() as f64 / 1e3;
        submitted.push(ms(row.created_at));
        started.extend(row.started_at.map(ms));
    }
    submitted.sort_by(f64::total_cmp);
    started.sort_by(f64::total_cmp);
    TickLateness { submitted, started }
}

/// `firing` every-second schedules and nothing else, for `window`: how late their jobs are
/// submitted and started.
async fn ticking(store: Store, firing: usize, window: Duration) -> TickLateness {
    let scratch = Scratch::create(store).await;
    let db = migrated(&scratch.url).await;
    fill(&db, 0, firing).await;
    let app = Application::builder(bench_settings(&scratch.url)).without_api().build().await.unwrap();
    tokio::time::sleep(window).await;
    drop(app);
    // The last second's jobs may still be running: what started is counted.
    let late = tick_lateness(&db).await;
    db.close().await.ok();
    scratch.remove().await;
    late
}

/// Pings drained per second with the scheduler as given (and `schedules` idle plus 10
/// firing every second when on), and how late the ticks' jobs started.
async fn drain(store: Store, jobs: usize, schedules: usize, scheduler: bool) -> (f64, TickLateness) {
    let scratch = Scratch::create(store).await;
    let db = migrated(&scratch.url).await;
    if scheduler {
        fill(&db, schedules, 10).await;
    }
    seed(&scratch.url, jobs).await;
    let mut settings = bench_settings(&scratch.url);
    settings.scheduler.enabled = scheduler;
    let app = Application::builder(settings).without_api().build().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(900);
    while count(&db, PINGS_SUCCEEDED).await < jobs as i64 {
        assert!(std::time::Instant::now() < deadline, "the pings never drained");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rate = jobs as f64 / drain_seconds(&db).await;
    drop(app);
    let late = tick_lateness(&db).await;
    db.close().await.ok();
    scratch.remove().await;
    (rate, late)
}
