//! Identity and tenancy: API tokens (random secrets stored only as SHA-256 digests), the
//! caller a token stands for, which rooms it may read and write, the guard around every
//! non-public route, and the first admin token of a new store.
//!
//! Depends on the store's connection and the API's error type; nothing in `store/`, `ops/`
//! or `worker/` depends on it.

mod bootstrap;
mod caller;
pub mod commands;
mod entity;
mod middleware;
pub mod secret;
pub mod settings;
pub mod tokens;
mod verifier;

pub use bootstrap::{ensure_admin, FirstToken};
pub use caller::{Caller, Identity, Role};
pub use middleware::{authorize, Access};
pub use verifier::{Authenticator, Rejected};
