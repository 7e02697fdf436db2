//! Following one job to its end: its events as the server streams them (SSE), each handed
//! over once and in order. A broken stream or a server away for a redeploy is resumed with
//! `Last-Event-ID` (after a pause that grows to [`MAX_PAUSE`]); the job's state read after
//! the stream ends decides whether it is over.

use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::Value;
use tokio::time::Instant;
use uuid::Uuid;

use super::http::{typed, Client, ClientError};
use super::sse;
use crate::domain::{JobEvent, JobStatus};

/// Longest pause between tries to reach a server that is away.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// How long the last look at a job given up on may take.
const LAST_LOOK: Duration = Duration::from_secs(5);

/// How following ended.
#[derive(Debug)]
pub enum Ended {
    /// The job is over: its last state, as the server sent it.
    Job(Value),
    /// The deadline passed first: the job as it was then (read once more), or as last read.
    GaveUp(Option<Value>),
}

/// Follows job `id` from after event `after` until it ends or `deadline` passes, calling
/// `on_event` with each event.
pub async fn follow(
    client: &Client,
    id: Uuid,
    mut after: Option<i64>,
    deadline: Option<Instant>,
    mut on_event: impl FnMut(&JobEvent),
) -> Result<Ended, ClientError> {
    let mut pause = Duration::from_millis(100);
    let mut last_job = None;
    loop {
        let before = after;
        let streamed = within(deadline, read_stream(client, id, &mut after, &mut on_event)).await;
        let broken = match streamed {
            None => return give_up(client, id, &mut after, &mut on_event, last_job).await,
            Some(Ok(())) => false,
            Some(Err(err)) if err.is_transient() => true,
            Some(Err(err)) => return Err(err),
        };
        if !broken {
            if after != before {
                pause = Duration::from_millis(100);
            }
            match within(deadline, client.job(id)).await {
                None => return give_up(client, id, &mut after, &mut on_event, last_job).await,
                Some(Ok(job)) => {
                    let status: JobStatus = typed(&job["status"])?;
                    if status.is_terminal() {
                        // The stream may have ended for a drain just as the job did: read
                        // what it had not sent yet.
                        read_rest(client, id, &mut after, &mut on_event).await?;
                        return Ok(Ended::Job(job));
                    }
                    last_job = Some(job);
                    // A stream that ended at once (a server draining) is not reopened at once.
                    if after != before {
                        continue;
                    }
                }
                Some(Err(err)) if err.is_transient() => {}
                Some(Err(err)) => return Err(err),
            }
        }
        if deadline.is_some_and(|deadline| Instant::now() + pause >= deadline) {
            return give_up(client, id, &mut after, &mut on_event, last_job).await;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// The deadline passed: the job as it is now (one more read, not the state it was submitted
/// in); one that ended meanwhile is reported as ended, its last events handed over first.
async fn give_up(
    client: &Client,
    id: Uuid,
    after: &mut Option<i64>,
    on_event: &mut impl FnMut(&JobEvent),
    last_job: Option<Value>,
) -> Result<Ended, ClientError> {
    let Ok(Ok(job)) = tokio::time::timeout(LAST_LOOK, client.job(id)).await else {
        return Ok(Ended::GaveUp(last_job));
    };
    let status: JobStatus = typed(&job["status"])?;
    if status.is_terminal() {
        read_rest(client, id, after, on_event).await?;
        return Ok(Ended::Job(job));
    }
    Ok(Ended::GaveUp(Some(job)))
}

/// Reads one connection's events until the server ends it.
async fn read_stream(
    client: &Client,
    id: Uuid,
    after: &mut Option<i64>,
    on_event: &mut impl FnMut(&JobEvent),
) -> Result<(), ClientError> {
    let response = client.stream(id, *after).await?;
    let url = response.url().to_string();
    let mut body = response.bytes_stream();
    let mut parser = sse::Parser::default();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|err| ClientError::Unreachable { url: url.clone(), reason: err.to_string() })?;
        for frame in parser.push(&piece) {
            let event: JobEvent = serde_json::from_str(&frame.data).map_err(|err| ClientError::Unexpected {
                status: 200,
                url: url.clone(),
                body: format!("an event that is not a job event ({err}): {}", frame.data),
            })?;
            if after.is_some_and(|after| event.id <= after) {
                continue;
            }
            *after = Some(event.id);
            on_event(&event);
        }
    }
    Ok(())
}

/// Reads the events after `after` page by page.
async fn read_rest(
    client: &Client,
    id: Uuid,
    after: &mut Option<i64>,
    on_event: &mut impl FnMut(&JobEvent),
) -> Result<(), ClientError> {
    loop {
        let page = client.events(id, *after).await?;
        if page.events.is_empty() {
            return Ok(());
        }
        for event in &page.events {
            if after.is_none_or(|after| event.id > after) {
                *after = Some(event.id);
                on_event(event);
            }
        }
    }
}

/// `future`'s output, or `None` when `deadline` passes first.
async fn within<T>(deadline: Option<Instant>, future: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}
