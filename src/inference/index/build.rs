//! `embeddings.index`: builds the HNSW index of a whole set and publishes it with the set.
//! `compute_embeddings` submits it to run once its own job has succeeded; a search of a
//! large set without a current index submits it too (one per set and vectors revision: a
//! unique job), and ranks exactly meanwhile. A user may submit it as well.
//!
//! The builder reads the set page by page into the graph (the one place a whole set's
//! vectors are in memory, at the index's precision), saves it into its own directory (so
//! this process does not fetch it again), stores it in parts, and publishes it only if the
//! set's vectors are still those it read. A crash anywhere leaves the earlier index in use;
//! parts of an unpublished build are deleted by the set's next publication. Where the store
//! is a PostgreSQL server that offers pgvector, the build is pgvector's instead (`pgvector`):
//! the set copied page by page into a table of the build's own, indexed there, and published
//! the same way; the result of a file build says why pgvector was not used.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::info;
use uuid::Uuid;

use super::hnsw::{Builder, HnswError};
use super::pgvector::{self, Layout, PGVECTOR};
use super::stored::{self, Published, HNSW};
use crate::domain::{JobStatus, NewJob, QueueName, RoomId, Unique};
use crate::inference::entity::embedding_set;
use crate::inference::ops::{database, invalid, SET_NOT_READY, UNKNOWN_SET};
use crate::inference::sets::{self, check_set_name};
use crate::inference::settings::IndexSettings;
use crate::ops::{parse_payload, JobContext, Operation, OperationError};

pub const BUILD_INDEX: &str = "embeddings.index";
/// The index could not be built (usearch's error, or the file).
pub const INDEX_FAILED: &str = "IndexFailed";
/// Why a finished build was not published.
const MOVED_ON: &str = "the set's vectors were written again while the index was built";
/// Items read from the store at a time.
const PAGE: u64 = 4096;
/// How far back a build of the same set and revision counts (a set's vectors outlive it
/// only if not searched for a month).
const UNIQUE_WINDOW: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// `embeddings.index`: `{"set": name}`, a set of the job's room.
pub struct BuildIndex {
    pub(crate) settings: IndexSettings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexPayload {
    set: String,
}

impl IndexPayload {
    fn parse(payload: &Value) -> Result<IndexPayload, String> {
        let parsed: IndexPayload = parse_payload(payload)?;
        check_set_name(&parsed.set)?;
        Ok(parsed)
    }
}

/// The build of `set` (a stored set's row, its room's `room`) as a job on `queue`, after
/// `after` when given. Unique by the set and its vectors revision: while one such build is
/// queued (waiting included), running or done, asking again makes none; after a failed one,
/// the next search asks again.
pub fn job(room: &str, set: &embedding_set::Model, queue: &str, after: Option<Uuid>) -> Result<NewJob, String> {
    let mut job = NewJob::new(BUILD_INDEX);
    job.room = RoomId::parse(room)?;
    job.queue = QueueName::parse(queue)?;
    job.payload = json!({ "set": sets::name_of(&set.name) });
    job.unique = Some(Unique {
        key: format!("index:{}:{}", set.name, set.vectors_revision),
        window: UNIQUE_WINDOW,
        states: vec![JobStatus::Queued, JobStatus::Running, JobStatus::Succeeded],
    });
    job.max_retries = 2;
    job.depends_on = after.into_iter().collect();
    Ok(job)
}

fn failed(err: impl std::fmt::Display) -> OperationError {
    OperationError::new(INDEX_FAILED, err.to_string())
}

#[async_trait]
impl Operation for BuildIndex {
    fn name(&self) -> &'static str {
        BUILD_INDEX
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        IndexPayload::parse(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = IndexPayload::parse(&payload).map_err(invalid)?;
        let room = ctx.job().map_or_else(|| RoomId::DEFAULT.to_owned(), |job| job.room.clone());
        let key = sets::key(&room, &payload.set);
        let Some(set) = sets::find(ctx.db(), &key).await.map_err(database)? else {
            return Err(OperationError::new(UNKNOWN_SET, format!("no embedding set {:?}", payload.set)));
        };
        let stored = sets::stored(ctx.db(), &key).await.map_err(database)?;
        if stored as i64 != set.inputs || set.inputs == 0 {
            let message =
                format!("set {:?} holds {stored} of its {} inputs: its job has not finished", payload.set, set.inputs);
            return Err(OperationError::new(SET_NOT_READY, message));
        }
        let answer = |method: &str, fields: Value| {
            let mut answer = json!({ "set": payload.set, "items": set.inputs, "method": method });
            answer.as_object_mut().into_iter().zip(fields.as_object()).for_each(|(to, from)| to.extend(from.clone()));
            answer
        };
        if (set.inputs as u64) < self.settings.min_items {
            let reason = format!("sets of fewer than {} items are ranked exactly", self.settings.min_items);
            return Ok(answer("exact", json!({ "reason": reason })));
        }
        if let Some(index) = stored::current(ctx.db(), &set).await.map_err(database)? {
            return Ok(answer(&index.method, json!({ "build": index.build, "bytes": index.bytes, "built": false })));
        }
        let started = Instant::now();
        let build = Uuid::new_v4();
        let why_not_pgvector = match pgvector::availability(ctx.db(), &self.settings).await {
            Ok(version) => match self.build_pgvector(&ctx, &set, build).await? {
                Ok((dims, bytes)) => {
                    let published = Published {
                        set: key.clone(),
                        build,
                        method: PGVECTOR,
                        vectors_revision: set.vectors_revision,
                        items: set.inputs,
                        dims: dims as i64,
                        bytes,
                        parts: 0,
                    };
                    if !stored::publish(ctx.db(), published).await.map_err(database)? {
                        return Ok(answer("exact", json!({ "reason": MOVED_ON })));
                    }
                    let seconds = started.elapsed().as_secs_f64();
                    let fields = json!({ "build": build, "dims": dims, "bytes": bytes, "built": true, "seconds": seconds, "pgvector": version });
                    return Ok(answer(PGVECTOR, fields));
                }
                Err(refused) => refused,
            },
            Err(absent) => absent,
        };
        info!(set = %key, reason = %why_not_pgvector, "the set's index is a file of yardmaster's own, not pgvector");
        let dir = std::path::PathBuf::from(&self.settings.dir);
        tokio::fs::create_dir_all(&dir).await.map_err(failed)?;
        let aside = dir.join(format!("{build}.building"));
        let built = self.build(&ctx, &set, &aside).await;
        let dims = match built {
            Ok(dims) => dims,
            Err(err) => {
                let _ = tokio::fs::remove_file(&aside).await;
                return Err(err);
            }
        };
        let (bytes, parts) = match stored::upload(ctx.db(), &key, build, &aside).await {
            Ok(uploaded) => uploaded,
            Err(err) => {
                let _ = tokio::fs::remove_file(&aside).await;
                return Err(failed(err));
            }
        };
        let published = Published {
            set: key.clone(),
            build,
            method: HNSW,
            vectors_revision: set.vectors_revision,
            items: set.inputs,
            dims: dims as i64,
            bytes: bytes as i64,
            parts,
        };
        if !stored::publish(ctx.db(), published).await.map_err(database)? {
            let _ = tokio::fs::remove_file(&aside).await;
            return Ok(answer("exact", json!({ "reason": MOVED_ON })));
        }
        // This process has the file already: where it would have fetched it to.
        let _ = tokio::fs::rename(&aside, stored::cached(&dir, build)).await;
        let seconds = started.elapsed().as_secs_f64();
        Ok(answer(
            HNSW,
            json!({
                "build": build, "dims": dims, "bytes": bytes, "parts": parts, "built": true, "seconds": seconds,
                "why_not_pgvector": why_not_pgvector,
            }),
        ))
    }
}

impl BuildIndex {
    /// Reads the set page by page into a pgvector table of build `build` and indexes it:
    /// the vectors' length and the table's bytes, or why pgvector cannot index these
    /// vectors (nothing is made then). A failure drops what was made.
    async fn build_pgvector(
        &self,
        ctx: &JobContext,
        set: &embedding_set::Model,
        build: Uuid,
    ) -> Result<Result<(usize, i64), String>, OperationError> {
        let (items, vectors) = sets::vectors_page(ctx.db(), &set.name, None, PAGE).await.map_err(database)?;
        let dims = vectors.len() / items.len().max(1);
        let layout = match Layout::new(&self.settings.precision, dims) {
            Ok(layout) => layout,
            Err(refused) => return Ok(Err(refused)),
        };
        let made = pgvector::Build::start(ctx.db(), &set.name, build, layout).await.map_err(failed)?;
        let filled = self.fill_pgvector(ctx, set, &made, items, vectors).await;
        let indexed = match filled {
            Ok(()) => made.index(ctx.db(), &self.settings).await.map_err(failed),
            Err(err) => Err(err),
        };
        match indexed {
            Ok(bytes) => Ok(Ok((dims, bytes))),
            Err(err) => {
                let _ = pgvector::drop_build(ctx.db(), build).await;
                Err(err)
            }
        }
    }

    async fn fill_pgvector(
        &self,
        ctx: &JobContext,
        set: &embedding_set::Model,
        made: &pgvector::Build,
        mut items: Vec<i64>,
        mut vectors: Vec<f32>,
    ) -> Result<(), OperationError> {
        let mut done = 0_i64;
        while let Some(last) = items.last().copied() {
            made.add(ctx.db(), &items, &vectors).await.map_err(failed)?;
            done += items.len() as i64;
            ctx.progress(done, set.inputs).await;
            if ctx.is_cancelled() {
                return Err(OperationError::new("Cancelled", "the build was cancelled"));
            }
            (items, vectors) = sets::vectors_page(ctx.db(), &set.name, Some(last), PAGE).await.map_err(database)?;
        }
        Ok(())
    }

    /// Reads the set into a graph, page by page, and saves it at `path`; the vectors' length.
    async fn build(
        &self,
        ctx: &JobContext,
        set: &embedding_set::Model,
        path: &std::path::Path,
    ) -> Result<usize, OperationError> {
        let mut after = None;
        let mut builder: Option<Arc<Builder>> = None;
        let mut done = 0_i64;
        loop {
            let (items, vectors) = sets::vectors_page(ctx.db(), &set.name, after, PAGE).await.map_err(database)?;
            let Some(last) = items.last().copied() else { break };
            after = Some(last);
            let graph = match &builder {
                Some(graph) => graph.clone(),
                None => {
                    let dims = vectors.len() / items.len();
                    let graph = Builder::new(&self.settings, dims, set.inputs as usize).map_err(failed)?;
                    builder.insert(Arc::new(graph)).clone()
                }
            };
            done += items.len() as i64;
            tokio::task::spawn_blocking(move || graph.add(&items, &vectors))
                .await
                .map_err(|err| failed(HnswError::from_panic(&err)))?
                .map_err(failed)?;
            ctx.progress(done, set.inputs).await;
            if ctx.is_cancelled() {
                return Err(OperationError::new("Cancelled", "the build was cancelled"));
            }
        }
        let Some(graph) = builder else {
            return Err(OperationError::new(SET_NOT_READY, "the set holds no items"));
        };
        let dims = graph.dims();
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || graph.save(&path))
            .await
            .map_err(|err| failed(HnswError::from_panic(&err)))?
            .map_err(failed)?;
        Ok(dims)
    }
}
