//! `ping`: does nothing and succeeds; the smoke test of a deployment.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{JobContext, Operation, OperationError};

pub struct Ping;

#[async_trait]
impl Operation for Ping {
    fn name(&self) -> &'static str {
        "ping"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        match payload {
            Value::Object(_) | Value::Null => Ok(()),
            _ => Err("ping takes an object payload (or none)".into()),
        }
    }

    async fn execute(&self, _ctx: JobContext, _payload: Value) -> Result<Value, OperationError> {
        Ok(json!({ "pong": true }))
    }
}
