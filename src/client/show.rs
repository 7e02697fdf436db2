//! Jobs and events as text for people: aligned fields, one line per event, a table per
//! page. Scripts use `--json` instead; nothing here is meant to be parsed.

use std::fmt::Write as _;

use serde_json::Value;

use crate::domain::JobEvent;

/// A field's text: a string as it is, anything else as compact JSON, `-` for none.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A timestamp as hours, minutes, seconds and milliseconds (events), or as sent.
fn time_of(ts: &chrono::DateTime<chrono::Utc>) -> String {
    ts.format("%H:%M:%S%.3f").to_string()
}

/// `progress_current/progress_total (percent)`, or the count alone.
fn progress(job: &Value) -> String {
    let current = job["progress_current"].as_i64().unwrap_or(0);
    match job["progress_total"].as_i64() {
        Some(total) if total > 0 => format!("{current}/{total} ({}%)", current * 100 / total),
        _ if current > 0 => current.to_string(),
        _ => "-".to_owned(),
    }
}

/// The asked priority, and the level waiting raised it to when it differs.
fn priority(job: &Value) -> String {
    match (job["priority"].as_i64(), job["effective_priority"].as_i64()) {
        (Some(asked), Some(now)) if now != asked => format!("{asked} (raised to {now} by waiting)"),
        (Some(asked), _) => asked.to_string(),
        _ => "-".to_owned(),
    }
}

/// The line `submit` prints to standard error.
pub fn submitted(job: &Value) -> String {
    let mut line = format!("job {} {} ({}", text(&job["id"]), text(&job["status"]), text(&job["operation"]));
    if let Some(position) = job["queue_position"].as_i64() {
        let _ = write!(line, ", position {position} in {}", text(&job["queue"]));
    }
    line.push(')');
    line
}

/// A job, field by field.
pub fn job(job: &Value) -> String {
    let mut out = String::new();
    let attempts =
        format!("{} of {}", text(&job["attempts"]), job["max_retries"].as_i64().map_or(0, |retries| retries + 1));
    let rows = [
        ("id", text(&job["id"])),
        ("operation", text(&job["operation"])),
        ("status", text(&job["status"])),
        ("room", text(&job["room"])),
        ("queue", text(&job["queue"])),
        ("position", text(&job["queue_position"])),
        ("priority", priority(job)),
        ("progress", progress(job)),
        ("attempts", attempts),
        ("parent", text(&job["parent_job_id"])),
        ("created", text(&job["created_at"])),
        ("started", text(&job["started_at"])),
        ("finished", text(&job["finished_at"])),
        ("run after", text(&job["run_after"])),
        ("waiting", if job["status"] == "queued" { text(&job["waiting_since"]) } else { "-".to_owned() }),
        ("timeout", job["timeout_seconds"].as_f64().map_or_else(|| "-".to_owned(), |seconds| format!("{seconds} s"))),
        ("expires", text(&job["expires_at"])),
        ("owner", text(&job["owner"])),
        ("error", error(job)),
        ("payload", text(&job["payload"])),
        ("result", text(&job["result"])),
    ];
    for (name, value) in rows {
        if value != "-" || matches!(name, "status" | "progress") {
            let _ = writeln!(out, "{name:<10} {value}");
        }
    }
    out
}

fn error(job: &Value) -> String {
    match (job["error_code"].as_str(), job["error_message"].as_str()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        (None, Some(message)) => message.to_owned(),
        (None, None) => "-".to_owned(),
    }
}

/// What `--wait` prints when the job has ended: its result or its error.
pub fn outcome(job: &Value) -> String {
    let status = text(&job["status"]);
    let mut out = status;
    if let (Some(started), Some(finished)) = (job["started_at"].as_str(), job["finished_at"].as_str()) {
        if let (Ok(started), Ok(finished)) =
            (chrono::DateTime::parse_from_rfc3339(started), chrono::DateTime::parse_from_rfc3339(finished))
        {
            let millis = (finished - started).num_milliseconds();
            let _ = write!(out, " in {}.{:03} s", millis / 1000, millis % 1000);
        }
    }
    out.push('\n');
    let error = error(job);
    if error != "-" {
        let _ = writeln!(out, "error: {error}");
    }
    if !job["result"].is_null() {
        let _ = writeln!(out, "result: {}", text(&job["result"]));
    }
    out
}

/// An event as one line: time, name, message, then its fields as `key=value`.
pub fn event(event: &JobEvent) -> String {
    let mut line = format!("{} {:<7} {}", time_of(&event.ts), event.level.as_str(), event.event);
    if let Some(message) = &event.message {
        let _ = write!(line, " {message}");
    }
    let Some(fields) = event.fields.as_object() else {
        return line;
    };
    // Progress reads as `3/10`; the names of its fields are the protocol's, not news.
    if let Some(current) = fields.get("_progress_current") {
        let _ = write!(line, " {}", text(current));
        if let Some(total) = fields.get("_progress_total") {
            let _ = write!(line, "/{}", text(total));
        }
    }
    for (key, value) in fields.iter().filter(|(key, _)| !key.starts_with("_progress_")) {
        let _ = write!(line, " {key}={}", text(value));
    }
    line
}

/// Job summaries as a table, with a header line when `header`.
pub fn table(jobs: &[Value], header: bool) -> String {
    let mut out = String::new();
    if header {
        let _ = writeln!(
            out,
            "{:<36}  {:<9}  {:<20}  {:<12}  {:<14}  CREATED",
            "ID", "STATUS", "OPERATION", "QUEUE", "PROGRESS"
        );
    }
    for job in jobs {
        let _ = writeln!(
            out,
            "{:<36}  {:<9}  {:<20}  {:<12}  {:<14}  {}",
            text(&job["id"]),
            text(&job["status"]),
            text(&job["operation"]),
            text(&job["queue"]),
            progress(job),
            text(&job["created_at"]),
        );
    }
    out
}
