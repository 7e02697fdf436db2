//! Operations: the work a job names. The registry resolves them by name, checks payloads at
//! submit time, and hands each execution a [`JobContext`].

mod busy;
mod context;
mod fail;
mod fan_out;
mod group;
mod ping;
mod sleep;
mod sum_squares;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::domain::RetryPolicy;
use crate::store::{BatchRows, Reduce, RunRef};

pub use busy::Busy;
pub use context::{Deferral, JobContext, Services};
pub use fail::Fail;
pub use fan_out::{FanOut, OperationMessage, FAN_OUT_FAILED};
pub use group::Group;
pub use ping::Ping;
pub use sleep::Sleep;
pub use sum_squares::{SumSquares, SumSquaresBatch, BATCH_QUEUE, MAX_BATCHES, WRITE_QUEUE};

/// A unit of work a job can name. Implementations must tolerate running more than once
/// for the same job (at-least-once execution after a crash).
#[async_trait]
pub trait Operation: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// Checks a payload at submit time, so a bad one is refused before it is queued.
    fn validate(&self, payload: &Value) -> Result<(), String>;

    /// The submissions a valid payload will make (a `group`'s children), so they are
    /// checked at submit time too. Default: none.
    fn nested(&self, _payload: &Value) -> Vec<Nested> {
        Vec::new()
    }

    /// True for a coordinator: its jobs make children or batches of their own, and take no
    /// child from anyone else, from submission on. Default: false.
    fn is_coordinator(&self) -> bool {
        false
    }

    /// Retries a job of this operation gets when its submission names none:
    /// `(max_retries, policy)`. Default: no retries.
    fn retry_defaults(&self) -> (i32, RetryPolicy) {
        (0, RetryPolicy::default())
    }

    /// A coordinator's result from its batches' outputs, in batch order (see
    /// [`JobContext::fan_out`]). Default: `{"batches": n}`.
    fn reduce(&self, outputs: Vec<Value>) -> Value {
        serde_json::json!({ "batches": outputs.len() })
    }

    /// What a succeeded batch of this coordinator stores beside its count, in the same
    /// transaction (see [`Reduce::batch_rows`]): rows of the operation's own tables, and the
    /// output kept for [`Operation::reduce`]. Default: the output as it is, no rows.
    fn batch_rows(&self, _parent: RunRef, output: &Value) -> Result<BatchRows, String> {
        Ok(BatchRows { kept: output.clone(), insert: None })
    }

    /// Runs the work; `Ok` carries the job's result. Long work should watch
    /// `ctx.cancelled()` and return early when the job is cancelled.
    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError>;
}

/// A submission an operation's payload will make when it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Nested {
    pub operation: String,
    pub payload: Value,
    /// The queue it names; `None` for the default queue.
    pub queue: Option<String>,
}

/// Why an operation did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationError {
    /// The work failed: `class` becomes the job's `error_code`.
    Failed { class: String, message: String },
    /// A resource is busy (for example the GPU): put the job back and run it again after
    /// `delay`, without counting a failure.
    RetryLater { delay: Duration, reason: String },
}

impl OperationError {
    pub fn new(class: impl Into<String>, message: impl Into<String>) -> Self {
        OperationError::Failed { class: class.into(), message: message.into() }
    }

    pub fn retry_later(delay: Duration, reason: impl Into<String>) -> Self {
        OperationError::RetryLater { delay, reason: reason.into() }
    }
}

impl std::fmt::Display for OperationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperationError::Failed { class, message } => write!(f, "{class}: {message}"),
            OperationError::RetryLater { delay, reason } => write!(f, "retry after {delay:?}: {reason}"),
        }
    }
}

impl std::error::Error for OperationError {}

/// Reads a typed payload; the error text says which field is wrong.
pub fn parse_payload<T: DeserializeOwned>(payload: &Value) -> Result<T, String> {
    T::deserialize(payload).map_err(|err| err.to_string())
}

/// Operations by name.
#[derive(Clone, Default)]
pub struct OperationRegistry {
    operations: BTreeMap<&'static str, Arc<dyn Operation>>,
    /// Operations this build or configuration cannot run, and why.
    unavailable: BTreeMap<&'static str, String>,
}

/// Why a submission's operation or payload was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("unknown operation {0:?}")]
    UnknownOperation(String),
    #[error("invalid payload for {operation}: {reason}")]
    InvalidPayload { operation: String, reason: String },
    #[error("operation {operation:?} is unavailable here: {reason}")]
    Unavailable { operation: String, reason: String },
}

impl OperationRegistry {
    pub fn empty() -> Self {
        Self::default()
    }

    /// The operations every instance ships with.
    pub fn builtin() -> Self {
        Self::empty().with(Ping).with(Sleep).with(Fail).with(Busy).with(SumSquares).with(SumSquaresBatch).with(Group)
    }

    pub fn with(mut self, operation: impl Operation) -> Self {
        self.unavailable.remove(operation.name());
        self.operations.insert(operation.name(), Arc::new(operation));
        self
    }

    /// Names an operation this process cannot run (a feature left out of the build), so a
    /// submission of it is refused as unavailable, not unknown.
    pub fn without(mut self, name: &'static str, reason: impl Into<String>) -> Self {
        if !self.operations.contains_key(name) {
            self.unavailable.insert(name, reason.into());
        }
        self
    }

    /// The names of the operations this registry runs (not those it knows it cannot).
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.operations.keys().copied()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Operation>> {
        self.operations.get(name).cloned()
    }

    /// Refuses unknown operations and malformed payloads, the submissions a payload nests
    /// included (a `group` naming an operation this registry lacks is refused whole).
    pub fn validate(&self, name: &str, payload: &Value) -> Result<(), Rejection> {
        if let Some(reason) = self.unavailable.get(name) {
            return Err(Rejection::Unavailable { operation: name.to_owned(), reason: reason.clone() });
        }
        let operation = self.get(name).ok_or_else(|| Rejection::UnknownOperation(name.to_owned()))?;
        operation
            .validate(payload)
            .map_err(|reason| Rejection::InvalidPayload { operation: name.to_owned(), reason })?;
        for (at, nested) in operation.nested(payload).into_iter().enumerate() {
            self.validate(&nested.operation, &nested.payload).map_err(|rejection| Rejection::InvalidPayload {
                operation: name.to_owned(),
                reason: format!("jobs[{at}]: {rejection}"),
            })?;
        }
        Ok(())
    }

    /// What running a job of `name` with `payload` will submit (see [`Operation::nested`]).
    pub fn nested(&self, name: &str, payload: &Value) -> Vec<Nested> {
        self.get(name).map(|operation| operation.nested(payload)).unwrap_or_default()
    }

    /// Whether `name` is a coordinator (see [`Operation::is_coordinator`]).
    pub fn is_coordinator(&self, name: &str) -> bool {
        self.get(name).is_some_and(|operation| operation.is_coordinator())
    }

    /// `(max_retries, policy)` for a job of `name` whose submission names none.
    pub fn retry_defaults(&self, name: &str) -> (i32, RetryPolicy) {
        self.get(name).map(|operation| operation.retry_defaults()).unwrap_or_default()
    }
}

impl Reduce for OperationRegistry {
    fn reduce(&self, operation: &str, outputs: Vec<Value>) -> Value {
        match self.get(operation) {
            Some(operation) => operation.reduce(outputs),
            None => serde_json::json!({ "batches": outputs.len() }),
        }
    }

    fn batch_rows(&self, operation: &str, parent: RunRef, output: &Value) -> Result<BatchRows, String> {
        match self.get(operation) {
            Some(operation) => operation.batch_rows(parent, output),
            None => Ok(BatchRows { kept: output.clone(), insert: None }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn builtin_payloads_are_checked_at_submit() {
        let registry = OperationRegistry::builtin();
        assert_eq!(registry.validate("ping", &json!({})), Ok(()));
        assert_eq!(registry.validate("sleep", &json!({ "seconds": 0.5 })), Ok(()));
        assert!(matches!(
            registry.validate("sleep", &json!({ "seconds": "soon" })),
            Err(Rejection::InvalidPayload { .. })
        ));
        assert!(matches!(registry.validate("sleep", &json!({ "seconds": -1 })), Err(Rejection::InvalidPayload { .. })));
        assert_eq!(registry.validate("nope", &json!({})), Err(Rejection::UnknownOperation("nope".into())));
    }
}
