//! `fail`: fails with the error class and message it is given, for testing failure paths;
//! with `times`, only the first `times` runs fail and the next succeeds (a flaky dependency).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use super::{parse_payload, JobContext, Operation, OperationError};

pub struct Fail;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailPayload {
    #[serde(default = "default_class")]
    error_class: String,
    #[serde(default = "default_message")]
    message: String,
    /// Fail only this many runs; `None`: every run.
    #[serde(default)]
    times: Option<u32>,
}

fn default_class() -> String {
    "OperationFailed".into()
}

fn default_message() -> String {
    "failed on request".into()
}

impl FailPayload {
    fn parse(payload: &Value) -> Result<Self, String> {
        let parsed: FailPayload = parse_payload(payload)?;
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.');
        if parsed.error_class.is_empty() || parsed.error_class.len() > 128 || !parsed.error_class.chars().all(valid) {
            return Err("error_class must be 1-128 characters of letters, digits, '_' or '.'".into());
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Operation for Fail {
    fn name(&self) -> &'static str {
        "fail"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        FailPayload::parse(payload).map(drop)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = FailPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        let run = u32::try_from(ctx.attempt()).unwrap_or(u32::MAX);
        match payload.times {
            Some(times) if run > times => Ok(serde_json::json!({ "succeeded_on_run": run })),
            _ => Err(OperationError::new(payload.error_class, payload.message)),
        }
    }
}
