//! Embedding yardmaster with operations of your own: this binary is the full `yardmaster`
//! command line (`serve`, `worker`, `reaper`, `migrate`) plus `count`, which records each
//! execution in a table `execution_log (job_id)` that must exist, and `crash`, which kills
//! its worker. The process tests use them to count executions across worker processes and
//! to crash workers on purpose.
//!
//! ```sh
//! cargo run --example custom_operation -- worker --queue default
//! ```

use std::process::ExitCode;

use async_trait::async_trait;
use sea_orm::ConnectionTrait;
use serde_json::{json, Value};
use yardmaster::ops::{JobContext, Operation, OperationError, OperationRegistry};

/// Inserts one row per execution: the job id, or `ephemeral` for operation-queue work.
struct Count;

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

    async fn execute(&self, ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        let who = ctx.job().map_or_else(|| "ephemeral".to_owned(), |job| job.id.to_string());
        let sql = format!("INSERT INTO execution_log (job_id) VALUES ('{who}')");
        ctx.db().execute_unprepared(&sql).await.map_err(|err| OperationError::new("CountFailed", err.to_string()))?;
        Ok(json!({ "counted": true }))
    }
}

/// Kills its own worker process with SIGKILL, every time: a job that crashes its worker.
struct Crash;

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
    yardmaster::cli::main_with(OperationRegistry::builtin().with(Count).with(Crash))
}
