//! SeaORM entities for the tables created by `migrations/`; converted to `domain` types at the edge.

pub mod job;
pub mod job_batch;
pub mod job_event;
