//! `sum_squares`: the demonstration coordinator. It splits `start..=end` into batches of
//! `batch_size`, each summing the squares of its range on the batch queue, and fans in on
//! the write queue. Also the fan-out path the tests and the benchmark drive.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_payload, FanOut, JobContext, Operation, OperationError};

/// Most batches one coordinator may send.
pub const MAX_BATCHES: u64 = 100_000;
/// The queues `config.toml` declares for batches and their outcomes.
pub const BATCH_QUEUE: &str = "batches";
pub const WRITE_QUEUE: &str = "batch_writes";
/// Name of the batch operation.
pub const SUM_SQUARES_BATCH: &str = "sum_squares.batch";

/// The coordinator.
pub struct SumSquares;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Range {
    start: u64,
    end: u64,
    #[serde(default = "default_batch_size")]
    batch_size: u64,
    #[serde(default)]
    max_retries: i32,
    /// Demonstration knobs: a batch index that fails, and a pause per batch.
    #[serde(default)]
    fail_batch: Option<u64>,
    #[serde(default)]
    batch_delay_ms: u64,
}

fn default_batch_size() -> u64 {
    1000
}

impl Range {
    fn parse(payload: &Value) -> Result<Range, String> {
        let range: Range = parse_payload(payload)?;
        if range.end < range.start {
            return Err("end must not be below start".into());
        }
        if range.batch_size == 0 {
            return Err("batch_size must be at least 1".into());
        }
        if range.end > 1 << 20 {
            return Err("end must be at most 1048576 (the sum must fit 64 bits)".into());
        }
        if range.batches() > MAX_BATCHES {
            return Err(format!("at most {MAX_BATCHES} batches: raise batch_size"));
        }
        if !(0..=10).contains(&range.max_retries) || range.batch_delay_ms > 60_000 {
            return Err("max_retries must be 0-10 and batch_delay_ms at most 60000".into());
        }
        Ok(range)
    }

    fn batches(&self) -> u64 {
        (self.end - self.start) / self.batch_size + 1
    }
}

#[async_trait]
impl Operation for SumSquares {
    fn name(&self) -> &'static str {
        "sum_squares"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        Range::parse(payload).map(drop)
    }

    /// The sum over all batches.
    fn reduce(&self, outputs: Vec<Value>) -> Value {
        let sum: u64 = outputs.iter().filter_map(|output| output["sum"].as_u64()).sum();
        json!({ "batches": outputs.len(), "sum": sum })
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let range = Range::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        // Resolved once, here, and copied into every batch.
        let started_at = ctx.job().and_then(|job| job.started_at);
        let snapshot = json!({
            "exponent": 2,
            "coordinator_started_at": started_at,
            "fail_batch": range.fail_batch,
            "batch_delay_ms": range.batch_delay_ms,
        });
        let batches: Vec<Value> = (0..range.batches())
            .map(|index| {
                let from = range.start + index * range.batch_size;
                json!({ "index": index, "from": from, "to": (from + range.batch_size - 1).min(range.end) })
            })
            .collect();
        let count = batches.len();
        let fan_out = FanOut {
            operation: SUM_SQUARES_BATCH.into(),
            queue: BATCH_QUEUE.into(),
            write_queue: WRITE_QUEUE.into(),
            snapshot,
            batches,
            max_retries: range.max_retries,
        };
        ctx.fan_out(fan_out).await?;
        Ok(json!({ "batches": count }))
    }
}

/// One batch: the sum of `i^exponent` over `from..=to`, the exponent from the snapshot.
pub struct SumSquaresBatch;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    index: u64,
    from: u64,
    to: u64,
}

#[async_trait]
impl Operation for SumSquaresBatch {
    fn name(&self) -> &'static str {
        SUM_SQUARES_BATCH
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        parse_payload::<Batch>(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let batch: Batch = parse_payload(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        let snapshot = ctx.snapshot();
        let exponent = snapshot["exponent"].as_u64().and_then(|e| u32::try_from(e).ok()).unwrap_or(2);
        if let Some(delay) = snapshot["batch_delay_ms"].as_u64().filter(|ms| *ms > 0) {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if snapshot["fail_batch"].as_u64() == Some(batch.index) {
            return Err(OperationError::new("DemoFailure", format!("batch {} was told to fail", batch.index)));
        }
        let sum = (batch.from..=batch.to)
            .try_fold(0_u64, |sum, i| i.checked_pow(exponent).and_then(|power| sum.checked_add(power)))
            .ok_or_else(|| OperationError::new("Overflow", "the sum does not fit 64 bits"))?;
        Ok(json!({ "sum": sum }))
    }
}
