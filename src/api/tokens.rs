//! Token management for admins: `GET /admin/tokens`, `POST /admin/tokens` (the token's text
//! is in this answer only), `DELETE /admin/tokens/{id}` (refused from this moment on).

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::{ApiError, Code};
use super::AppState;
use crate::auth::tokens::{self, NewToken, TokenError, TokenInfo};
use crate::auth::Role;
use crate::domain::RoomId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    pub user: String,
    /// `admin`, `member` (default) or `worker`.
    #[serde(default)]
    pub role: Option<String>,
    /// Rooms granted; the first is the default room of its submissions.
    #[serde(default)]
    pub rooms: Vec<String>,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub label: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

pub async fn list(state: web::Data<AppState>) -> Result<web::Json<TokenList>, ApiError> {
    Ok(web::Json(TokenList { tokens: tokens::list(&state.db).await.map_err(from_token_error)? }))
}

pub async fn create(state: web::Data<AppState>, body: web::Json<CreateRequest>) -> Result<HttpResponse, ApiError> {
    let new = new_token(body.into_inner())?;
    let created = tokens::create(&state.db, new).await.map_err(from_token_error)?;
    let location = format!("/admin/tokens/{}", created.info.id);
    Ok(HttpResponse::Created().insert_header((actix_web::http::header::LOCATION, location)).json(created))
}

pub async fn revoke(state: web::Data<AppState>, id: web::Path<Uuid>) -> Result<web::Json<TokenInfo>, ApiError> {
    let revoked = tokens::revoke(&state.db, *id).await.map_err(from_token_error)?;
    state.auth.forget(*id);
    revoked.map(web::Json).ok_or_else(|| ApiError::new(Code::TokenNotFound, format!("no token with id {id}")))
}

fn new_token(request: CreateRequest) -> Result<NewToken, ApiError> {
    let text = [("/user", Some(&request.user)), ("/label", request.label.as_ref()), ("/role", request.role.as_ref())];
    if let Some((pointer, _)) = text.iter().find(|(_, text)| text.is_some_and(|text| text.contains('\0'))) {
        return Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(*pointer));
    }
    let role = Role::parse(request.role.as_deref().unwrap_or("member"))
        .map_err(|err| ApiError::new(Code::InvalidToken, err).at("/role"))?;
    let rooms = request
        .rooms
        .iter()
        .enumerate()
        .map(|(at, room)| {
            RoomId::parse(room).map_err(|err| ApiError::new(Code::InvalidRoomId, err).at(format!("/rooms/{at}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let new = NewToken { user: request.user, label: request.label, role, read_only: request.read_only, rooms };
    new.check().map_err(|err| ApiError::new(Code::InvalidToken, err))?;
    Ok(new)
}

fn from_token_error(err: TokenError) -> ApiError {
    match err {
        TokenError::Invalid(detail) => ApiError::new(Code::InvalidToken, detail),
        TokenError::Database(err) => ApiError::from(crate::store::StoreError::from(err)),
        other => {
            tracing::error!(error = %other, "token store failed");
            ApiError::new(Code::Internal, "the token store failed")
        }
    }
}
