//! How job ids travel from the API to the workers: the `Transport` trait and its
//! implementations. The store stays the source of truth; a message only says "look at job X".

mod amqp;
pub mod bundle;
mod in_process;
pub mod settings;

use std::time::Duration;

use async_trait::async_trait;

pub use amqp::AmqpTransport;
pub use in_process::InProcessTransport;

/// The last of a queue's priority levels; 0 is the first (a job's `effective_priority`).
pub const LAST_PRIORITY: u8 = 9;

/// Largest message a consumer accepts; anything bigger is dead-lettered unread. A job
/// message is a UUID; operation messages carry payloads of up to this size.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// A queue of job messages. Delivery is at-least-once: duplicates are harmless because a
/// claim is a compare-and-set, and a lost message is re-sent by the dispatch sweep.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Hands `body` to `queue` at `priority`; returns once the transport has accepted it.
    /// A queue delivers what waits at a lower number first (0 to [`LAST_PRIORITY`]), and
    /// what waits at one level in the order it came.
    async fn publish_at(&self, queue: &str, body: Vec<u8>, priority: u8) -> Result<(), TransportError>;

    /// [`Transport::publish_at`] the first level: for messages that are not jobs'
    /// (batches, outcomes, replayed dead letters).
    async fn publish(&self, queue: &str, body: Vec<u8>) -> Result<(), TransportError> {
        self.publish_at(queue, body, 0).await
    }

    /// Hands `body` to `queue` once `delay` has passed, with no consumer holding it
    /// meanwhile. RabbitMQ keeps it in `queue`'s wait queue, whose messages expire back into
    /// `queue` (a message waits behind the longer delays queued before it); in process, a
    /// timer holds it. It comes back at the first level.
    async fn publish_after(&self, queue: &str, body: Vec<u8>, delay: Duration) -> Result<(), TransportError>;

    /// Starts receiving from `queue`, with at most `prefetch` deliveries unacknowledged.
    async fn subscribe(&self, queue: &str, prefetch: u16) -> Result<Box<dyn Subscription>, TransportError>;

    /// Sets aside a message that cannot be processed (not a job id, unknown job, oversized),
    /// with the reason, in `queue`'s dead-letter queue. It is never executed from there.
    async fn dead_letter(&self, queue: &str, body: Vec<u8>, reason: &str) -> Result<(), TransportError>;

    /// Takes up to `max` messages from `queue`'s dead letters for inspection. Each must be
    /// settled: `ack` removes it for good, `requeue` puts it back among the dead letters.
    async fn take_dead_letters(&self, queue: &str, max: usize) -> Result<Vec<DeadLetter>, TransportError>;

    /// How many consumers `queue` has now, across every process, when the transport can
    /// tell (`None` when it cannot): so work sent where nobody reads is reported.
    async fn consumers(&self, queue: &str) -> Result<Option<u32>, TransportError>;

    /// Whether the transport can take messages now, for readiness checks.
    async fn check_ready(&self) -> Result<(), TransportError>;

    /// True when accepted messages survive a restart of this process (a broker); false
    /// when they live in this process's memory.
    fn is_durable(&self) -> bool;

    /// A short name for logs and `/readyz`.
    fn kind(&self) -> &'static str;
}

/// A message set aside by [`Transport::dead_letter`].
pub struct DeadLetter {
    pub body: Vec<u8>,
    pub reason: String,
    pub acker: Box<dyn Acker>,
}

/// A stream of deliveries from one queue.
#[async_trait]
pub trait Subscription: Send {
    /// The next delivery; `None` once the subscription is closed.
    async fn next(&mut self) -> Option<Delivery>;
}

/// One message, to be acknowledged only after the database has committed what it caused.
pub struct Delivery {
    pub body: Vec<u8>,
    pub acker: Box<dyn Acker>,
}

/// Settles a delivery with the transport.
#[async_trait]
pub trait Acker: Send {
    async fn ack(self: Box<Self>) -> Result<(), TransportError>;
    /// Gives the message back to the queue for another try.
    async fn requeue(self: Box<Self>) -> Result<(), TransportError>;
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("transport closed")]
    Closed,
    #[error("transport unavailable: {0}")]
    Unavailable(String),
}
