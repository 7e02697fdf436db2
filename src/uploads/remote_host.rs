//! `yardmaster script-host`: runs uploaded scripts on a host that shares nothing with the
//! server but HTTP. It registers as a remote worker serving upload services, claims with
//! `POST /scripts/claim` (held with `Prefer: wait`), downloads the upload (resuming a
//! broken download with `Range`, each file checked against its SHA-256), runs `run.sh` in
//! the same sandbox as a local host, sends the archive back in pieces (resuming where the
//! server says it stopped) and reports with `PATCH /tasks/{id}`. Its heartbeat renews the
//! leases of its runs and stops those the server says to (a cancel): while it runs
//! something, each beat is held by the server (`Prefer: wait`) and answered as soon as a
//! run is cancelled, and the next is sent at once. SIGTERM: runs get
//! `--grace-seconds` to finish, then are killed and handed back (`DELETE /workers/{id}`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::files::{BlobStore as _, LocalFiles};
use super::run_script::{self, Place};
use super::sandbox::Limits;
use super::workspace::Workspace;
use crate::domain::Job;
use crate::ops::OperationError;

/// Bytes per piece of an archive sent back.
const PIECE: u64 = 8 << 20;
/// Tries of a download or an upload before the run is given up (its lease then lapses and
/// the reaper requeues it).
const TRIES: u32 = 5;

/// What `script-host` is told.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub url: String,
    pub token: String,
    pub services: Vec<String>,
    pub slots: usize,
    pub dir: PathBuf,
    pub name: Option<String>,
    pub grace: Duration,
}

#[derive(Debug, Deserialize)]
struct Registered {
    id: Uuid,
    heartbeat_seconds: u64,
}

#[derive(Debug, Deserialize)]
struct Claimed {
    task: Option<Job>,
    limits: Option<Limits>,
}

#[derive(Debug, Deserialize)]
struct Beat {
    stop: Vec<StopRun>,
}

#[derive(Debug, Deserialize)]
struct StopRun {
    id: Uuid,
    attempt: i32,
}

/// The runs under way: their cancellation, by (job, attempt).
type Held = Arc<Mutex<HashMap<(Uuid, i32), CancellationToken>>>;

struct Host {
    http: reqwest::Client,
    options: HostOptions,
    /// This host's copies of the uploads it runs (fetched over HTTP) and their archives.
    copies: LocalFiles,
    workspace: Workspace,
    worker: Uuid,
    held: Held,
    /// Woken when a run is added to `held`: the beat under way does not name it yet.
    held_more: tokio::sync::Notify,
}

/// Runs the host until SIGTERM or SIGINT; the process's exit code.
pub async fn run(options: HostOptions) -> anyhow::Result<i32> {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {}", options.token);
    headers.insert(reqwest::header::AUTHORIZATION, bearer.parse().context("the token is not a header value")?);
    let http =
        reqwest::Client::builder().default_headers(headers).pool_idle_timeout(crate::http::CLIENT_IDLE).build()?;
    tokio::fs::create_dir_all(&options.dir).await.with_context(|| format!("creating {}", options.dir.display()))?;
    let body = json!({ "name": options.name, "services": options.services });
    let response = http.post(format!("{}/workers", options.url)).json(&body).send().await?;
    let registered: Registered = answer(response).await.context("registering")?;
    tracing::info!(worker_id = %registered.id, services = ?options.services, "script host registered");
    let (copies, workspace) = (LocalFiles::open(&options.dir)?, Workspace::open(&options.dir)?);
    let held_more = tokio::sync::Notify::new();
    let host =
        Arc::new(Host { http, options, copies, workspace, worker: registered.id, held: Held::default(), held_more });
    let stop = CancellationToken::new();
    let beat =
        tokio::spawn(heartbeat(host.clone(), Duration::from_secs(registered.heartbeat_seconds.max(1)), stop.clone()));
    let slots: Vec<_> =
        (0..host.options.slots.max(1)).map(|_| tokio::spawn(slot(host.clone(), stop.clone()))).collect();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("script host stopping: no new claims; runs get the grace period");
    stop.cancel();
    let all = futures_util::future::join_all(slots);
    if tokio::time::timeout(host.options.grace, all).await.is_err() {
        let held: Vec<CancellationToken> =
            host.held.lock().map(|held| held.values().cloned().collect()).unwrap_or_default();
        held.iter().for_each(CancellationToken::cancel);
    }
    // Whatever is still ours goes back to the queue at once.
    let _ = host.http.delete(format!("{}/workers/{}", host.options.url, host.worker)).send().await;
    beat.abort();
    super::sandbox::kill_all();
    Ok(crate::actors::EXIT_CODE)
}

/// An answer's JSON, or its problem as an error.
async fn answer<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> anyhow::Result<T> {
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        let problem: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        anyhow::bail!(
            "{status}: {} ({})",
            problem["title"].as_str().unwrap_or("?"),
            problem["detail"].as_str().unwrap_or("")
        );
    }
    Ok(serde_json::from_slice(&body)?)
}

/// Pause after a beat that told a run to stop, while the run winds down (the next beat
/// still names it, and would be answered at once).
const AFTER_STOP: Duration = Duration::from_millis(200);

/// Beats every `every` while nothing runs; while something does, beat after beat, each held
/// by the server up to `every` and answered at once when a run must stop. A run claimed
/// meanwhile starts a new beat that names it. A server that does not hold beats (no
/// `Preference-Applied`), a refusal or a failure brings back the plain pace.
async fn heartbeat(host: Arc<Host>, every: Duration, stop: CancellationToken) {
    let mut pause = None;
    loop {
        let more = host.held_more.notified();
        tokio::pin!(more);
        more.as_mut().enable();
        let tasks: Vec<Value> = host
            .held
            .lock()
            .map(|held| held.keys().map(|(id, attempt)| json!({ "id": id, "attempt": attempt })).collect())
            .unwrap_or_default();
        let wait = if tasks.is_empty() { Some(every) } else { pause.take() };
        if let Some(wait) = wait {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut more => continue,
            }
        }
        let url = format!("{}/workers/{}/heartbeat", host.options.url, host.worker);
        let mut request = host.http.post(url).json(&json!({ "tasks": tasks }));
        if !tasks.is_empty() {
            request = request.header("Prefer", format!("wait={}", every.as_secs().max(1)));
        }
        let sent = tokio::select! {
            sent = request.send() => sent,
            () = &mut more => continue,
        };
        // Only a beat that asked to be held can come back at once; it then waits a while.
        pause = (!tasks.is_empty()).then_some(every);
        match sent {
            Ok(response) => {
                let held = response.headers().contains_key("preference-applied");
                match answer::<Beat>(response).await {
                    Ok(beat) => {
                        if held {
                            pause = (!beat.stop.is_empty()).then_some(AFTER_STOP);
                        }
                        for run in beat.stop {
                            tracing::info!(job_id = %run.id, attempt = run.attempt, "the server says stop: killing the run");
                            if let Some(cancel) =
                                host.held.lock().ok().and_then(|held| held.get(&(run.id, run.attempt)).cloned())
                            {
                                cancel.cancel();
                            }
                        }
                    }
                    Err(err) => tracing::warn!(error = %err, "heartbeat refused"),
                }
            }
            Err(err) if stop.is_cancelled() => return tracing::debug!(error = %err, "heartbeat after stop"),
            Err(err) => tracing::warn!(error = %err, "heartbeat failed; trying again"),
        }
    }
}

/// One slot: claim, run, report, until stopped.
async fn slot(host: Arc<Host>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let url = format!("{}/scripts/claim", host.options.url);
        let claim = host.http.post(url).header("Prefer", "wait=30").json(&json!({ "worker_id": host.worker }));
        let claimed = tokio::select! {
            sent = claim.send() => sent,
            () = stop.cancelled() => return,
        };
        let claimed: Claimed = match claimed.map_err(anyhow::Error::from) {
            Ok(response) => match answer(response).await {
                Ok(claimed) => claimed,
                Err(err) => {
                    tracing::warn!(error = %err, "claim refused; trying again shortly");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            Err(err) => {
                tracing::warn!(error = %err, "claim failed; trying again shortly");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let (Some(job), Some(limits)) = (claimed.task, claimed.limits) else { continue };
        let key = (job.id, job.attempts);
        let cancel = CancellationToken::new();
        if let Ok(mut held) = host.held.lock() {
            held.insert(key, cancel.clone());
        }
        host.held_more.notify_waiters();
        tracing::info!(job_id = %job.id, attempt = job.attempts, "script claimed");
        if let Err(err) = run_task(&host, &job, &limits, &cancel).await {
            tracing::warn!(job_id = %job.id, error = %err, "run not reported; its lease will lapse and it runs again");
        }
        if let Ok(mut held) = host.held.lock() {
            held.remove(&key);
        }
        let (copies, workspace, id) = (host.copies.clone(), host.workspace.clone(), job.id);
        let _ = tokio::task::spawn_blocking(move || (copies.remove(id), workspace.remove(id))).await;
    }
}

async fn run_task(host: &Host, job: &Job, limits: &Limits, cancel: &CancellationToken) -> anyhow::Result<()> {
    let input = host.copies.input_dir(job.id);
    let query = format!("worker_id={}&attempt={}", host.worker, job.attempts);
    let files = job.payload["files"].as_array().cloned().unwrap_or_default();
    for file in files {
        let (Some(name), Some(sha256)) = (file["name"].as_str(), file["sha256"].as_str()) else { continue };
        let name = super::names::normalise(name).map_err(|err| anyhow::anyhow!("{err}"))?;
        let url = format!("{}/tasks/{}/files/{name}?{query}", host.options.url, job.id);
        download(&host.http, &url, &input.join(&name), sha256).await.with_context(|| format!("downloading {name}"))?;
    }
    let place = Place { blobs: Arc::new(host.copies.clone()), run: host.workspace.run_dir(job.id, job.attempts) };
    let ran = run_script::run(job, &place, limits, cancel).await;
    if cancel.is_cancelled() {
        return Ok(());
    }
    let report = match ran {
        Ok(ran) => {
            let url = format!("{}/tasks/{}/result?{query}", host.options.url, job.id);
            send_archive(&host.http, &url, &host.copies.result_path(job.id)).await.context("sending the archive")?;
            match ran.outcome {
                Ok(result) => json!({ "status": "succeeded", "result": result }),
                Err(err) => failure(err),
            }
        }
        Err(err) => failure(err),
    };
    let mut report = report;
    report["worker_id"] = json!(host.worker);
    report["attempt"] = json!(job.attempts);
    let response = host.http.patch(format!("{}/tasks/{}", host.options.url, job.id)).json(&report).send().await?;
    let _: Value = answer(response).await.context("reporting")?;
    Ok(())
}

fn failure(err: OperationError) -> Value {
    match err {
        OperationError::Failed { class, message } => {
            json!({ "status": "failed", "error_code": class, "message": message })
        }
        OperationError::RetryLater { delay, reason } => {
            json!({ "status": "retry_later", "delay_seconds": delay.as_secs_f64(), "message": reason })
        }
    }
}

/// Downloads `url` to `path`, resuming from what is there after a broken transfer, and
/// checks the whole against `sha256`.
async fn download(http: &reqwest::Client, url: &str, path: &Path, sha256: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let have = tokio::fs::metadata(path).await.map(|meta| meta.len()).unwrap_or(0);
        let mut request = http.get(url);
        if have > 0 {
            request = request.header("Range", format!("bytes={have}-"));
        }
        let fetched = async {
            let mut response = request.send().await?;
            let status = response.status();
            if status.as_u16() == 416 {
                return Ok(());
            }
            if !status.is_success() {
                return Err(anyhow::anyhow!("{status}"));
            }
            // A 200 to a range asked is the whole file: start over.
            let append = status.as_u16() == 206;
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(append)
                .write(true)
                .truncate(!append)
                .open(path)
                .await?;
            while let Some(chunk) = response.chunk().await? {
                file.write_all(&chunk).await?;
            }
            file.flush().await?;
            Ok(())
        };
        match fetched.await {
            Ok(()) => break,
            Err(err) if tries < TRIES => {
                tracing::warn!(url, error = %err, "download broke; resuming");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await;
            }
            Err(err) => return Err(err),
        }
    }
    anyhow::ensure!(digest_of(path).await? == sha256, "the file does not match its SHA-256");
    Ok(())
}

/// A file's SHA-256, read in pieces (an upload's file may be large).
async fn digest_of(path: &Path) -> anyhow::Result<String> {
    use tokio::io::AsyncReadExt as _;
    let mut file = tokio::fs::File::open(path).await?;
    let (mut digest, mut buffer) = (Sha256::new(), vec![0u8; 256 * 1024]);
    loop {
        let read = file.read(&mut buffer).await?;
        if read == 0 {
            return Ok(hex::encode(digest.finalize()));
        }
        digest.update(&buffer[..read]);
    }
}

/// Sends the archive in pieces; after a failure, asks where the server stopped and goes on
/// from there.
async fn send_archive(http: &reqwest::Client, url: &str, zip: &Path) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
    let mut file = tokio::fs::File::open(zip).await?;
    let total = file.metadata().await?.len();
    let mut sent = 0u64;
    let mut tries = 0;
    while sent < total || total == 0 {
        let end = (sent + PIECE).min(total);
        let mut request = http.put(url).header("content-type", "application/zip");
        if total > 0 {
            request = request.header("Content-Range", format!("bytes {sent}-{}/{total}", end - 1));
        }
        // One piece in memory at a time, read from where the server says it stopped.
        let mut piece = vec![0u8; (end - sent) as usize];
        file.seek(std::io::SeekFrom::Start(sent)).await?;
        file.read_exact(&mut piece).await?;
        match request.body(piece).send().await.map_err(anyhow::Error::from) {
            Ok(response) if response.status().is_success() => {
                sent = end;
                if total == 0 {
                    break;
                }
            }
            failed => {
                tries += 1;
                let why = match failed {
                    Ok(response) => format!("{}", response.status()),
                    Err(err) => err.to_string(),
                };
                anyhow::ensure!(tries < TRIES, "the archive was refused: {why}");
                tracing::warn!(error = why, "sending the archive broke; resuming");
                let progress: Value = answer(http.get(url).send().await?).await?;
                sent = progress["received"].as_u64().unwrap_or(0);
            }
        }
    }
    Ok(())
}
