//! The pure job model: statuses, the transition table, event vocabulary.
//!
//! Nothing here touches the database or the network; `store/` enforces these rules in SQL.

mod batch;
mod event;
mod job;
mod retry;
mod room;
mod status;
mod text;

pub use batch::{BatchAddress, BatchOutcome, BatchResult, FanOutForm};
pub use event::{EventLevel, EventName, NewEvent};
pub use job::{Job, JobEvent, JobSummary, NewJob, QueueName, RUN_SCRIPT};
pub use retry::{RetryPolicy, NEVER_RETRIED};
pub use room::RoomId;
pub use status::{InvalidTransition, JobStatus};
pub use text::{nul_pointer, scrub_nul, scrub_nul_value};
