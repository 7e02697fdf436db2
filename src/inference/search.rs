//! The search coordinators' shared part and `nearest_neighbours`: a search checks its set
//! and queries, fans out batches that embed the queries (`ops::embed`) and rank the set's
//! vectors (a set cached per process, by its labels revision), and gathers the answers in
//! the caller's order. `transfer_annotations` is a search too (`transfer`).

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::actor::Inference;
use super::index::{build, stored};
use super::ops::{database, embed, invalid, positions, Coordinator, MAX_K, MAX_QUERIES, SET_NOT_READY, UNKNOWN_SET};
use super::ranking::{Found, Ranker, Target, EXACT};
use super::sets::{self, check_set_name};
use super::tokenizer::Tokenizer;
use super::transfer;
use crate::domain::RoomId;
use crate::ops::{parse_payload, FanOut, JobContext, Operation, OperationError};

pub const NEAREST_NEIGHBOURS: &str = "nearest_neighbours";
pub const NEIGHBOURS_BATCH: &str = "nearest_neighbours.batch";

/// `nearest_neighbours`: `{"set": name, "queries": [text, …], "k": n}`; the result lists,
/// per query, the `k` stored items most similar to it (cosine), most similar first, and
/// says how they were found (`"method"`: `hnsw` or `exact`).
pub struct NearestNeighbours(pub(super) Coordinator);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NeighboursPayload {
    set: String,
    queries: Vec<String>,
    #[serde(default = "default_k")]
    k: usize,
}

fn default_k() -> usize {
    5
}

impl NeighboursPayload {
    fn parse(payload: &Value) -> Result<NeighboursPayload, String> {
        let parsed: NeighboursPayload = parse_payload(payload)?;
        check_search(&parsed.set, &parsed.queries, parsed.k)?;
        Ok(parsed)
    }
}

/// A search's set name, queries (1 to [`MAX_QUERIES`]) and `k` (1 to [`MAX_K`]).
pub(super) fn check_search(set: &str, queries: &[String], k: usize) -> Result<(), String> {
    check_set_name(set)?;
    if queries.is_empty() || queries.len() > MAX_QUERIES {
        return Err(format!("queries must hold 1 to {MAX_QUERIES} texts"));
    }
    if !(1..=MAX_K).contains(&k) {
        return Err(format!("k must be 1 to {MAX_K}"));
    }
    Ok(())
}

#[async_trait]
impl Operation for NearestNeighbours {
    fn name(&self) -> &'static str {
        NEAREST_NEIGHBOURS
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        NeighboursPayload::parse(payload).map(drop)
    }

    fn is_coordinator(&self) -> bool {
        true
    }

    /// Every query with its neighbours, in the caller's order.
    fn reduce(&self, outputs: Vec<Value>) -> Value {
        let first = outputs.first().cloned().unwrap_or_default();
        let method = method_of(&outputs);
        let queries = in_caller_order(outputs);
        json!({ "set": first["set"], "k": first["k"], "model": first["model"], "method": method, "queries": queries })
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = NeighboursPayload::parse(&payload).map_err(invalid)?;
        self.0.search(&ctx, &payload.set, &payload.queries, payload.k, Value::Null).await?;
        Ok(json!({ "set": payload.set }))
    }
}

/// The fan-out of a search coordinator (`nearest_neighbours`, `transfer_annotations`).
impl Coordinator {
    /// Checks the queries, and that set `name` of the job's room is whole (every input
    /// stored, its job over); then fans out the batches that embed the queries and rank the
    /// set, `transfer` (when not null) in their snapshot. A set large enough for an index
    /// that has none from its current vectors gets its build submitted on this job's queue
    /// (a unique job per set and vectors revision); the batches rank it exactly meanwhile.
    pub(super) async fn search(
        &self,
        ctx: &JobContext,
        name: &str,
        queries: &[String],
        k: usize,
        transfer: Value,
    ) -> Result<(), OperationError> {
        let batches = self.limits.batches(&self.tokenizer, "queries", queries, None)?;
        let room = ctx.job().map_or_else(|| RoomId::DEFAULT.to_owned(), |job| job.room.clone());
        let key = sets::key(&room, name);
        let Some(set) = sets::find(ctx.db(), &key).await.map_err(database)? else {
            return Err(OperationError::new(UNKNOWN_SET, format!("no embedding set {name:?}")));
        };
        let stored = sets::stored(ctx.db(), &key).await.map_err(database)?;
        if stored as i64 != set.inputs || set.inputs == 0 {
            let message = format!("set {name:?} holds {stored} of its {} inputs: its job has not finished", set.inputs);
            return Err(OperationError::new(SET_NOT_READY, message));
        }
        if !transfer.is_null() && sets::labelled(ctx.db(), &key).await.map_err(database)? == 0 {
            let message = format!("set {name:?} has no labelled items: give labels to compute_embeddings");
            return Err(OperationError::new(transfer::SET_UNLABELLED, message));
        }
        let unindexed = set.inputs as u64 >= self.index.min_items
            && stored::current(ctx.db(), &set).await.map_err(database)?.is_none();
        if let (true, Some(own)) = (unindexed, ctx.job()) {
            let job = build::job(&room, &set, &own.queue, None).map_err(invalid)?;
            // Advisory: without it the search is exact, as it would be anyway.
            if let Err(err) = ctx.submit(job).await {
                tracing::warn!(set = %key, error = %err, "could not submit the set's index build");
            }
        }
        let snapshot = json!({
            "set": key, "k": k, "inputs": set.inputs, "job_id": set.job_id,
            "labels_revision": set.labels_revision, "vectors_revision": set.vectors_revision, "transfer": transfer,
        });
        ctx.fan_out(FanOut {
            operation: NEIGHBOURS_BATCH.into(),
            queue: self.queue.clone(),
            write_queue: self.write_queue.clone(),
            snapshot,
            batches,
            max_retries: 2,
        })
        .await
    }
}

/// How the batches found their answers: the method they all name, else `mixed` (an index
/// that could not be opened by one of them).
pub(super) fn method_of(outputs: &[Value]) -> Value {
    let mut methods = outputs.iter().map(|output| output["method"].as_str().unwrap_or(EXACT));
    let first = methods.next().unwrap_or(EXACT);
    match methods.all(|method| method == first) {
        true => json!(first),
        false => json!("mixed"),
    }
}

/// The `queries` of every batch's output, in the caller's order: by the batch's `items`, or
/// its `first` onwards.
pub(super) fn in_caller_order(outputs: Vec<Value>) -> Vec<Value> {
    let mut placed: Vec<(u64, Value)> = Vec::new();
    for output in outputs {
        let items = output["items"].as_array().cloned().unwrap_or_default();
        let start = output["first"].as_u64().unwrap_or(0);
        for (at, query) in output["queries"].as_array().cloned().unwrap_or_default().into_iter().enumerate() {
            let position = items.get(at).and_then(Value::as_u64).unwrap_or(start + at as u64);
            placed.push((position, query));
        }
    }
    placed.sort_by_key(|(position, _)| *position);
    placed.into_iter().map(|(_, query)| query).collect()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NeighboursBatchPayload {
    #[serde(default)]
    items: Option<Vec<usize>>,
    #[serde(default)]
    first: Option<usize>,
    queries: Vec<String>,
}

/// `nearest_neighbours.batch`: embeds its queries and ranks the set's vectors against them.
pub struct NeighboursBatch {
    pub(super) inference: Inference,
    pub(super) tokenizer: Tokenizer,
    pub(super) ranker: Arc<Ranker>,
}

#[async_trait]
impl Operation for NeighboursBatch {
    fn name(&self) -> &'static str {
        NEIGHBOURS_BATCH
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        parse_payload::<NeighboursBatchPayload>(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let batch: NeighboursBatchPayload = parse_payload(&payload).map_err(invalid)?;
        let snapshot = ctx.snapshot().clone();
        let target = Target::of(&snapshot);
        let k = snapshot["k"].as_u64().unwrap_or(5) as usize;
        let items = positions(batch.items, batch.first, batch.queries.len()).map_err(invalid)?;
        let embedded = embed(&ctx, &self.inference, &self.tokenizer, &items, &batch.queries).await?;
        let transfer = snapshot["transfer"]["top"].as_u64().map(|top| top as usize);
        let ranked = self.ranker.rank(ctx.db(), &target, &embedded.vectors, k, transfer.is_some()).await?;
        let queries: Vec<Value> = batch
            .queries
            .iter()
            .zip(&ranked.queries)
            .map(|(query, found)| match transfer {
                Some(top) => transfer::answer(query, found, top),
                None => neighbours_of(query, found),
            })
            .collect();
        let name = sets::name_of(target.key);
        Ok(json!({
            "set": name, "k": k, "top": transfer, "model": embedded.model, "method": ranked.method,
            "items": items, "queries": queries,
        }))
    }
}

/// A query's neighbours, most similar first.
fn neighbours_of(query: &str, found: &[Found]) -> Value {
    let found: Vec<Value> = found
        .iter()
        .map(|found| json!({ "item": found.item.item, "input": found.item.input, "score": found.score }))
        .collect();
    json!({ "query": query, "neighbours": found })
}
