//! The state every handler can reach: the store, the transport and dispatcher, the
//! operation registry, the waiters of the live path, and the server's limits. A
//! capability's own state (remote workers, uploads, the token verifier) is its own
//! `web::Data`, registered beside this.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::outage::Outage;
use crate::dispatch::Dispatcher;
use crate::live::JobWaiters;
use crate::ops::OperationRegistry;
use crate::store::JobStore;
use crate::transport::Transport;

pub struct AppState {
    pub store: Arc<dyn JobStore>,
    /// The database pool, for the tables of capabilities beside the job store (stored sets).
    pub db: sea_orm::DatabaseConnection,
    pub transport: Arc<dyn Transport>,
    pub dispatcher: Dispatcher,
    pub registry: Arc<OperationRegistry>,
    pub max_page_size: u64,
    /// The queues a submission may name: the deployment's job queues.
    pub job_queues: BTreeSet<String>,
    /// Whether the store was found unreachable a moment ago (answer 503 at once).
    pub outage: Outage,
    /// Wakes long-polls and event streams when their job changes.
    pub waiters: Arc<JobWaiters>,
    /// The longest `Prefer: wait` honoured (`server.max_wait_seconds`).
    pub max_wait: Duration,
    /// Cancelled when the process starts draining (SIGTERM): long-polls answer, event
    /// streams end (their clients resume with `Last-Event-ID`), held claims answer empty.
    pub closing: tokio_util::sync::CancellationToken,
}
