//! The client commands of the `yardmaster` binary: `submit`, `status`, `ls`, `cancel`,
//! `retry`, `events`, `upload`, `completions`. Each prints for people by default and one
//! JSON document (a JSON line per event for `events`) with `--json`. Exit codes: 0 done
//! (a waited-for job SUCCEEDED), 1 an error (the server's problem title and detail are
//! printed), 2 bad usage, and for `--wait`: [`EXIT_FAILED`], [`EXIT_CANCELLED`],
//! [`EXIT_GAVE_UP`].

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use uuid::Uuid;

use super::follow::{follow, Ended};
use super::http::{typed, Client, ListFilter};
use super::progress::Progress;
use super::{config, show};
use crate::domain::JobStatus;

/// A waited-for job ended FAILED.
pub const EXIT_FAILED: i32 = 3;
/// A waited-for job ended CANCELLED.
pub const EXIT_CANCELLED: i32 = 4;
/// `--timeout` passed before the job ended (it goes on running).
pub const EXIT_GAVE_UP: i32 = 5;

/// Where the server is, how to speak to it, how to print.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// The server [env: YARDMASTER_URL; else the client file; else http://127.0.0.1:8080].
    #[arg(long, env = "YARDMASTER_URL", hide_env = true, value_name = "URL")]
    url: Option<String>,

    /// An API token [env: YARDMASTER_TOKEN; else the client file].
    #[arg(long, env = "YARDMASTER_TOKEN", hide_env = true, hide_env_values = true, value_name = "TOKEN")]
    token: Option<String>,

    /// Print JSON (one document; one line per event for `events`) instead of text.
    #[arg(long)]
    json: bool,
}

/// The client commands.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Submit a job; with --wait, follow it to its end with a progress bar and its events.
    Submit(Box<SubmitArgs>),
    /// Show a job.
    Status(IdArgs),
    /// List jobs, newest first, with filters.
    Ls(ListArgs),
    /// Cancel jobs (QUEUED or RUNNING).
    Cancel(IdsArgs),
    /// Queue FAILED or CANCELLED jobs again.
    Retry(IdsArgs),
    /// Print a job's events; with --follow, go on until the job ends.
    Events(EventsArgs),
    /// Upload a directory holding run.sh as a job of a service; --wait, --out to fetch the
    /// result archive.
    Upload(UploadArgs),
    /// Manage schedules: create, list, pause, resume, delete, run-now.
    #[command(subcommand)]
    Schedule(Box<super::schedule::ScheduleCommand>),
    /// The queues (admins): ls, pause, resume.
    #[command(subcommand)]
    Queue(super::queue::QueueCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The operation (a built-in one, or a registered type).
    operation: String,
    /// The payload: JSON text, @FILE, or @- for standard input.
    #[arg(long, value_name = "JSON|@FILE")]
    payload: Option<String>,
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    room: Option<String>,
    /// The same key (in the same room) gives back the same job.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    #[arg(long, value_name = "N")]
    max_retries: Option<i32>,
    /// 0 (first) to 9 (last); default: the operation's, then the queue's, else 0.
    #[arg(long, value_name = "0-9", value_parser = clap::value_parser!(u8).range(0..=9))]
    priority: Option<u8>,
    /// Start no earlier than TIME (RFC 3339, e.g. 2026-12-01T02:00:00+01:00).
    #[arg(long, value_name = "TIME", value_parser = super::when::instant, conflicts_with = "after")]
    at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// Start no earlier than this long from now: 90s, 10m, 2h, 1d, 1h30m, or seconds.
    #[arg(long = "in", value_name = "SPAN", value_parser = super::when::span)]
    after: Option<Duration>,
    /// How long one run may take (a span, as --in); past it the run fails `Timeout`.
    #[arg(long, value_name = "SPAN", value_parser = super::when::span)]
    run_timeout: Option<Duration>,
    /// Wait for this job (its id; repeat for more) to succeed before queueing.
    #[arg(long = "depends-on", value_name = "ID")]
    depends_on: Vec<uuid::Uuid>,
    /// When a dependency fails or is cancelled: cancel (the default) or run.
    #[arg(long, value_name = "cancel|run", value_parser = ["cancel", "run"], requires = "depends_on")]
    on_dependency_failure: Option<String>,
    /// Cancel the job if it has not started this long after it may (a span, as --in).
    #[arg(long, value_name = "SPAN", value_parser = super::when::span)]
    expires_in: Option<Duration>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Clone, Copy, Args)]
struct WaitArgs {
    /// Follow the job to its end; exit 0 SUCCEEDED, 3 FAILED, 4 CANCELLED.
    #[arg(long)]
    wait: bool,
    /// With --wait: stop waiting after this many seconds (exit 5; the job goes on).
    #[arg(long, value_name = "SECONDS", requires = "wait")]
    timeout: Option<u64>,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    id: Uuid,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct IdsArgs {
    #[arg(required = true)]
    ids: Vec<Uuid>,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_parser = ["queued", "running", "succeeded", "failed", "cancelled"])]
    status: Option<String>,
    #[arg(long)]
    operation: Option<String>,
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    room: Option<String>,
    /// Children of this job.
    #[arg(long, value_name = "ID")]
    parent: Option<Uuid>,
    /// Jobs per page.
    #[arg(long, default_value_t = 50)]
    limit: u64,
    /// Start at this page (the cursor a previous page printed).
    #[arg(long)]
    cursor: Option<Uuid>,
    /// Every page, not only the first.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    id: Uuid,
    /// Go on printing events as they come until the job ends.
    #[arg(long, short)]
    follow: bool,
    /// Only events after this event id.
    #[arg(long, value_name = "EVENT_ID")]
    after: Option<i64>,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// The directory to upload: run.sh and the files it reads (subdirectories nest).
    dir: PathBuf,
    /// The service to run under.
    #[arg(long)]
    service: String,
    #[arg(long)]
    room: Option<String>,
    /// With --wait: write the result archive (ZIP) here once the job has ended.
    #[arg(long, value_name = "FILE", requires = "wait")]
    out: Option<PathBuf>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    shell: clap_complete::Shell,
}

/// Runs a client command; the process's exit code. `command` is the whole command line's
/// definition (for completions).
pub async fn run(command: ClientCommand, cli: clap::Command) -> anyhow::Result<i32> {
    match command {
        ClientCommand::Submit(args) => submit(*args).await,
        ClientCommand::Status(args) => {
            let (client, json) = connect(&args.remote)?;
            let job = client.job(args.id).await?;
            print_doc(json, &job, || show::job(&job));
            Ok(0)
        }
        ClientCommand::Ls(args) => list(args).await,
        ClientCommand::Cancel(args) => {
            each(args, "cancelled", |client, id| async move { client.cancel(id).await }).await
        }
        ClientCommand::Retry(args) => {
            each(args, "queued again", |client, id| async move { client.retry(id).await }).await
        }
        ClientCommand::Events(args) => events(args).await,
        ClientCommand::Upload(args) => upload(args).await,
        ClientCommand::Schedule(command) => super::schedule::run(*command).await,
        ClientCommand::Queue(command) => super::queue::run(command).await,
        ClientCommand::Completions(args) => {
            let mut cli = cli;
            clap_complete::generate(args.shell, &mut cli, "yardmaster", &mut std::io::stdout());
            Ok(0)
        }
    }
}

pub(super) fn connect(remote: &Remote) -> anyhow::Result<(Client, bool)> {
    let target = config::resolve(remote.url.clone(), remote.token.clone())?;
    Ok((Client::new(&target.url, target.token.as_deref())?, remote.json))
}

async fn submit(args: SubmitArgs) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let mut body = json!({ "operation": args.operation });
    if let Some(payload) = &args.payload {
        body["payload"] = read_payload(payload)?;
    }
    for (field, value) in [("queue", &args.queue), ("room", &args.room), ("idempotency_key", &args.idempotency_key)] {
        if let Some(value) = value {
            body[field] = json!(value);
        }
    }
    if let Some(max_retries) = args.max_retries {
        body["max_retries"] = json!(max_retries);
    }
    if let Some(priority) = args.priority {
        body["priority"] = json!(priority);
    }
    if !args.depends_on.is_empty() {
        body["depends_on"] = json!(args.depends_on);
    }
    if let Some(policy) = &args.on_dependency_failure {
        body["on_dependency_failure"] = json!(policy);
    }
    if let Some(at) = args.at {
        body["run_at"] = json!(at.to_rfc3339());
    }
    let spans = [
        ("delay_seconds", args.after),
        ("timeout_seconds", args.run_timeout),
        ("queue_timeout_seconds", args.expires_in),
    ];
    for (field, span) in spans {
        if let Some(span) = span {
            body[field] = json!(span.as_secs_f64());
        }
    }
    let job = client.submit(&body).await?;
    if !args.wait.wait {
        print_created(&job, json);
        return Ok(0);
    }
    wait_for(&client, &job, json, args.wait).await
}

/// Follows `job` to its end, showing its progress and events (text) or nothing until the
/// end (`--json`); prints the job as it ended and gives the exit code its status stands for.
async fn wait_for(client: &Client, job: &Value, json: bool, wait: WaitArgs) -> anyhow::Result<i32> {
    let id: Uuid = typed(&job["id"])?;
    if !json {
        eprintln!("{}", show::submitted(job));
    }
    let deadline = wait.timeout.map(|seconds| tokio::time::Instant::now() + Duration::from_secs(seconds));
    let mut progress = (!json).then(|| Progress::start(job));
    let ended = follow(client, id, None, deadline, |event| {
        if let Some(progress) = progress.as_mut() {
            progress.event(event);
        }
    })
    .await?;
    let job = match ended {
        Ended::Job(job) => job,
        Ended::GaveUp(last) => {
            let last = last.unwrap_or_else(|| job.clone());
            if let Some(progress) = progress {
                progress.abandon(&last);
            }
            if json {
                print_json(&last);
            }
            let status = last["status"].as_str().unwrap_or("unknown");
            eprintln!(
                "yardmaster: stopped waiting after {} s; job {id} is {status} and goes on",
                wait.timeout.unwrap_or(0)
            );
            return Ok(EXIT_GAVE_UP);
        }
    };
    if let Some(progress) = progress {
        progress.finish(&job);
    }
    if json {
        print_json(&job);
    } else {
        print!("{}", show::outcome(&job));
    }
    Ok(exit_code(&job))
}

/// The exit code a job's end stands for.
pub fn exit_code(job: &Value) -> i32 {
    match typed::<JobStatus>(&job["status"]) {
        Ok(JobStatus::Succeeded) => 0,
        Ok(JobStatus::Cancelled) => EXIT_CANCELLED,
        _ => EXIT_FAILED,
    }
}

/// `--payload`: JSON text, `@FILE`, or `@-` (standard input).
pub(super) fn read_payload(text: &str) -> anyhow::Result<Value> {
    let (what, text) = match text.strip_prefix('@') {
        Some("-") => ("standard input".to_owned(), std::io::read_to_string(std::io::stdin())?),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| anyhow::anyhow!("cannot read the payload {path}: {err}"))?;
            (path.to_owned(), text)
        }
        None => ("--payload".to_owned(), text.to_owned()),
    };
    serde_json::from_str(&text).map_err(|err| anyhow::anyhow!("the payload in {what} is not JSON: {err}"))
}

async fn list(args: ListArgs) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let mut filter = ListFilter {
        status: args.status,
        operation: args.operation,
        queue: args.queue,
        room: args.room,
        parent_job_id: args.parent,
        limit: Some(args.limit),
        cursor: args.cursor,
    };
    let mut jobs = Vec::new();
    let mut shown = 0;
    let next = loop {
        let page = client.list(&filter).await?;
        let next: Option<Uuid> = typed(&page["next_cursor"])?;
        let summaries = page["jobs"].as_array().cloned().unwrap_or_default();
        if !json {
            print!("{}", show::table(&summaries, shown == 0));
            shown += summaries.len();
        } else {
            jobs.extend(summaries);
        }
        match next {
            Some(cursor) if args.all => filter.cursor = Some(cursor),
            next => break next,
        }
    };
    if json {
        print_json(&json!({ "jobs": jobs, "next_cursor": next }));
    } else if let Some(cursor) = next {
        eprintln!("more: --cursor {cursor} (or --all)");
    } else if shown == 0 {
        eprintln!("no jobs");
    }
    Ok(0)
}

/// Applies `act` to each id in turn; every one is tried, the first error decides the code.
async fn each<F, Fut>(args: IdsArgs, done: &str, act: F) -> anyhow::Result<i32>
where
    F: Fn(Client, Uuid) -> Fut,
    Fut: std::future::Future<Output = Result<Value, super::http::ClientError>>,
{
    let (client, json) = connect(&args.remote)?;
    let mut code = 0;
    let mut jobs = Vec::new();
    for id in args.ids {
        match act(client.clone(), id).await {
            Ok(job) if json => jobs.push(job),
            Ok(_) => println!("{id} {done}"),
            Err(err) => {
                eprintln!("yardmaster: {id}: {err}");
                code = 1;
            }
        }
    }
    if json {
        print_json(&json!({ "jobs": jobs }));
    }
    Ok(code)
}

async fn events(args: EventsArgs) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let print = |event: &crate::domain::JobEvent| {
        let line = if json { serde_json::to_string(event).unwrap_or_default() } else { show::event(event) };
        let mut out = std::io::stdout().lock();
        // A closed pipe (`| head`) is not an error worth a message.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    if args.follow {
        return match follow(&client, args.id, args.after, None, print).await? {
            Ended::Job(job) => Ok(exit_code(&job)),
            Ended::GaveUp(_) => Ok(EXIT_GAVE_UP),
        };
    }
    let mut after = args.after;
    loop {
        let page = client.events(args.id, after).await?;
        if page.events.is_empty() {
            return Ok(0);
        }
        page.events.iter().for_each(print);
        after = page.events.last().map(|event| event.id);
    }
}

async fn upload(args: UploadArgs) -> anyhow::Result<i32> {
    let (client, json) = connect(&args.remote)?;
    let files = files_under(&args.dir)?;
    if !files.iter().any(|(_, name)| name == crate::uploads::sandbox::SCRIPT) {
        anyhow::bail!("{} holds no {}: the upload's entry point", args.dir.display(), crate::uploads::sandbox::SCRIPT);
    }
    let job = client.upload(&args.service, args.room.as_deref(), &files).await?;
    if !args.wait.wait {
        print_created(&job, json);
        return Ok(0);
    }
    let code = wait_for(&client, &job, json, args.wait).await?;
    if let (Some(out), 0 | EXIT_FAILED) = (&args.out, code) {
        let id: Uuid = typed(&job["id"])?;
        let bytes = client.download_result(id, out).await?;
        if !json {
            eprintln!("wrote {} ({bytes} bytes)", out.display());
        }
    }
    Ok(code)
}

/// The regular files under `dir`, each with its name in the upload (`sub/name`). Links
/// are refused rather than followed: what is uploaded is what the directory holds.
fn files_under(dir: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = pending.pop() {
        let entries =
            std::fs::read_dir(&path).map_err(|err| anyhow::anyhow!("cannot read {}: {err}", path.display()))?;
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                anyhow::bail!("{} has a name that is not UTF-8", entry.path().display());
            };
            let name = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            if kind.is_dir() {
                pending.push((entry.path(), name));
            } else if kind.is_file() {
                files.push((entry.path(), name));
            } else {
                anyhow::bail!("{} is not a regular file or directory (links are not followed)", entry.path().display());
            }
        }
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(files)
}

/// A job just made: its JSON, or its id alone on standard output (for
/// `id=$(yardmaster submit …)`) and a line for people on standard error.
pub(super) fn print_created(job: &Value, json: bool) {
    if json {
        print_json(job);
    } else {
        println!("{}", job["id"].as_str().unwrap_or_default());
        eprintln!("{}", show::submitted(job));
    }
}

fn print_doc(json: bool, doc: &Value, text: impl FnOnce() -> String) {
    if json {
        print_json(doc);
    } else {
        print!("{}", text());
    }
}

pub(super) fn print_json(doc: &Value) {
    println!("{}", serde_json::to_string_pretty(doc).unwrap_or_default());
}

/// Whether standard error is a terminal (a live bar) or not (a final line).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}
