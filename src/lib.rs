//! yardmaster: a durable job orchestration service.
//!
//! How the pieces fit, bottom to top (docs/ARCHITECTURE.md has the map and the rules):
//! - [`domain`], [`failpoint`]: the pure job model and its state machine; fault points.
//! - [`store`]: every SQL statement, one trait per role; each transition a compare-and-set
//!   with its event, announced to the store's observers after its commit.
//! - [`transport`]: how job ids reach workers: in-process, or RabbitMQ.
//! - [`telemetry`]: logs, request ids, metrics (the job metrics observe the store).
//! - [`live`]: the notifier (a store observer) and the NOTIFY listener that wake long-polls,
//!   event streams, claimers and script hosts, and stop cancelled runs.
//! - [`dead_letters`]: what happens to messages no worker can process.
//! - [`dispatch`]: submit-then-publish, and the sweep that re-sends QUEUED jobs.
//! - [`ops`]: the operation registry and the built-in operations.
//! - [`worker`]: the two-session executor that claims, runs and records a job.
//! - [`actors`]: the supervised consumers, the heartbeat, the reaper, the dispatch sweeper,
//!   the shutdown guard, and the periodic shell of every background pass.
//! - [`http`]: what every HTTP surface shares: problem+json, routes, the shared state.
//! - Capabilities, each with its routes and its part of the OpenAPI document: [`jobs`],
//!   [`auth`], [`admin`], [`remote`], [`inference`], [`uploads`]; the [`dashboard`] at
//!   `/ui`; [`retention`], the cleaner.
//! - [`api`]: every capability's surface merged into one router and one document.
//! - [`config`], [`startup`], [`cli`], [`client`]: settings composed, wiring, the command
//!   line and its client commands.

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
pub mod flow;
pub mod http;
pub mod inference;
pub mod jobs;
pub mod live;
pub mod ops;
pub mod remote;
pub mod retention;
pub mod schedules;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod transport;
pub mod uploads;
pub mod worker;

pub use config::Settings;
pub use startup::Application;
