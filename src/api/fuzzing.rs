//! Entry points for the fuzz targets (`fuzz/`, `scripts/fuzz.sh`): every parser of outside
//! input, run as the server runs it. Each returns whatever the input; after a parse that
//! succeeds, the checks assert what an accepted input promises (a panic is a finding).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use actix_web::web;

use crate::admin::SummaryQuery;
use crate::dispatch::decode_job_message;
use crate::domain::{nul_pointer, BatchOutcome};
use crate::jobs::{parse_submission, EventsQuery, ListQuery, Submissions};
use crate::ops::{OperationMessage, OperationRegistry};

fn registry() -> &'static OperationRegistry {
    static REGISTRY: OnceLock<OperationRegistry> = OnceLock::new();
    REGISTRY.get_or_init(OperationRegistry::builtin)
}

/// A `POST /jobs` body.
pub fn submission(body: &[u8]) {
    let queues = BTreeSet::from(["default".to_owned()]);
    let jobs = crate::jobs::settings::JobsSettings::default();
    let rules = Submissions { registry: registry(), job_queues: &queues, jobs: &jobs };
    if let Ok(new) = parse_submission(&rules, body) {
        assert!(nul_pointer(&new.payload).is_none(), "an accepted payload holds a NUL");
        assert!(!new.operation.contains('\0') && new.idempotency_key.iter().all(|key| !key.contains('\0')));
        // A registered type's job waits on the remote queue (its type is checked against the
        // store once its room is known); any other names a queue this deployment consumes.
        let queue = match crate::remote::names::is_type_reference(&new.operation) {
            true => crate::domain::QueueName::REMOTE,
            false => "default",
        };
        assert_eq!(new.queue.as_str(), queue, "an accepted job names an unknown queue");
        assert!((0..=100).contains(&new.max_retries));
    }
}

/// A message from the broker, as each kind of consumer decodes it.
pub fn broker_message(body: &[u8]) {
    let _ = decode_job_message(body);
    if let Ok(message) = serde_json::from_slice::<OperationMessage>(body) {
        if registry().validate(&message.operation, &message.payload).is_ok() {
            let _ = message.encode();
        }
    }
    if let Ok(outcome) = serde_json::from_slice::<BatchOutcome>(body) {
        let _ = outcome.encode();
    }
}

/// A query string of the listing, events and dead-letter endpoints.
pub fn query_string(query: &str) {
    let _ = web::Query::<ListQuery>::from_query(query);
    let _ = web::Query::<EventsQuery>::from_query(query);
    let _ = web::Query::<SummaryQuery>::from_query(query);
}
