//! `busy`: asks to be retried later `times` times, then succeeds: a resource that is busy
//! (a GPU held by another job) and frees up.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_payload, JobContext, Operation, OperationError};

const MAX_DELAY_SECONDS: f64 = 86_400.0;

pub struct Busy;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BusyPayload {
    /// How many runs answer "retry later" before one succeeds.
    times: u32,
    delay_seconds: f64,
}

impl BusyPayload {
    fn parse(payload: &Value) -> Result<Self, String> {
        let parsed: BusyPayload = parse_payload(payload)?;
        if !(0.0..=MAX_DELAY_SECONDS).contains(&parsed.delay_seconds) {
            return Err(format!("delay_seconds must be between 0 and {MAX_DELAY_SECONDS}"));
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Operation for Busy {
    fn name(&self) -> &'static str {
        "busy"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        BusyPayload::parse(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = BusyPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        // `attempts` counts claims, this one included.
        let run = u32::try_from(ctx.attempt()).unwrap_or(u32::MAX);
        if run <= payload.times {
            let delay = Duration::from_secs_f64(payload.delay_seconds);
            return Err(OperationError::retry_later(delay, format!("resource busy (run {run})")));
        }
        Ok(json!({ "runs": run }))
    }
}
