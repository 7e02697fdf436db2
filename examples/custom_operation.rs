//! Embedding yardmaster with operations of your own: this binary is the full `yardmaster`
//! command line (`serve`, `worker`, `reaper`, `migrate`) plus `count`, which records each
//! execution in a table `execution_log (job_id)` that must exist, `fan_count`, a coordinator
//! fanning out `count` batches, and `crash`, which kills its worker. The process tests use
//! them to count executions across worker processes and to crash workers on purpose.
//!
//! ```sh
//! cargo run --example custom_operation -- worker --queue default
//! ```
//!
//! The in-process tests include this file as a module, so both kinds of test run the same
//! operations.

use std::process::ExitCode;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm::ConnectionTrait;
use serde_json::{json, Value};
use yardmaster::ops::{FanOut, JobContext, Operation, OperationError, OperationRegistry, BATCH_QUEUE, WRITE_QUEUE};

/// Inserts one row per execution: the job id, or for operation-queue work the payload's
/// `tag` (default `ephemeral`); waits `delay_ms` first.
pub struct Count;

#[async_trait]
impl Operation for Count {
    fn name(&self) -> &'static str {
        "count"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        match payload {
            Value::Object(_) => Ok(()),
            _ => Err("count takes an object payload".into()),
        }
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        if let Some(delay) = payload["delay_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let tag = payload["tag"].as_str().unwrap_or("ephemeral").to_owned();
        let who = ctx.job().map_or(tag, |job| job.id.to_string());
        let sql = format!("INSERT INTO execution_log (job_id) VALUES ('{who}')");
        ctx.db().execute_unprepared(&sql).await.map_err(|err| OperationError::new("CountFailed", err.to_string()))?;
        Ok(json!({ "counted": true }))
    }
}

/// A coordinator: fans out `batches` `count` batches (`delay_ms` each) to the `batches`
/// queue, fanning in on `batch_writes`.
pub struct FanCount;

#[async_trait]
impl Operation for FanCount {
    fn name(&self) -> &'static str {
        "fan_count"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        payload["batches"].as_u64().map(drop).ok_or_else(|| "batches is required".into())
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let batch = json!({ "delay_ms": payload["delay_ms"].as_u64().unwrap_or(0) });
        let fan_out = FanOut {
            operation: "count".into(),
            queue: BATCH_QUEUE.into(),
            write_queue: WRITE_QUEUE.into(),
            snapshot: Value::Null,
            batches: vec![batch; payload["batches"].as_u64().unwrap_or(0) as usize],
            max_retries: 0,
        };
        ctx.fan_out(fan_out).await?;
        Ok(Value::Null)
    }
}

/// Kills its own worker process with SIGKILL, every time: a job that crashes its worker.
pub struct Crash;

#[async_trait]
impl Operation for Crash {
    fn name(&self) -> &'static str {
        "crash"
    }

    fn validate(&self, _payload: &Value) -> Result<(), String> {
        Ok(())
    }

    async fn execute(&self, _ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        Err(OperationError::new("Unreachable", "the process should be gone"))
    }
}

fn main() -> ExitCode {
    yardmaster::cli::main_with(OperationRegistry::builtin().with(Count).with(FanCount).with(Crash))
}
