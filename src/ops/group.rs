//! `group`: runs a list of jobs as children of this one (each with its own lifecycle, events
//! and retries) and closes when they end: SUCCEEDED once all succeeded, FAILED naming the
//! first child that failed or was cancelled. Cancelling the group cancels its queued
//! children. A child's retries default to its operation's, as a submission's do.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_payload, JobContext, Nested, Operation, OperationError};
use crate::domain::{NewJob, QueueName, RetryPolicy};

/// Most children one group may have.
pub const MAX_CHILDREN: usize = 10_000;

pub struct Group;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupPayload {
    jobs: Vec<Child>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Child {
    operation: String,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    queue: Option<String>,
    /// Default: the child operation's.
    #[serde(default)]
    max_retries: Option<i32>,
    /// Default: the child operation's.
    #[serde(default)]
    retry: Option<RetryPolicy>,
}

impl GroupPayload {
    fn parse(payload: &Value) -> Result<GroupPayload, String> {
        let group: GroupPayload = parse_payload(payload)?;
        if group.jobs.is_empty() || group.jobs.len() > MAX_CHILDREN {
            return Err(format!("jobs must hold 1-{MAX_CHILDREN} children"));
        }
        for (at, child) in group.jobs.iter().enumerate() {
            if let Some(queue) = &child.queue {
                QueueName::parse(queue).map_err(|err| format!("jobs[{at}].queue: {err}"))?;
            }
            if child.max_retries.is_some_and(|retries| !(0..=100).contains(&retries)) {
                return Err(format!("jobs[{at}].max_retries must be 0-100"));
            }
            if let Some(policy) = &child.retry {
                policy.validate().map_err(|err| format!("jobs[{at}].retry: {err}"))?;
            }
        }
        Ok(group)
    }
}

#[async_trait]
impl Operation for Group {
    fn name(&self) -> &'static str {
        "group"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        GroupPayload::parse(payload).map(drop)
    }

    fn nested(&self, payload: &Value) -> Vec<Nested> {
        let Ok(group) = GroupPayload::parse(payload) else { return Vec::new() };
        let children = group.jobs.into_iter();
        children
            .map(|child| Nested {
                payload: child.payload.unwrap_or_else(|| json!({})),
                operation: child.operation,
                queue: child.queue,
            })
            .collect()
    }

    fn is_coordinator(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let group = GroupPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        let children: Vec<NewJob> = group
            .jobs
            .into_iter()
            .map(|child| {
                let queue = child.queue.and_then(|queue| QueueName::parse(&queue).ok()).unwrap_or_default();
                let (default_retries, default_policy) = ctx.registry().retry_defaults(&child.operation);
                NewJob {
                    queue,
                    payload: child.payload.unwrap_or_else(|| json!({})),
                    max_retries: child.max_retries.unwrap_or(default_retries),
                    retry_policy: child.retry.unwrap_or(default_policy),
                    ..NewJob::new(child.operation)
                }
            })
            .collect();
        let count = children.len();
        ctx.spawn_children(children).await?;
        Ok(json!({ "children": count }))
    }
}
