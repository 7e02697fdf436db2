//! Identity and tenancy: API tokens (random secrets stored only as SHA-256 digests), the
//! caller a token stands for, which rooms it may read and write, the guard around every
//! non-public route, and the first admin token of a new store.
//!
//! Depends on the store's connection and the API's error type; nothing in `store/`, `ops/`
//! or `worker/` depends on it.

pub mod api;
mod bootstrap;
mod caller;
pub mod commands;
mod entity;
mod middleware;
pub mod secret;
pub mod settings;
pub mod tokens;
mod verifier;

pub use crate::http::Access;
pub use bootstrap::{ensure_admin, FirstToken};
pub use caller::{Caller, Identity, Role};
pub use middleware::authorize;
pub use verifier::{Authenticator, Rejected};

use actix_web::web;

use crate::http::{read, Route, Surface, DELETE, READ_WRITE};

/// Token management, for admins.
pub const ROUTES: &[Route] = &[
    Route {
        path: "/admin/tokens",
        allow: READ_WRITE,
        access: Access::Admin,
        handlers: |r| r.route(web::post().to(api::create)).route(read().to(api::list)),
    },
    Route {
        path: "/admin/tokens/{id}",
        allow: DELETE,
        access: Access::Admin,
        handlers: |r| r.route(web::delete().to(api::revoke)),
    },
];

#[derive(utoipa::OpenApi)]
#[openapi(paths(api::list, api::create, api::revoke))]
struct Doc;

pub const SURFACE: Surface = Surface { routes: ROUTES, document: <Doc as utoipa::OpenApi>::openapi };
