//! What `--wait` shows while a job runs: its events as lines on standard output and a
//! progress bar on standard error, moved by the job's progress events (`job.progress`, a
//! deferred parent's `child.succeeded` / `batch.succeeded`). On a terminal the bar is live
//! (indicatif); elsewhere (a pipe, a CI log) its final state is printed once, as a line.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use super::show;
use crate::domain::JobEvent;

/// Width of the bar, in characters.
const WIDTH: usize = 30;
const TEMPLATE: &str = "[{bar:30}] {pos}/{len} {percent}% {msg}";
const CHARS: &str = "#>-";

pub struct Progress {
    /// The live bar, when standard error is a terminal.
    bar: Option<ProgressBar>,
    current: u64,
    total: Option<u64>,
}

impl Progress {
    /// A bar for `job` as submitted.
    pub fn start(job: &Value) -> Progress {
        let total = job["progress_total"].as_u64();
        let current = job["progress_current"].as_u64().unwrap_or(0);
        let bar = super::commands::stderr_is_terminal().then(|| {
            let style = ProgressStyle::with_template(TEMPLATE)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars(CHARS);
            let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr()).with_style(style);
            bar.set_position(current);
            bar.set_message(job["status"].as_str().unwrap_or_default().to_owned());
            bar
        });
        Progress { bar, current, total }
    }

    /// Prints `event` and moves the bar by what it reports.
    pub fn event(&mut self, event: &JobEvent) {
        let line = show::event(event);
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
        if let Some(total) = event.fields.get("_progress_total").and_then(Value::as_u64) {
            self.total = Some(total);
        }
        if let Some(current) = event.fields.get("_progress_current").and_then(Value::as_u64) {
            self.current = current;
        }
        if let Some(bar) = &self.bar {
            if let Some(total) = self.total {
                bar.set_length(total);
            }
            bar.set_position(self.current);
            if let Some(status) = status_of(&event.event) {
                bar.set_message(status);
            }
        }
    }

    /// Leaves the bar at the job's final state.
    pub fn finish(mut self, job: &Value) {
        self.settle(job);
        let message = job["status"].as_str().unwrap_or_default().to_owned();
        match &self.bar {
            Some(bar) => bar.finish_with_message(message),
            None => eprintln!("{}", self.line(&message)),
        }
    }

    /// Leaves the bar where it is: the job goes on.
    pub fn abandon(mut self, job: &Value) {
        self.settle(job);
        let message = format!("{} (still going)", job["status"].as_str().unwrap_or_default());
        match &self.bar {
            Some(bar) => bar.abandon_with_message(message),
            None => eprintln!("{}", self.line(&message)),
        }
    }

    fn settle(&mut self, job: &Value) {
        if let Some(total) = job["progress_total"].as_u64() {
            self.total = Some(total);
        }
        if let Some(current) = job["progress_current"].as_u64() {
            self.current = current;
        }
        if let Some(bar) = &self.bar {
            if let Some(total) = self.total {
                bar.set_length(total);
            }
            bar.set_position(self.current);
        }
    }

    /// The bar as one line of text, as the template draws it.
    fn line(&self, message: &str) -> String {
        let Some(total) = self.total.filter(|total| *total > 0) else {
            // No progress reported: the bar says only whether it got there.
            let fill = if message == "succeeded" { "#" } else { "-" };
            return format!("[{}] {message}", fill.repeat(WIDTH));
        };
        let current = self.current.min(total);
        let filled = usize::try_from(current * WIDTH as u64 / total).unwrap_or(WIDTH);
        let mut bar = "#".repeat(filled);
        if filled < WIDTH {
            bar.push('>');
            bar.push_str(&"-".repeat(WIDTH - filled - 1));
        }
        format!("[{bar}] {current}/{total} {}% {message}", current * 100 / total)
    }
}

/// The status a lifecycle event moves the job to, for the bar's message.
fn status_of(event: &str) -> Option<String> {
    let status = match event {
        "job.started" => "running",
        "job.queued" | "job.retried" | "job.retry_later" | "job.retry_scheduled" => "queued",
        "job.deferred" => "waiting for children",
        _ => return None,
    };
    Some(status.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(current: u64, total: Option<u64>) -> Progress {
        Progress { bar: None, current, total }
    }

    #[test]
    fn the_line_draws_the_bar_as_the_template_does() {
        assert_eq!(at(10, Some(10)).line("succeeded"), format!("[{}] 10/10 100% succeeded", "#".repeat(30)));
        assert_eq!(
            at(5, Some(10)).line("running"),
            format!("[{}>{}] 5/10 50% running", "#".repeat(15), "-".repeat(14))
        );
        assert_eq!(at(0, Some(3)).line("queued"), format!("[>{}] 0/3 0% queued", "-".repeat(29)));
        assert_eq!(at(2, None).line("failed"), format!("[{}] failed", "-".repeat(30)));
        assert_eq!(at(0, None).line("succeeded"), format!("[{}] succeeded", "#".repeat(30)));
    }
}
