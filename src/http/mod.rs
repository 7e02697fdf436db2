//! What every HTTP surface shares: the problem+json error type and its table of codes, the
//! route type and who may call a route, the state every handler can reach, the extractors'
//! error mapping, the middleware that guards bodies, connections and store outages, and how
//! long an idle connection is kept, by the server and by the project's own clients.
//!
//! Capabilities (`jobs`, `remote`, `uploads`, `inference`, `admin`, `auth`, …) build on this
//! module and export a [`Surface`]: their routes and their part of the OpenAPI document.
//! The server (`api`) merges them; nothing here knows which capabilities exist.

mod body_guard;
mod client_limit;
mod error;
mod extract;
mod outage;
mod prefer;
mod route;
mod state;

pub use body_guard::{is_body_timeout, BodyGuard};
pub use client_limit::ClientLimit;
pub use error::{ApiError, Code, Problem};
pub use extract::{json_config, page_size, path_config, query_config, required_whole_number, room_id, whole_number};
pub use outage::{fail_fast, Outage, DOWN_WINDOW};
pub use prefer::wait as prefer_wait;
pub use route::{
    read, resource, Access, Route, Surface, DELETE, PATCH, PUT, READ, READ_PATCH, READ_PATCH_DELETE, READ_PUT,
    READ_WRITE, WRITE,
};
pub use state::AppState;

/// How long the server keeps an idle connection open for the client's next request
/// (actix-web's default, set explicitly so the clients below can stay under it).
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long this project's own HTTP clients (the CLI, the script host, the tests) keep an
/// idle connection for reuse: well under [`KEEP_ALIVE`], so a client never sends a request
/// on a connection the server is closing in that same instant (the request is lost in
/// flight and the client reads hyper's `IncompleteMessage`).
pub const CLIENT_IDLE: std::time::Duration = std::time::Duration::from_secs(3);
const _: () = assert!(CLIENT_IDLE.as_millis() + 1000 < KEEP_ALIVE.as_millis());
