//! `GET /metrics`: the recorder's counters and histograms, then gauges of the queues read
//! from the store now (jobs QUEUED and RUNNING by queue, the oldest waiting job's age, jobs
//! held by limits and waiting for dependencies),
//! over the status index, so they are right after any restart and never drift.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use actix_web::{web, HttpResponse};

use crate::http::{ApiError, AppState, Code};
use crate::store::clock;
use crate::store::QueueFigures as Queue;
use crate::telemetry::metrics;

/// Prometheus's text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Metrics in Prometheus text (admins: the figures span every room).
#[utoipa::path(
    get, path = "/metrics", tag = "operations", operation_id = "get_metrics",
    responses(
        (status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String),
        (status = 401, description = "`unauthenticated`", body = crate::http::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`forbidden`: an admin token is needed", body = crate::http::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`metrics_unavailable`: another metrics recorder owns this process", body = crate::http::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let Some(handle) = metrics::handle() else {
        return Err(ApiError::new(Code::MetricsUnavailable, "this process has another metrics recorder"));
    };
    handle.run_upkeep();
    let mut text = handle.render();
    let queues = queue_gauges(&state).await;
    let _ = writeln!(text, "# HELP yardmaster_store_up Whether the store answered this scrape's queries");
    let _ = writeln!(text, "# TYPE yardmaster_store_up gauge");
    let _ = writeln!(text, "yardmaster_store_up {}", u8::from(queues.is_some()));
    if let Some(queues) = queues {
        render_queues(&mut text, &queues);
    }
    if let Ok(holding) = state.store.holding().await {
        render_held(&mut text, &holding);
    }
    if let Ok(waiting) = crate::store::overview::waiting_for_dependencies(&state.db).await {
        let name = "yardmaster_jobs_waiting";
        let _ = writeln!(text, "# HELP {name} Jobs QUEUED that wait for their dependencies, by queue");
        let _ = writeln!(text, "# TYPE {name} gauge");
        for (queue, waiting) in waiting {
            let _ = writeln!(text, "{name}{{queue=\"{}\"}} {waiting}", escape(&queue));
        }
    }
    Ok(HttpResponse::Ok().content_type(CONTENT_TYPE).body(text))
}

/// Every configured queue (at 0 when empty) and every queue with live jobs.
async fn queue_gauges(state: &AppState) -> Option<BTreeMap<String, Queue>> {
    let queues: Vec<String> = state.job_queues.iter().cloned().collect();
    state
        .store
        .queue_figures(&queues, None)
        .await
        .map_err(|err| tracing::warn!(error = %err, "queue gauges not read"))
        .ok()
}

/// A gauge family: its name, its help, and its value of a queue.
type Family<'a> = (&'a str, &'a str, &'a dyn Fn(&Queue) -> f64);

fn render_queues(text: &mut String, queues: &BTreeMap<String, Queue>) {
    let now = clock::now();
    let families: [Family; 3] = [
        ("yardmaster_queue_depth", "Jobs QUEUED, by queue", &|queue| queue.queued as f64),
        ("yardmaster_jobs_running", "Jobs RUNNING, by queue", &|queue| queue.running as f64),
        (
            "yardmaster_queue_oldest_age_seconds",
            "How long the longest-waiting QUEUED job has been due, by queue (0 when none waits)",
            &|queue| queue.oldest_due.map_or(0.0, |due| ((now - due).num_milliseconds().max(0) as f64) / 1000.0),
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(text, "# HELP {name} {help}");
        let _ = writeln!(text, "# TYPE {name} gauge");
        for (queue, figures) in queues {
            let _ = writeln!(text, "{name}{{queue=\"{}\"}} {}", escape(queue), value(figures));
        }
    }
}

/// Jobs held QUEUED by each limit rule (its partitions summed: a tenant is no label).
fn render_held(text: &mut String, holding: &[(String, i64)]) {
    let mut by_rule: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, held) in holding {
        *by_rule.entry(crate::domain::Limit::split(key).0).or_default() += held;
    }
    let name = "yardmaster_jobs_held";
    let _ = writeln!(text, "# HELP {name} Jobs QUEUED that their limit holds (max_running or rate), by limit");
    let _ = writeln!(text, "# TYPE {name} gauge");
    for (rule, held) in by_rule {
        let _ = writeln!(text, "{name}{{limit=\"{}\"}} {held}", escape(rule));
    }
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
