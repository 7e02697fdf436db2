//! Who is looking: the dashboard's session is the API token itself, given once on the login
//! page and kept in a cookie the page's scripts cannot read (`HttpOnly`), sent only to this
//! site's own pages (`SameSite=Strict`, path `/ui`), over HTTPS only when the page was
//! (`Secure`). Every request checks it as the API checks a bearer token, so a revoked token
//! is logged out at once. Forms that change anything carry a CSRF token derived from the
//! session, and a request from another origin (`Origin`) is refused outright.

use actix_web::body::BoxBody;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, FromRequest, HttpMessage as _, HttpRequest};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::html;
use crate::auth::Authenticator;
use crate::auth::{Caller, Role};

/// The session cookie's name.
pub const COOKIE: &str = "ym_session";
/// How long a login lasts (the token may be revoked sooner).
const MAX_AGE_HOURS: i64 = 12;

/// The caller behind the session, and the CSRF token its forms carry.
#[derive(Clone)]
pub struct Viewer {
    caller: Caller,
    csrf: String,
}

impl Viewer {
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether this viewer may change jobs at all (buttons are shown to those who may).
    pub fn writes(&self) -> bool {
        !self.caller.identity().read_only
    }

    /// Checks a form's CSRF token.
    pub fn check_csrf(&self, sent: &str) -> Result<(), actix_web::HttpResponse> {
        if bool::from(sent.as_bytes().ct_eq(self.csrf.as_bytes())) {
            return Ok(());
        }
        Err(html::problem(
            Some(self),
            StatusCode::FORBIDDEN,
            "Form expired",
            "the form's CSRF token does not match this session: reload the page and try again",
        ))
    }
}

impl FromRequest for Viewer {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Viewer, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let viewer = req.extensions().get::<Viewer>().cloned();
        std::future::ready(viewer.ok_or_else(|| actix_web::error::ErrorUnauthorized("no session")))
    }
}

/// The CSRF token of a session: a digest of its token, so it needs no storage and dies
/// with the session.
fn csrf_of(token: &str) -> String {
    let digest = Sha256::new().chain_update(b"yardmaster dashboard csrf\0").chain_update(token.as_bytes()).finalize();
    hex::encode(&digest[..16])
}

/// What a token may do here: admins and members; a worker token is refused.
pub enum Admission {
    Admitted(Viewer),
    /// The token is not (or no longer) valid.
    Refused,
    /// A worker token: valid, but not for people.
    WrongRole,
    /// The token could not be checked (the store is away).
    Unavailable,
}

/// Checks `token` as the API checks a bearer token.
pub async fn admit(auth: &Authenticator, token: &str) -> Admission {
    match auth.verify(token).await {
        Ok(caller) if caller.identity().role == Role::Worker => Admission::WrongRole,
        Ok(caller) => Admission::Admitted(Viewer { caller, csrf: csrf_of(token) }),
        Err(crate::auth::Rejected::Store(err)) => {
            tracing::error!(error = %err, "dashboard session not checked");
            Admission::Unavailable
        }
        Err(_) => Admission::Refused,
    }
}

/// The session cookie for `token`, `Secure` when the request came over HTTPS.
pub fn cookie(req: &HttpRequest, token: &str) -> Cookie<'static> {
    Cookie::build(COOKIE, token.to_owned())
        .path("/ui")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(req.connection_info().scheme() == "https")
        .max_age(actix_web::cookie::time::Duration::hours(MAX_AGE_HOURS))
        .finish()
}

/// A cookie that removes the session.
pub fn removal() -> Cookie<'static> {
    let mut cookie = Cookie::build(COOKIE, "").path("/ui").http_only(true).same_site(SameSite::Strict).finish();
    cookie.make_removal();
    cookie
}

/// Whether a request that changes something comes from a page of this site: an `Origin`
/// (browsers send it with every POST) must name this host.
pub fn same_origin(req: &HttpRequest) -> bool {
    let Some(origin) = req.headers().get(header::ORIGIN).and_then(|value| value.to_str().ok()) else {
        // No Origin: not a browser's cross-site form (SameSite=Strict keeps the cookie
        // from those anyway).
        return true;
    };
    let host = req.connection_info().host().to_owned();
    origin.split_once("://").is_some_and(|(_, rest)| rest == host)
}

/// Middleware around every page but the login page and the assets: a session, or a 303 to
/// the login page; a change from another origin, 403.
pub async fn guard(req: ServiceRequest, next: Next<BoxBody>) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let path = req.path();
    if path == "/ui/login" || path.starts_with("/ui/assets/") {
        return next.call(req).await;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) && !same_origin(req.request()) {
        let response =
            html::problem(None, StatusCode::FORBIDDEN, "Refused", "a change must come from this site's own pages");
        return Ok(req.into_response(response));
    }
    let token = req.cookie(COOKIE).map(|cookie| cookie.value().to_owned()).filter(|token| !token.is_empty());
    let Some(auth) = req.app_data::<web::Data<Authenticator>>().cloned() else {
        return Ok(req.into_response(html::problem(None, StatusCode::INTERNAL_SERVER_ERROR, "Not set up", "no state")));
    };
    let admission = match token {
        Some(token) => admit(&auth, &token).await,
        None => Admission::Refused,
    };
    match admission {
        Admission::Admitted(viewer) => {
            req.extensions_mut().insert(viewer.caller.clone());
            req.extensions_mut().insert(viewer);
            next.call(req).await
        }
        Admission::Unavailable => {
            let response = html::problem(
                None,
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "the session could not be checked: the store does not answer",
            );
            Ok(req.into_response(response))
        }
        Admission::Refused | Admission::WrongRole => {
            let back = match *req.method() {
                Method::GET => format!("/ui/login?next={}", html::enc(&next_of(&req))),
                _ => "/ui/login".to_owned(),
            };
            let mut response = html::see_other(&back);
            let _ = response.add_removal_cookie(&removal());
            Ok(req.into_response(response))
        }
    }
}

/// Where to go back after logging in: this page, if it is one of the dashboard's.
fn next_of(req: &ServiceRequest) -> String {
    let path = req.uri().path_and_query().map_or("/ui", |path| path.as_str());
    safe_next(path).to_owned()
}

/// `next` when it is a dashboard path, else the dashboard's start (no open redirect).
pub fn safe_next(next: &str) -> &str {
    let dashboard = next == "/ui" || next.starts_with("/ui/") || next.starts_with("/ui?");
    if dashboard && !next.contains("//") && !next.contains('\\') {
        next
    } else {
        "/ui"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dashboard_paths_are_gone_back_to() {
        assert_eq!(safe_next("/ui/jobs?status=failed"), "/ui/jobs?status=failed");
        assert_eq!(safe_next("/ui"), "/ui");
        for elsewhere in ["https://evil.example/ui", "//evil.example/ui/", "/uix", "/ui/..//evil", "/ui\\x", "/jobs"] {
            assert_eq!(safe_next(elsewhere), "/ui", "{elsewhere}");
        }
    }

    #[test]
    fn the_csrf_token_depends_on_the_session() {
        assert_ne!(csrf_of("ym_a"), csrf_of("ym_b"));
        assert_eq!(csrf_of("ym_a"), csrf_of("ym_a"));
        assert_eq!(csrf_of("ym_a").len(), 32);
    }
}
