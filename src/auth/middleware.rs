//! The guard every non-public route is wrapped in: no token or a bad one is 401 with
//! `WWW-Authenticate`, a token in the query string is refused, a role below the route's is
//! 403, a read-only token that writes is 403, a store that cannot be reached to look the token
//! up is 503 `store_unavailable`; otherwise the [`Caller`] goes into the
//! request for the handler.

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage as _};

use super::api::from_token_error;
use super::caller::{Caller, Role};
use super::verifier::Authenticator;
use super::verifier::Rejected;
use crate::http::{Access, ApiError, Code};

/// Query parameters that carry a token by RFC 6750 §2.3, refused: URLs end up in logs.
const TOKEN_PARAMETERS: [&str; 2] = ["access_token", "token"];

pub async fn authorize(
    access: Access,
    req: ServiceRequest,
    next: Next<BoxBody>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if access == Access::Public {
        return next.call(req).await;
    }
    match admit(access, &req).await {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.call(req).await
        }
        Err(err) => Ok(req.error_response(err)),
    }
}

async fn admit(access: Access, req: &ServiceRequest) -> Result<Caller, ApiError> {
    if carries_token_in_query(req.query_string()) {
        let detail = "a token in the URL is refused: send it as Authorization: Bearer TOKEN";
        return Err(ApiError::new(Code::TokenInQuery, detail));
    }
    let auth =
        req.app_data::<web::Data<Authenticator>>().ok_or_else(|| ApiError::new(Code::Internal, "no verifier"))?;
    let header = req.headers().get(header::AUTHORIZATION).map(|value| value.as_bytes());
    let caller = auth.authenticate(header).await.map_err(|rejected| match rejected {
        Rejected::Missing => ApiError::unauthorized(rejected.to_string()),
        Rejected::Malformed | Rejected::Refused => ApiError::invalid_token(rejected.to_string()),
        // An unreachable store is 503 `store_unavailable` with `Retry-After`, as on every route.
        Rejected::Store(err) => from_token_error(err),
    })?;
    let role = caller.identity().role;
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let allowed = match access {
        Access::Public => true,
        Access::Member => matches!(role, Role::Admin | Role::Member),
        Access::Admin => role == Role::Admin,
        Access::Worker => matches!(role, Role::Admin | Role::Worker),
        Access::Any => true,
        Access::WorkerWrites => reads || matches!(role, Role::Admin | Role::Worker),
    };
    if !allowed {
        let detail = format!("a {} token may not use this endpoint", role.as_str());
        return Err(ApiError::new(Code::Forbidden, detail));
    }
    if caller.identity().read_only && !reads {
        return Err(ApiError::new(Code::ReadOnlyToken, "this token may read, not write"));
    }
    Ok(caller)
}

fn carries_token_in_query(query: &str) -> bool {
    query.split('&').any(|pair| {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        TOKEN_PARAMETERS.iter().any(|parameter| name.eq_ignore_ascii_case(parameter))
    })
}

#[cfg(test)]
mod tests {
    use super::carries_token_in_query;

    #[test]
    fn tokens_in_the_query_are_spotted() {
        assert!(carries_token_in_query("access_token=x"));
        assert!(carries_token_in_query("limit=5&TOKEN=ym_"));
        assert!(carries_token_in_query("token"));
        assert!(!carries_token_in_query("limit=5&cursor=abc"));
        assert!(!carries_token_in_query("tokens=1"));
    }
}
