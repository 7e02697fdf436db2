//! Executing one job: the two-session pattern (claim, then execute and record).

mod executor;

pub use executor::{Claim, Executor, ExecutorConfig, HandleOutcome};
