//! Integration tests over real HTTP: each test starts the app on port 0 against a fresh
//! SQLite file and, separately, a fresh PostgreSQL database.

#[path = "../../examples/custom_operation.rs"]
#[allow(dead_code)]
mod custom_operation;
#[macro_use]
mod helpers;
mod amqp_fan_out;
mod amqp_long_runs;
mod amqp_processes;
mod auth;
mod batches;
mod cli;
mod concurrency;
mod dashboard;
mod dead_letters;
mod deadlines;
mod dependencies;
mod dependency_processes;
mod errors;
mod fan_out;
mod finished_at;
mod flow_processes;
mod hostile;
mod http_limits;
#[cfg(feature = "inference")]
mod inference;
mod later;
mod lifecycle;
mod limits;
mod live;
mod logs;
mod metrics;
mod migrations;
#[cfg(feature = "inference")]
mod neighbour_index;
mod openapi;
#[cfg(feature = "otel")]
mod otel;
mod outbox;
mod pauses;
mod placement;
mod planner;
mod priorities;
mod queue_charts;
mod queues;
mod remote;
mod remote_batches;
mod retention;
mod returned_rows;
mod schedule_processes;
mod schedules;
mod stale_runs;
mod systemd;
mod test_ops;
mod tokens_cli;
mod unique;
mod uploads;
mod workers_only;
