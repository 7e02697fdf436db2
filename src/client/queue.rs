//! `yardmaster queue …`: the queues with their state and figures, and pausing and resuming
//! one (`/admin/queues`; an admin's token).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::commands::{connect, print_json, Remote};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List the queues: running or paused, jobs waiting and running, the longest wait.
    Ls(LsArgs),
    /// Start nothing new from a queue (on every process) until it is resumed; running jobs
    /// finish, submissions are accepted and wait.
    Pause(NameArgs),
    /// Start a paused queue's jobs again.
    Resume(NameArgs),
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    remote: Remote,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// A job queue of the deployment, `@remote` or `@scripts`.
    name: String,
    #[command(flatten)]
    remote: Remote,
}

pub async fn run(command: QueueCommand) -> anyhow::Result<i32> {
    match command {
        QueueCommand::Ls(args) => {
            let (client, json) = connect(&args.remote)?;
            let list = client.call(Method::GET, "/admin/queues", None).await?;
            match json {
                true => print_json(&list),
                false => print!("{}", table(list["queues"].as_array().map_or(&[][..], Vec::as_slice))),
            }
            Ok(0)
        }
        QueueCommand::Pause(args) => change(args, "pause", "paused").await,
        QueueCommand::Resume(args) => change(args, "resume", "resumed").await,
    }
}

async fn change(args: NameArgs, action: &str, done: &str) -> anyhow::Result<i32> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let bare = args.name.strip_prefix('@').unwrap_or(&args.name);
    if bare.is_empty() || bare.len() > 64 || !bare.chars().all(valid) {
        anyhow::bail!(
            "{:?} is not a queue name (1-64 of letters, digits, '.', '_', '-'; or @remote, @scripts)",
            args.name
        );
    }
    let (client, json) = connect(&args.remote)?;
    let queue = client.call(Method::POST, &format!("/admin/queues/{}/{action}", args.name), None).await?;
    match json {
        true => print_json(&queue),
        false => eprintln!("queue {} {done}", args.name),
    }
    Ok(0)
}

fn table(queues: &[Value]) -> String {
    let mut out = format!("{:<24} {:<8} {:>8} {:>8} {:>12}\n", "QUEUE", "STATE", "WAITING", "RUNNING", "OLDEST (s)");
    for queue in queues {
        out.push_str(&format!(
            "{:<24} {:<8} {:>8} {:>8} {:>12.1}\n",
            queue["name"].as_str().unwrap_or_default(),
            queue["state"].as_str().unwrap_or_default(),
            queue["queued"].as_i64().unwrap_or(0),
            queue["running"].as_i64().unwrap_or(0),
            queue["oldest_wait_seconds"].as_f64().unwrap_or(0.0),
        ));
    }
    out
}
