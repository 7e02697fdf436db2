//! The pure job model: statuses, the transition table, event vocabulary.
//!
//! Nothing here touches the database or the network; `store/` enforces these rules in SQL.
//! The types say how they are stored (SeaORM derives: the job struct is the `job` table's
//! entity, the status a string column, the retry policy a JSON one), so rows decode
//! straight into them.

mod batch;
mod dependency;
mod event;
pub mod job;
mod limit;
mod retry;
mod room;
mod status;
mod text;

pub use batch::{BatchAddress, BatchOutcome, BatchResult, FanOutForm};
pub use dependency::{OnDependencyFailure, MAX_DEPENDENCIES};
pub use event::{EventLevel, EventName, NewEvent};
pub use job::{Job, JobEvent, JobSummary, NewJob, QueueName, Unique, LOWEST_PRIORITY, RUN_SCRIPT};
pub use limit::{Limit, LimitRules, Rate, KEY_SEPARATOR};
pub use retry::{RetryPolicy, NEVER_RETRIED};
pub use room::RoomId;
pub use status::{InvalidTransition, JobStatus};
pub use text::{nul_pointer, scrub_nul, scrub_nul_value};
