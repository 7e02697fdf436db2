//! Executing jobs: the two-session executor, and the registry of runs in flight.

mod executor;
mod in_flight;
pub mod settings;

pub use executor::{
    unstorable, Claim, Executor, ExecutorConfig, HandleOutcome, INVALID_RESULT, OPERATION_PANICKED, TIMEOUT,
};
pub use in_flight::{InFlight, Slot};
