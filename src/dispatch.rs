//! Getting committed jobs onto the transport: submit-then-publish, and the sweep that
//! re-sends QUEUED jobs whose message was lost (or never sent).

use std::sync::Arc;

use tracing::{info, warn};
use uuid::Uuid;

use crate::domain::NewJob;
use crate::store::{JobStore, StoreError, Submission};
use crate::transport::Transport;

/// Page size of the dispatch sweep.
const SWEEP_PAGE: u64 = 500;

/// The message body for a job: its id as text.
pub fn encode_job_message(id: Uuid) -> Vec<u8> {
    id.hyphenated().to_string().into_bytes()
}

/// Reads a job message; `None` for anything that is not a job id.
pub fn decode_job_message(body: &[u8]) -> Option<Uuid> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|text| Uuid::parse_str(text.trim()).ok())
}

/// Commits jobs and announces them to workers.
#[derive(Clone)]
pub struct Dispatcher {
    store: Arc<dyn JobStore>,
    transport: Arc<dyn Transport>,
}

impl Dispatcher {
    pub fn new(store: Arc<dyn JobStore>, transport: Arc<dyn Transport>) -> Self {
        Dispatcher { store, transport }
    }

    /// Commits the job, then publishes it. A failed publish is logged, not returned: the job
    /// is durable and QUEUED, and the next sweep sends it.
    pub async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        let submission = self.store.submit(job).await?;
        if submission.created {
            self.publish(&submission.job.queue, submission.job.id).await;
        }
        Ok(submission)
    }

    /// Publishes a job id, logging a failure (the sweep recovers it).
    pub async fn publish(&self, queue: &str, id: Uuid) -> bool {
        match self.transport.publish(queue, encode_job_message(id)).await {
            Ok(()) => true,
            Err(err) => {
                warn!(job_id = %id, queue, error = %err, "publish failed; the dispatch sweep will resend");
                false
            }
        }
    }

    /// Publishes every QUEUED job of `queue`; returns how many were sent.
    pub async fn sweep(&self, queue: &str) -> Result<u64, StoreError> {
        let mut after = None;
        let mut sent = 0;
        loop {
            let ids = self.store.queued_ids(queue, after, SWEEP_PAGE).await?;
            for id in &ids {
                sent += u64::from(self.publish(queue, *id).await);
            }
            match ids.last() {
                Some(last) if ids.len() as u64 == SWEEP_PAGE => after = Some(*last),
                _ => break,
            }
        }
        if sent > 0 {
            info!(queue, sent, "dispatch sweep re-sent queued jobs");
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_messages_round_trip_and_reject_garbage() {
        let id = Uuid::now_v7();
        assert_eq!(decode_job_message(&encode_job_message(id)), Some(id));
        assert_eq!(decode_job_message(b"not a uuid"), None);
        assert_eq!(decode_job_message(&[0xff, 0xfe]), None);
    }
}
