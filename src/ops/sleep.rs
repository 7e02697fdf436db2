//! `sleep`: waits `seconds` in `steps` slices, reporting progress after each.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_payload, JobContext, Operation, OperationError};

/// The longest sleep accepted: a day.
const MAX_SECONDS: f64 = 86_400.0;
const MAX_STEPS: u32 = 10_000;

pub struct Sleep;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SleepPayload {
    seconds: f64,
    #[serde(default = "one_step")]
    steps: u32,
}

fn one_step() -> u32 {
    1
}

impl SleepPayload {
    fn parse(payload: &Value) -> Result<Self, String> {
        let parsed: SleepPayload = parse_payload(payload)?;
        if !(0.0..=MAX_SECONDS).contains(&parsed.seconds) {
            return Err(format!("seconds must be between 0 and {MAX_SECONDS}"));
        }
        if !(1..=MAX_STEPS).contains(&parsed.steps) {
            return Err(format!("steps must be between 1 and {MAX_STEPS}"));
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Operation for Sleep {
    fn name(&self) -> &'static str {
        "sleep"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        SleepPayload::parse(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let parsed = SleepPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err));
        // Not held for as long as the sleep lasts.
        drop(payload);
        let payload = parsed?;
        let slice = Duration::from_secs_f64(payload.seconds / f64::from(payload.steps));
        for step in 1..=payload.steps {
            tokio::select! {
                _ = tokio::time::sleep(slice) => {}
                _ = ctx.cancelled() => return Err(OperationError::new("Cancelled", format!("stopped after {} of {} steps", step - 1, payload.steps))),
            }
            ctx.progress(i64::from(step), i64::from(payload.steps)).await;
        }
        Ok(json!({ "slept_seconds": payload.seconds }))
    }
}
