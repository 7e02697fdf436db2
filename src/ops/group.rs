//! `group`: runs a list of jobs as children of this one (each with its own lifecycle, events
//! and retries) and closes when they end: SUCCEEDED once all succeeded, FAILED naming the
//! first child that failed or was cancelled. Cancelling the group cancels its queued
//! children.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_payload, JobContext, Operation, OperationError};
use crate::domain::{NewJob, QueueName};

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
    #[serde(default)]
    max_retries: i32,
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
            if !(0..=100).contains(&child.max_retries) {
                return Err(format!("jobs[{at}].max_retries must be 0-100"));
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

    fn nested(&self, payload: &Value) -> Vec<(String, Value)> {
        let Ok(group) = GroupPayload::parse(payload) else { return Vec::new() };
        let children = group.jobs.into_iter();
        children.map(|child| (child.operation, child.payload.unwrap_or_else(|| json!({})))).collect()
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let group = GroupPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        let children: Vec<NewJob> = group
            .jobs
            .into_iter()
            .map(|child| {
                let queue = child.queue.and_then(|queue| QueueName::parse(&queue).ok()).unwrap_or_default();
                NewJob {
                    queue,
                    payload: child.payload.unwrap_or_else(|| json!({})),
                    max_retries: child.max_retries,
                    ..NewJob::new(child.operation)
                }
            })
            .collect();
        let count = children.len();
        ctx.spawn_children(children).await?;
        Ok(json!({ "children": count }))
    }
}
