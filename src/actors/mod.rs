//! The actors of a running instance, one per file, each with its messages and handlers.

mod consumer;
mod dispatch_sweeper;
mod operation_consumer;
mod queue_consumer;

pub use consumer::{Consumer, DeliveryHandler};
pub use dispatch_sweeper::{DispatchSweeper, Tick};
pub use operation_consumer::{OperationConsumer, OperationMessage, OperationMessages};
pub use queue_consumer::{JobMessages, QueueConsumer};
