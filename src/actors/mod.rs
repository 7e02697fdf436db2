//! The actors of a running instance, one per file, each with its messages and handlers.

mod queue_consumer;

pub use queue_consumer::QueueConsumer;
