//! `compute_embeddings`, the coordinator like seed 000's embedding job, its batches, and what
//! the inference operations share (limits, errors, a batch's forward pass). The searches,
//! `nearest_neighbours` and `transfer_annotations`, are in `search` and `transfer`.
//!
//! A coordinator checks its inputs with the tokeniser, claims its set, and fans out batches
//! on `inference.queue`: its inputs sorted by length and cut by `inference.batch_size` and
//! `inference.max_batch_tokens` (`batches::plan`), each batch naming its inputs' positions
//! (`items`), so the vectors go back in the caller's order. A batch worker tokenises its inputs
//! and asks the process's inference actor for vectors; a full actor answers RetryLater (the
//! batch waits off the queue and says so in the job's log as `inference.busy`). The vectors
//! travel in the batch's outcome to `inference.write_queue`, where the write consumer stores
//! them in the same transaction that counts the batch, so a redelivered batch writes once.

use std::time::Duration;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use super::actor::{Inference, InferenceError};
use super::batches;
use super::index::build;
use super::sets::{self, check_set_name, ClaimError};
use super::settings::IndexSettings;
use super::tokenizer::Tokenizer;
use crate::domain::{EventLevel, RoomId};
use crate::ops::{parse_payload, FanOut, JobContext, Operation, OperationError};
use crate::store::{BatchRows, RunRef};

/// Operation names.
pub const COMPUTE_EMBEDDINGS: &str = "compute_embeddings";
pub const EMBED_BATCH: &str = "compute_embeddings.batch";

/// Most inputs of one `compute_embeddings` job, and queries of one `nearest_neighbours`.
pub const MAX_INPUTS: usize = 100_000;
pub const MAX_QUERIES: usize = 1_000;
/// Most neighbours per query.
pub const MAX_K: usize = 50;

/// Error classes of the inference operations, beside [`InferenceError::code`].
pub const INVALID_INPUT: &str = "InvalidInput";
pub const SET_TAKEN: &str = "SetTaken";
pub const UNKNOWN_SET: &str = "UnknownSet";
pub const SET_NOT_READY: &str = "SetNotReady";
pub const DIMENSION_MISMATCH: &str = "DimensionMismatch";

pub(super) fn invalid(err: impl std::fmt::Display) -> OperationError {
    OperationError::new("InvalidPayload", err.to_string())
}

pub(super) fn database(err: impl std::fmt::Display) -> OperationError {
    OperationError::new("DatabaseError", err.to_string())
}

/// How a coordinator cuts its inputs: at most `rows` inputs and `tokens` padded tokens a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub rows: usize,
    pub tokens: usize,
}

impl BatchLimits {
    /// Every input's length in tokens (the first refused one fails the job), then the batches:
    /// `{"items": [position, …], <key>: [text, …]}`, and `"labels"` (each input's list) when
    /// `labels` is given.
    pub(super) fn batches(
        &self,
        tokenizer: &Tokenizer,
        key: &str,
        texts: &[String],
        labels: Option<&[Vec<String>]>,
    ) -> Result<Vec<Value>, OperationError> {
        let lengths = texts
            .iter()
            .enumerate()
            .map(|(index, text)| tokenizer.check(index, text))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|err| OperationError::new(INVALID_INPUT, err.to_string()))?;
        let batches = batches::plan(&lengths, self.rows, self.tokens)
            .into_iter()
            .map(|items| {
                let texts: Vec<&String> = items.iter().map(|&at| &texts[at]).collect();
                let mut batch = json!({ "items": items, key: texts });
                if let Some(labels) = labels {
                    let labels: Vec<&Vec<String>> = items.iter().map(|&at| &labels[at]).collect();
                    batch["labels"] = json!(labels);
                }
                batch
            })
            .collect();
        Ok(batches)
    }
}

/// A batch's positions: `items`, or, for a batch cut before token budgets, `first` onwards.
pub(super) fn positions(items: Option<Vec<usize>>, first: Option<usize>, count: usize) -> Result<Vec<usize>, String> {
    match (items, first) {
        (Some(items), _) if items.len() == count => Ok(items),
        (Some(items), _) => Err(format!("{} items for {count} inputs", items.len())),
        (None, Some(first)) => Ok((first..first + count).collect()),
        (None, None) => Err("a batch names its items".into()),
    }
}

/// `compute_embeddings`: `{"inputs": [text, …]}` or `{"from_set": name}` (the inputs of a
/// stored set), optionally `"set": name` (default: the job's id). Result: the set's name,
/// count, vector length, model and device.
pub struct ComputeEmbeddings(pub(super) Coordinator);

/// What the coordinators (`compute_embeddings`, `nearest_neighbours`,
/// `transfer_annotations`) share: the tokeniser that checks their inputs, how they cut them
/// into batches, the queues the batches travel on, and when a set gets an index.
#[derive(Clone)]
pub struct Coordinator {
    pub(super) tokenizer: Tokenizer,
    pub(super) limits: BatchLimits,
    pub(super) queue: String,
    pub(super) write_queue: String,
    pub(super) index: IndexSettings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingsPayload {
    #[serde(default)]
    inputs: Option<Vec<String>>,
    /// One list of labels per input, for `transfer_annotations`.
    #[serde(default)]
    labels: Option<Vec<Vec<String>>>,
    #[serde(default)]
    from_set: Option<String>,
    #[serde(default)]
    set: Option<String>,
}

impl EmbeddingsPayload {
    fn parse(payload: &Value) -> Result<EmbeddingsPayload, String> {
        let parsed: EmbeddingsPayload = parse_payload(payload)?;
        match (&parsed.inputs, &parsed.from_set) {
            (Some(_), Some(_)) | (None, None) => return Err("give either inputs or from_set".into()),
            (Some(inputs), None) if inputs.is_empty() || inputs.len() > MAX_INPUTS => {
                return Err(format!("inputs must hold 1 to {MAX_INPUTS} texts"))
            }
            _ => {}
        }
        for name in parsed.set.iter().chain(&parsed.from_set) {
            check_set_name(name)?;
        }
        match (&parsed.labels, &parsed.inputs) {
            (Some(labels), Some(inputs)) => sets::check_labels(labels, inputs.len())?,
            (Some(_), None) => return Err("labels go with inputs; a set embedded again keeps its own".into()),
            (None, _) => {}
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Operation for ComputeEmbeddings {
    fn name(&self) -> &'static str {
        COMPUTE_EMBEDDINGS
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        EmbeddingsPayload::parse(payload).map(drop)
    }

    fn is_coordinator(&self) -> bool {
        true
    }

    fn reduce(&self, outputs: Vec<Value>) -> Value {
        let count: u64 = outputs.iter().filter_map(|output| output["count"].as_u64()).sum();
        let first = outputs.first().cloned().unwrap_or_default();
        json!({
            "set": first["set"], "count": count, "dims": first["dims"],
            "model": first["model"], "device": first["device"], "batches": outputs.len(),
        })
    }

    fn batch_rows(&self, _parent: RunRef, output: &Value) -> Result<BatchRows, String> {
        let output = BatchOutput::deserialize(output).map_err(|err| err.to_string())?;
        if output.inputs.len() != output.vectors.len() {
            return Err(format!("{} inputs but {} vectors", output.inputs.len(), output.vectors.len()));
        }
        let vectors = output
            .vectors
            .iter()
            .map(|vector| BASE64.decode(vector).map_err(|err| format!("a vector is not base64: {err}")))
            .collect::<Result<Vec<Vec<u8>>, String>>()?;
        let dims = vectors.first().map_or(0, |bytes| bytes.len() / 4);
        if vectors.iter().any(|bytes| bytes.len() != dims * 4 || dims == 0) {
            return Err("the vectors of a batch must all hold the same number of floats".into());
        }
        let items = positions(output.items, output.first, output.inputs.len())?;
        let items: Vec<i64> = items.into_iter().map(|item| item as i64).collect();
        if !output.labels.is_empty() && output.labels.len() != output.inputs.len() {
            return Err(format!("{} inputs but {} lists of labels", output.inputs.len(), output.labels.len()));
        }
        let insert = sets::insert_rows(&output.set, &items, &output.inputs, vectors, &output.labels);
        let kept = json!({
            "set": sets::name_of(&output.set), "count": output.inputs.len(), "dims": dims,
            "model": output.model, "device": output.device,
        });
        Ok(BatchRows { kept, insert: Some(insert) })
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = EmbeddingsPayload::parse(&payload).map_err(invalid)?;
        let job_id = ctx.job().map(|job| job.id).unwrap_or_default();
        let room = ctx.job().map_or_else(|| RoomId::DEFAULT.to_owned(), |job| job.room.clone());
        let set = payload.set.unwrap_or_else(|| job_id.to_string());
        let (inputs, labels) = match (payload.inputs, payload.from_set) {
            (Some(inputs), _) => (inputs, payload.labels),
            (None, Some(from)) => stored_inputs(&ctx, &room, &from).await?,
            (None, None) => return Err(invalid("give either inputs or from_set")),
        };
        let Coordinator { tokenizer, limits, queue, write_queue, index } = &self.0;
        let batches = limits.batches(tokenizer, "inputs", &inputs, labels.as_deref())?;
        match sets::claim(ctx.db(), &sets::key(&room, &set), job_id, inputs.len() as i64).await {
            Ok(()) => {}
            Err(ClaimError::Taken { name, owner }) => {
                let name = sets::name_of(&name);
                let message = format!("set {name:?} was computed by job {owner}; choose another name");
                return Err(OperationError::new(SET_TAKEN, message));
            }
            Err(ClaimError::Database(err)) => return Err(database(err)),
        }
        let key = sets::key(&room, &set);
        if inputs.len() as u64 >= index.min_items {
            index_after(&ctx, &room, &key).await?;
        }
        ctx.fan_out(FanOut {
            operation: EMBED_BATCH.into(),
            queue: queue.clone(),
            write_queue: write_queue.clone(),
            snapshot: json!({ "set": key }),
            batches,
            max_retries: 2,
        })
        .await?;
        Ok(json!({ "set": set, "count": inputs.len() }))
    }
}

/// Submits the build of set `key`'s index on this job's queue, to run once this job has
/// succeeded (and be cancelled if it fails), unique by the set's vectors revision.
async fn index_after(ctx: &JobContext, room: &str, key: &str) -> Result<(), OperationError> {
    let (Some(set), Some(own)) = (sets::find(ctx.db(), key).await.map_err(database)?, ctx.job()) else {
        return Ok(());
    };
    let job = build::job(room, &set, &own.queue, Some(own.id)).map_err(invalid)?;
    ctx.submit(job).await.map_err(|err| OperationError::new("IndexNotSubmitted", err.to_string()))?;
    Ok(())
}

/// The inputs of a stored set of `room`, in item order, and their labels if any has some.
async fn stored_inputs(
    ctx: &JobContext,
    room: &str,
    name: &str,
) -> Result<(Vec<String>, Option<Vec<Vec<String>>>), OperationError> {
    let key = sets::key(room, name);
    let Some(set) = sets::find(ctx.db(), &key).await.map_err(database)? else {
        return Err(OperationError::new(UNKNOWN_SET, format!("no embedding set {name:?}")));
    };
    if set.inputs as usize > MAX_INPUTS {
        return Err(invalid(format!("set {name:?} has more than {MAX_INPUTS} inputs")));
    }
    let items = sets::page(ctx.db(), &key, None, set.inputs.max(0) as u64).await.map_err(database)?;
    if items.len() as i64 != set.inputs {
        let message =
            format!("set {name:?} holds {} of its {} inputs: its job has not finished", items.len(), set.inputs);
        return Err(OperationError::new(SET_NOT_READY, message));
    }
    let labelled = items.iter().any(|item| !item.labels.is_empty());
    let (inputs, labels): (Vec<String>, Vec<Vec<String>>) =
        items.into_iter().map(|item| (item.input, item.labels)).unzip();
    Ok((inputs, labelled.then_some(labels)))
}

/// What a batch of `compute_embeddings` answers, on its way to the write queue: each vector
/// as base64 of its little-endian float32s (as stored), not a JSON array of numbers, which
/// would be formatted and parsed float by float on the way.
#[derive(Debug, Deserialize)]
struct BatchOutput {
    set: String,
    #[serde(default)]
    items: Option<Vec<usize>>,
    #[serde(default)]
    first: Option<usize>,
    inputs: Vec<String>,
    vectors: Vec<String>,
    #[serde(default)]
    labels: Vec<Vec<String>>,
    #[serde(default)]
    model: Value,
    #[serde(default)]
    device: Value,
}

/// A batch: its inputs and their positions (`items`; `first` in batches queued before token
/// budgets, which are read the same way).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedBatchPayload {
    #[serde(default)]
    items: Option<Vec<usize>>,
    #[serde(default)]
    first: Option<usize>,
    inputs: Vec<String>,
    #[serde(default)]
    labels: Vec<Vec<String>>,
}

/// Vectors for a batch of inputs (at `items` of the job's), from this process's inference actor.
pub(super) async fn embed(
    ctx: &JobContext,
    inference: &Inference,
    tokenizer: &Tokenizer,
    items: &[usize],
    inputs: &[String],
) -> Result<super::actor::Embedded, OperationError> {
    let tokens =
        tokenizer.encode_items(items, inputs).map_err(|err| OperationError::new(INVALID_INPUT, err.to_string()))?;
    match inference.embed(tokens).await {
        Ok(embedded) => Ok(embedded),
        Err(InferenceError::Busy) => {
            let delay = Duration::from_millis(inference.settings().retry_after_ms);
            let fields = json!({ "inputs": inputs.len(), "retry_after_ms": delay.as_millis() as u64 });
            let message = "the inference actor is full; the batch waits and tries again";
            // Advisory: the batch retries whether or not the event is written.
            let _ = ctx.emit("inference.busy", Some(message), fields, EventLevel::Info).await;
            Err(OperationError::retry_later(delay, "inference actor busy"))
        }
        Err(err) => Err(OperationError::new(err.code(), err.to_string())),
    }
}

/// `compute_embeddings.batch`: one forward pass.
pub struct EmbedBatch {
    pub(super) inference: Inference,
    pub(super) tokenizer: Tokenizer,
}

#[async_trait]
impl Operation for EmbedBatch {
    fn name(&self) -> &'static str {
        EMBED_BATCH
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        parse_payload::<EmbedBatchPayload>(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let batch: EmbedBatchPayload = parse_payload(&payload).map_err(invalid)?;
        let items = positions(batch.items, batch.first, batch.inputs.len()).map_err(invalid)?;
        let set = ctx.snapshot()["set"].as_str().unwrap_or_default().to_owned();
        let embedded = embed(&ctx, &self.inference, &self.tokenizer, &items, &batch.inputs).await?;
        let vectors: Vec<String> = embedded.vectors.iter().map(|vector| BASE64.encode(sets::encode(vector))).collect();
        Ok(json!({
            "set": set, "items": items, "inputs": batch.inputs, "vectors": vectors, "labels": batch.labels,
            "model": embedded.model, "device": embedded.device,
        }))
    }
}
