//! The route type: a path, the methods it takes, who may call it and its handlers; and a
//! capability's [`Surface`], its routes with its part of the OpenAPI document.

use actix_web::{guard, web, HttpResponse};

use super::error::ApiError;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone who reaches the port (health checks).
    Public,
    /// Admins and members (rooms decide the rest).
    Member,
    /// Admins only.
    Admin,
    /// Remote workers (and admins, who may serve `@global` types).
    Worker,
    /// Every role: members, workers and admins (rooms decide the rest).
    Any,
    /// Reads for every role; writes for remote workers (and admins) only.
    WorkerWrites,
}

/// One resource of the API: its path, the methods it takes, who may call it, and its
/// handlers. The server registers each behind the guard its `access` names, and the tests
/// walk the same table.
pub struct Route {
    pub path: &'static str,
    /// The methods it takes (its 405's `Allow`).
    pub allow: &'static str,
    pub access: Access,
    pub handlers: fn(actix_web::Resource) -> actix_web::Resource,
}

impl Route {
    /// The resource with its handlers, answering the methods it does not take with 405.
    pub fn resource(&self) -> actix_web::Resource {
        (self.handlers)(resource(self.path, self.allow))
    }
}

/// What a capability adds to the API: its routes, and the part of the OpenAPI document that
/// describes them (paths, the schemas they use, their tag).
pub struct Surface {
    pub routes: &'static [Route],
    pub document: fn() -> utoipa::openapi::OpenApi,
}

/// The `Allow` values of the resources.
pub const READ: &str = "GET, HEAD";
pub const WRITE: &str = "POST";
pub const READ_WRITE: &str = "GET, HEAD, POST";
pub const DELETE: &str = "DELETE";
pub const PATCH: &str = "PATCH";
pub const PUT: &str = "PUT";
pub const READ_PUT: &str = "GET, HEAD, PUT";
pub const READ_PATCH_DELETE: &str = "GET, HEAD, PATCH, DELETE";
pub const READ_PATCH: &str = "GET, HEAD, PATCH";

/// A route for GET and HEAD (actix-web sends a HEAD answer's headers without its body).
pub fn read() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// A resource that answers 405 problem+json with `Allow: allow` to methods it has no
/// route for.
pub fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path)
        .default_service(web::to(move || async move { Err::<HttpResponse, _>(ApiError::method_not_allowed(allow)) }))
}
