//! SeaORM entities for the tables created by `migrations/`. The job table's is the domain's job itself; the others are converted to `domain` types at the edge.

pub mod dispatch_outbox;
pub mod job;
pub mod job_batch;
pub mod job_dependency;
pub mod job_event;
