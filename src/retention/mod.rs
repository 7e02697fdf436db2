//! Retention: what is kept, and for how long. The [`cleaner::Cleaner`] removes the files of
//! uploaded jobs past their service's `max_age_hours` (the job keeps its row and events,
//! shows `cleaned_at`, and its result answers 410), and deletes the history of jobs finished
//! longer ago than `retention.*_days` (seed 002's retention; what River's job cleaner and
//! Oban's pruner do): rows and events, a top-level job with its children, in bounded
//! batches over partial indexes.

pub mod cleaner;
pub mod settings;

pub use cleaner::{CleanCounts, Cleaner};
