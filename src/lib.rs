//! yardmaster: a durable job orchestration service.
//!
//! How the pieces fit:
//! - [`domain`]: the pure job model and its state machine.
//! - [`store`]: every SQL statement; each transition a compare-and-set with its event.
//! - [`transport`]: how job ids reach workers: in-process, or RabbitMQ.
//! - [`dispatch`]: submit-then-publish, and the sweep that re-sends QUEUED jobs.
//! - [`dead_letters`]: what happens to messages no worker can process.
//! - [`ops`]: the operation registry and the built-in operations.
//! - [`worker`]: the two-session executor that claims, runs and records a job.
//! - [`actors`]: the supervised queue consumers and the dispatch sweeper.
//! - [`api`]: the HTTP API and its problem+json errors.
//! - [`auth`]: API tokens, callers, rooms: who may read and write what.
//! - [`live`]: the notification path that wakes long-polls, event streams and claimers.
//! - [`remote`]: registered job types and remote workers claiming over HTTP.
//! - [`config`], [`startup`], [`telemetry`], [`cli`]: settings, wiring, logs, the command line.
//! - [`dashboard`]: the web dashboard at `/ui`.
//! - [`client`]: the command line's client commands (submit --wait, ls, events --follow, …).

pub mod actors;
pub mod admin;
pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod dead_letters;
pub mod dispatch;
pub mod domain;
pub mod failpoint;
pub mod http;
pub mod inference;
pub mod jobs;
pub mod live;
pub mod ops;
pub mod remote;
pub mod retention;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod transport;
pub mod uploads;
pub mod worker;

pub use config::Settings;
pub use startup::Application;
