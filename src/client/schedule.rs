//! `yardmaster schedule …`: create, list, pause, resume, delete and run now the schedules
//! of `/schedules`. A schedule is named by its name (in `--room`, else the only one of that
//! name the token sees) or by its id.

use std::time::Duration;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use super::commands::{connect, print_created, print_json, read_payload, Remote};
use super::http::Client;

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule: a job submitted on every tick of --cron or --every.
    Create(Box<CreateArgs>),
    /// List schedules with their next fire time.
    List(ListArgs),
    /// Stop firing a schedule until it is resumed.
    Pause(NameArgs),
    /// Fire a paused schedule again, from its next tick (missed ticks are not caught up).
    Resume(NameArgs),
    /// Delete a schedule (its jobs stay).
    Delete(NameArgs),
    /// Submit the schedule's job now, outside its ticks.
    RunNow(NameArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Unique in its room.
    name: String,
    /// A cron expression (5 fields, 6 with seconds first, or @hourly, @daily, …).
    #[arg(long, value_name = "EXPR", required_unless_present = "every", conflicts_with = "every")]
    cron: Option<String>,
    /// A period: 90s, 10m, 2h, 1d, or seconds (at least 1 s).
    #[arg(long, value_name = "SPAN", value_parser = super::when::span)]
    every: Option<Duration>,
    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long, value_name = "ZONE")]
    timezone: Option<String>,
    /// The operation each tick submits.
    #[arg(long)]
    operation: String,
    /// Its payload: JSON text, @FILE, or @- for standard input.
    #[arg(long, value_name = "JSON|@FILE")]
    payload: Option<String>,
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    room: Option<String>,
    #[arg(long, value_name = "N")]
    max_retries: Option<i32>,
    /// How long one run may take (a span); past it the run fails `Timeout`.
    #[arg(long, value_name = "SPAN", value_parser = super::when::span)]
    run_timeout: Option<Duration>,
    /// While the last tick's job is unfinished: skip (default), allow, cancel_previous.
    #[arg(long, value_parser = ["allow", "skip", "cancel_previous"])]
    overlap: Option<String>,
    /// After downtime: last (default), all (up to --max-catch-up), none.
    #[arg(long, value_parser = ["none", "last", "all"])]
    catch_up: Option<String>,
    #[arg(long, value_name = "N")]
    max_catch_up: Option<u32>,
    /// Create it paused.
    #[arg(long)]
    paused: bool,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    room: Option<String>,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The schedule's name or id.
    schedule: String,
    /// The room of a schedule named by name.
    #[arg(long)]
    room: Option<String>,
    #[command(flatten)]
    remote: Remote,
}

pub async fn run(command: ScheduleCommand) -> anyhow::Result<i32> {
    match command {
        ScheduleCommand::Create(args) => create(args).await,
        ScheduleCommand::List(args) => {
            let (client, json) = connect(&args.remote)?;
            let schedules = all(&client, args.room.as_deref()).await?;
            match json {
                true => print_json(&json!({ "schedules": schedules })),
                false => print!("{}", table(&schedules)),
            }
            Ok(0)
        }
        ScheduleCommand::Pause(args) => patch(args, json!({ "paused": true }), "paused").await,
        ScheduleCommand::Resume(args) => patch(args, json!({ "paused": false }), "resumed").await,
        ScheduleCommand::Delete(args) => {
            let (client, json) = connect(&args.remote)?;
            let id = resolve(&client, &args.schedule, args.room.as_deref()).await?;
            client.send(client.request(Method::DELETE, &format!("/schedules/{id}"))).await?;
            match json {
                true => print_json(&json!({ "deleted": id })),
                false => eprintln!("schedule {} deleted", args.schedule),
            }
            Ok(0)
        }
        ScheduleCommand::RunNow(args) => {
            let (client, json) = connect(&args.remote)?;
            let id = resolve(&client, &args.schedule, args.room.as_deref()).await?;
            let job = client.call(Method::POST, &format!("/schedules/{id}/run"), None).await?;
            print_created(&job, json);
            Ok(0)
        }
    }
}

async fn create(args: Box<CreateArgs>) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let mut job = json!({ "operation": args.operation });
    if let Some(payload) = &args.payload {
        job["payload"] = read_payload(payload)?;
    }
    if let Some(queue) = &args.queue {
        job["queue"] = json!(queue);
    }
    if let Some(max_retries) = args.max_retries {
        job["max_retries"] = json!(max_retries);
    }
    if let Some(timeout) = args.run_timeout {
        job["timeout_seconds"] = json!(timeout.as_secs_f64());
    }
    let mut body = json!({ "name": args.name, "job": job, "paused": args.paused });
    let fields = [
        ("cron", args.cron.map(Value::from)),
        ("every_seconds", args.every.map(|every| json!(every.as_secs_f64()))),
        ("timezone", args.timezone.map(Value::from)),
        ("room", args.room.map(Value::from)),
        ("overlap", args.overlap.map(Value::from)),
        ("catch_up", args.catch_up.map(Value::from)),
        ("max_catch_up", args.max_catch_up.map(Value::from)),
    ];
    for (field, value) in fields {
        if let Some(value) = value {
            body[field] = value;
        }
    }
    let created = client.call(Method::POST, "/schedules", Some(&body)).await?;
    match json {
        true => print_json(&created),
        false => {
            println!("{}", created["id"].as_str().unwrap_or_default());
            eprintln!(
                "schedule {} created; next tick {}",
                created["name"].as_str().unwrap_or_default(),
                next(&created)
            );
        }
    }
    Ok(0)
}

async fn patch(args: NameArgs, body: Value, done: &str) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let id = resolve(&client, &args.schedule, args.room.as_deref()).await?;
    let changed = client.call(Method::PATCH, &format!("/schedules/{id}"), Some(&body)).await?;
    match json {
        true => print_json(&changed),
        false => eprintln!("schedule {} {done}; next tick {}", args.schedule, next(&changed)),
    }
    Ok(0)
}

fn next(schedule: &Value) -> String {
    schedule["next_fire_at"].as_str().unwrap_or("none (paused)").to_owned()
}

/// Every schedule the token sees (of `room`), page after page.
async fn all(client: &Client, room: Option<&str>) -> anyhow::Result<Vec<Value>> {
    let mut schedules = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit", "200".to_owned())];
        query.extend(room.map(|room| ("room", room.to_owned())));
        query.extend(cursor.take().map(|cursor| ("cursor", cursor)));
        let page = client.send(client.request(Method::GET, "/schedules").query(&query)).await?;
        let page: Value = page.json().await?;
        schedules.extend(page["schedules"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(schedules),
        }
    }
}

/// The id of the schedule named `schedule` (a name, or an id as it is).
async fn resolve(client: &Client, schedule: &str, room: Option<&str>) -> anyhow::Result<Uuid> {
    if let Ok(id) = Uuid::parse_str(schedule) {
        return Ok(id);
    }
    let named: Vec<Value> = all(client, room).await?.into_iter().filter(|s| s["name"] == schedule).collect();
    match named.as_slice() {
        [one] => Ok(one["id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok())
            .ok_or_else(|| anyhow::anyhow!("the server answered a schedule without an id"))?),
        [] => anyhow::bail!(
            "no schedule named {schedule:?}{}",
            room.map(|room| format!(" in room {room:?}")).unwrap_or_default()
        ),
        _ => anyhow::bail!("several rooms have a schedule named {schedule:?}: give --room"),
    }
}

fn table(schedules: &[Value]) -> String {
    let mut out = format!("{:<24} {:<12} {:<28} {:<25} {}\n", "NAME", "ROOM", "WHEN", "NEXT", "LAST JOB");
    for s in schedules {
        let when = match (s["cron"].as_str(), s["every_seconds"].as_f64()) {
            (Some(cron), _) => format!("{cron} {}", s["timezone"].as_str().unwrap_or("UTC")),
            (None, Some(every)) => format!("every {every}s"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:<24} {:<12} {:<28} {:<25} {}\n",
            s["name"].as_str().unwrap_or_default(),
            s["room"].as_str().unwrap_or_default(),
            when,
            next(s),
            s["last_job_id"].as_str().unwrap_or("-"),
        ));
    }
    out
}
