//! The command line as a client of a server: submit, follow, list, cancel, retry and upload
//! jobs over the HTTP API, as a person at a terminal or a script (`--json`) would.
//!
//! - [`http`]: typed calls and the server's problems as errors.
//! - [`sse`]: the event-stream reader; [`follow`]: a job to its end, across reconnects.
//! - [`commands`]: the subcommands; [`show`] and [`progress`]: what people see.
//! - [`config`]: which server and token (flag, environment, client file).

pub mod commands;
pub mod config;
pub mod follow;
pub mod http;
pub mod progress;
mod queue;
mod schedule;
pub mod show;
pub mod sse;
pub mod when;
