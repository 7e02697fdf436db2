//! `GET /healthz` (the process answers) and `GET /readyz` (its store and transport do).

use actix_web::{web, HttpResponse};
use serde_json::json;

use super::error::{ApiError, Code};
use super::AppState;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.store.ping().await.map_err(|err| ApiError::new(Code::NotReady, format!("store: {err}")))?;
    state.transport.check_ready().await.map_err(|err| ApiError::new(Code::NotReady, format!("transport: {err}")))?;
    Ok(HttpResponse::Ok().json(json!({ "status": "ready", "store": "ok", "transport": state.transport.kind() })))
}
