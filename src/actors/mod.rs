//! The actors of a running instance, one per file, each with its messages and handlers.

mod dispatch_sweeper;
mod queue_consumer;

pub use dispatch_sweeper::{DispatchSweeper, Tick};
pub use queue_consumer::QueueConsumer;
