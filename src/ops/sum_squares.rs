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

    /// Batch `index` (below [`Range::batches`]): every bound saturates, so a `batch_size`
    /// near `u64::MAX` is one batch up to `end`, never a wrapped, empty range.
    fn batch(&self, index: u64) -> Value {
        let from = self.start.saturating_add(index.saturating_mul(self.batch_size));
        let to = from.saturating_add(self.batch_size - 1).min(self.end);
        json!({ "index": index, "from": from, "to": to })
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

    fn is_coordinator(&self) -> bool {
        true
    }

    /// The sum over all batches (`null` with `overflow` if it does not fit 64 bits).
    fn reduce(&self, outputs: Vec<Value>) -> Value {
        let sum = outputs.iter().filter_map(|output| output["sum"].as_u64()).try_fold(0_u64, u64::checked_add);
        match sum {
            Some(sum) => json!({ "batches": outputs.len(), "sum": sum }),
            None => json!({ "batches": outputs.len(), "sum": null, "overflow": true }),
        }
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
        let batches: Vec<Value> = (0..range.batches()).map(|index| range.batch(index)).collect();
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_huge_batch_size_is_one_batch_up_to_end() {
        let range = Range::parse(&json!({ "start": 1, "end": 10, "batch_size": u64::MAX - 1 })).unwrap();
        assert_eq!(range.batches(), 1);
        assert_eq!(range.batch(0), json!({ "index": 0, "from": 1, "to": 10 }));
        let last = Range::parse(&json!({ "start": 0, "end": 1 << 20, "batch_size": 1 << 19 })).unwrap();
        assert_eq!(last.batch(2), json!({ "index": 2, "from": 1 << 20, "to": 1 << 20 }));
    }

    #[test]
    fn a_sum_that_overflows_says_so() {
        let outputs = vec![json!({ "sum": u64::MAX }), json!({ "sum": 1 })];
        assert_eq!(SumSquares.reduce(outputs), json!({ "batches": 2, "sum": null, "overflow": true }));
    }
}
