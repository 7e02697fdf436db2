//! Operations only the tests register: the awkward cases real operations rarely show.

use std::time::Duration;

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};
use yardmaster::domain::RetryPolicy;
use yardmaster::ops::{FanOut, JobContext, Operation, OperationError, BATCH_QUEUE, WRITE_QUEUE};

/// Reports progress `steps` times, `pause_ms` apart, and never looks at cancellation: the
/// worst case of an operation that keeps writing after its run was taken away.
pub struct Stubborn;

#[async_trait]
impl Operation for Stubborn {
    fn name(&self) -> &'static str {
        "stubborn"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let steps = payload["steps"].as_i64().unwrap_or(40);
        let pause = Duration::from_millis(payload["pause_ms"].as_u64().unwrap_or(25));
        for step in 1..=steps {
            tokio::time::sleep(pause).await;
            ctx.progress(step, steps).await;
        }
        Ok(json!({ "steps": steps }))
    }
}

/// Fails its first run and succeeds after; it asks for retries itself (two, quickly), so
/// it succeeds only where its operation's retry defaults are honoured.
pub struct Flaky;

#[async_trait]
impl Operation for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    fn retry_defaults(&self) -> (i32, RetryPolicy) {
        (2, RetryPolicy { base_seconds: 0.01, cap_seconds: 0.01, ..RetryPolicy::default() })
    }

    async fn execute(&self, ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        match ctx.attempt() {
            1 => Err(OperationError::new("Flaked", "the first run always fails")),
            attempt => Ok(json!({ "attempt": attempt })),
        }
    }
}

/// A coordinator of `batches` `flaky_batch` batches on `batches`, fanning in on
/// `batch_writes`, each batch with `max_retries`; batch `fail_batch` fails its first
/// `fail_times` runs.
pub struct FlakyFan;

#[async_trait]
impl Operation for FlakyFan {
    fn name(&self) -> &'static str {
        "flaky_fan"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let run = ctx.job().map(|job| job.id.to_string()).unwrap_or_default();
        let snapshot = json!({ "run": run, "fail_batch": payload["fail_batch"], "fail_times": payload["fail_times"] });
        let batches = (0..payload["batches"].as_u64().unwrap_or(1)).map(|index| json!({ "index": index })).collect();
        let fan_out = FanOut {
            operation: "flaky_batch".into(),
            queue: BATCH_QUEUE.into(),
            write_queue: WRITE_QUEUE.into(),
            snapshot,
            batches,
            max_retries: payload["max_retries"].as_i64().unwrap_or(0) as i32,
        };
        ctx.fan_out(fan_out).await?;
        Ok(Value::Null)
    }
}

/// A batch of [`FlakyFan`]: every run is a row `{coordinator id}/{index}` in
/// `execution_log`, so tests count the runs of each batch.
pub struct FlakyBatch;

/// The `execution_log` tag of batch `index` of coordinator `run`.
pub fn batch_tag(run: &str, index: u64) -> String {
    format!("{run}/{index}")
}

#[async_trait]
impl Operation for FlakyBatch {
    fn name(&self) -> &'static str {
        "flaky_batch"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let snapshot = ctx.snapshot().clone();
        let index = payload["index"].as_u64().unwrap_or(0);
        let tag = batch_tag(snapshot["run"].as_str().unwrap_or(""), index);
        let db = ctx.db();
        let failed = |err: sea_orm::DbErr| OperationError::new("CountFailed", err.to_string());
        db.execute_unprepared(&format!("INSERT INTO execution_log (job_id) VALUES ('{tag}')")).await.map_err(failed)?;
        if snapshot["fail_batch"].as_u64() != Some(index) {
            return Ok(json!({ "index": index }));
        }
        let sql = format!("SELECT COUNT(*) FROM execution_log WHERE job_id = '{tag}'");
        let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.map_err(failed)?;
        let runs = row.and_then(|row| row.try_get_by_index::<i64>(0).ok()).unwrap_or(0);
        match runs <= snapshot["fail_times"].as_i64().unwrap_or(0) {
            true => Err(OperationError::new("FlakyBatch", format!("batch {index} failed on run {runs}"))),
            false => Ok(json!({ "index": index, "runs": runs })),
        }
    }
}

/// Returns what its context says of its dependencies: each one's id, status and result.
pub struct Gather;

#[async_trait]
impl Operation for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        let dependencies = ctx.dependencies().await.map_err(|err| OperationError::new("Store", err.to_string()))?;
        Ok(json!({ "dependencies": dependencies }))
    }
}
