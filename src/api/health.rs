//! `GET /healthz` (the process answers) and `GET /readyz` (its store and transport do).

use actix_web::web;
use serde::Serialize;

use crate::http::{ApiError, AppState, Code, Problem};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// Always `ready`.
    pub status: &'static str,
    pub store: &'static str,
    /// `in_process` or `amqp`.
    pub transport: &'static str,
}

/// The process answers (no token needed).
#[utoipa::path(
    get, path = "/healthz", tag = "health", operation_id = "healthz",
    responses((status = 200, description = "The process is up", body = Health))
)]
pub async fn healthz() -> web::Json<Health> {
    web::Json(Health { status: "ok" })
}

/// The store and the transport answer (no token needed).
#[utoipa::path(
    get, path = "/readyz", tag = "health", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready to serve", body = Ready),
        (status = 503, description = "`not_ready`: the store or the transport does not answer",
         body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(state: web::Data<AppState>) -> Result<web::Json<Ready>, ApiError> {
    state.store.ping().await.map_err(|err| ApiError::new(Code::NotReady, format!("store: {err}")))?;
    state.transport.check_ready().await.map_err(|err| ApiError::new(Code::NotReady, format!("transport: {err}")))?;
    Ok(web::Json(Ready { status: "ready", store: "ok", transport: state.transport.kind() }))
}
