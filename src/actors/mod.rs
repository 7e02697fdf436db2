//! The actors of a running instance, one per file, each with its messages and handlers.

mod clock_sync;
mod consumer;
mod dispatch_sweeper;
mod heartbeat;
mod operation_consumer;
pub mod periodic;
mod queue_consumer;
pub mod reaper;
pub mod settings;
mod shutdown_guard;
mod write_consumer;

pub use clock_sync::{ClockSync, SyncClock, CLOCK_SYNC_INTERVAL};
pub use consumer::{Consumer, DeliveryHandler, PausedQueues, Slots, StopIntake};
pub use dispatch_sweeper::DispatchSweeper;
pub use heartbeat::{run_with_heartbeat, Heartbeat, StopHeartbeat};
pub use operation_consumer::{OperationConsumer, OperationMessage, OperationMessages};
pub use periodic::{Pass, Periodic, RunNow};
pub use queue_consumer::{JobMessages, QueueConsumer};
pub use reaper::{ReapCounts, Reaper};
pub use shutdown_guard::{ShutdownGuard, Signals, Stop, EXIT_CODE, WORKER_SHUTDOWN};
pub use write_consumer::{BatchWrites, WriteConsumer};
