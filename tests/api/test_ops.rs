//! Operations only the tests register: the awkward cases real operations rarely show.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use yardmaster::domain::RetryPolicy;
use yardmaster::ops::{JobContext, Operation, OperationError};

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
