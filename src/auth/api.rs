//! Token management for admins: `GET /admin/tokens`, `POST /admin/tokens` (the token's text
//! is in this answer only), `DELETE /admin/tokens/{id}` (refused from this moment on).

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::tokens::{self, CreatedToken, NewToken, TokenError, TokenInfo};
use super::{Authenticator, Caller, Role};
use crate::http::{ApiError, AppState, Code, Problem};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user": "alice", "rooms": ["team-a"]}))]
pub struct CreateRequest {
    /// Whose token it is: 1-128 characters, no control characters.
    #[schema(pattern = r"^[^\u0000-\u001f\u007f-\u009f]{1,128}$")]
    pub user: String,
    /// Default `member`.
    #[serde(default)]
    pub role: Option<Role>,
    /// Rooms granted (a member or worker needs one); the first is the default room of its
    /// submissions. Never `@global` or `@internal`.
    #[serde(default)]
    #[schema(max_items = 100, inline, value_type = Vec<GrantedRoom>)]
    pub rooms: Vec<String>,
    /// May read, never write.
    #[serde(default)]
    pub read_only: bool,
    /// What the token is for: 1-128 characters, no control characters.
    #[serde(default)]
    #[schema(pattern = r"^[^\u0000-\u001f\u007f-\u009f]{1,128}$")]
    pub label: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// Every token, newest first; never a secret.
#[utoipa::path(
    get, path = "/admin/tokens", tag = "admin", operation_id = "list_tokens",
    responses((status = 200, description = "The tokens", body = TokenList))
)]
pub async fn list(state: web::Data<AppState>) -> Result<web::Json<TokenList>, ApiError> {
    Ok(web::Json(TokenList { tokens: tokens::list(&state.db).await.map_err(from_token_error)? }))
}

/// Makes a token; its text is in this answer only.
#[utoipa::path(
    post, path = "/admin/tokens", tag = "admin", operation_id = "create_token",
    request_body = CreateRequest,
    responses(
        (status = 201, description = "The token, its text shown this once", body = CreatedToken,
         headers(("Location" = String, description = "The token's URL"))),
        (status = 400, description = "`invalid_room_id`, `invalid_json`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_token_request`, `invalid_request`, `nul_character`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Json<CreateRequest>,
) -> Result<HttpResponse, ApiError> {
    let new = new_token(body.into_inner())?;
    let created = tokens::create(&state.db, new).await.map_err(from_token_error)?;
    let info = &created.info;
    tracing::info!(token_id = %info.id, user = %info.user, role = %info.role.as_str(), by = %caller.identity().user, "token created");
    let location = format!("/admin/tokens/{}", created.info.id);
    Ok(HttpResponse::Created().insert_header((actix_web::http::header::LOCATION, location)).json(created))
}

/// Revokes a token: refused from this moment on.
#[utoipa::path(
    delete, path = "/admin/tokens/{id}", tag = "admin", operation_id = "revoke_token",
    params(("id" = Uuid, Path, description = "The token's id")),
    responses(
        (status = 200, description = "The token, revoked", body = TokenInfo),
        (status = 404, description = "`token_not_found`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn revoke(
    state: web::Data<AppState>,
    auth: web::Data<Authenticator>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> Result<web::Json<TokenInfo>, ApiError> {
    let revoked = tokens::revoke(&state.db, *id).await.map_err(from_token_error)?;
    auth.forget(*id);
    if revoked.is_some() {
        tracing::info!(token_id = %id, by = %caller.identity().user, "token revoked");
    }
    revoked.map(web::Json).ok_or_else(|| ApiError::new(Code::TokenNotFound, format!("no token with id {id}")))
}

/// A room id a token may be granted (documentation only: rooms are checked by `RoomId`).
#[derive(utoipa::ToSchema)]
#[schema(pattern = r"^[^@:\u0000-\u001f\u007f-\u009f]{1,64}$")]
pub struct GrantedRoom(#[allow(dead_code)] String);

fn new_token(request: CreateRequest) -> Result<NewToken, ApiError> {
    let text = [("/user", Some(&request.user)), ("/label", request.label.as_ref())];
    if let Some((pointer, _)) = text.iter().find(|(_, text)| text.is_some_and(|text| text.contains('\0'))) {
        return Err(ApiError::new(Code::NulCharacter, "a NUL character (\\u0000) cannot be stored").at(*pointer));
    }
    let role = request.role.unwrap_or(Role::Member);
    let rooms = request
        .rooms
        .iter()
        .enumerate()
        .map(|(at, room)| crate::http::room_id(room).map_err(|err| err.at(format!("/rooms/{at}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let new = NewToken { user: request.user, label: request.label, role, read_only: request.read_only, rooms };
    new.check().map_err(|err| ApiError::new(Code::InvalidToken, err))?;
    Ok(new)
}

/// The problem a failure of the token store is: 503 `store_unavailable` when the database cannot
/// be reached.
pub(super) fn from_token_error(err: TokenError) -> ApiError {
    match err {
        TokenError::Invalid(detail) => ApiError::new(Code::InvalidToken, detail),
        TokenError::Database(err) => ApiError::from(crate::store::StoreError::from(err)),
        other => {
            tracing::error!(error = %other, "token store failed");
            ApiError::new(Code::Internal, "the token store failed")
        }
    }
}
