//! Every SQL statement about tokens: create, register one made elsewhere, list, revoke (a
//! compare-and-set on `revoked_at IS NULL`), and the lookup by id that verification makes.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
};
use serde::Serialize;
use uuid::Uuid;

use super::caller::{Identity, Role};
use super::entity::{self as api_token, Model};
use super::secret::{self, Presented};
use crate::domain::RoomId;
use crate::store::clock;

/// Longest user name and label.
pub const MAX_NAME: usize = 128;
/// Most rooms one token is granted.
pub const MAX_ROOMS: usize = 100;

/// What a new token is for, checked by [`NewToken::check`].
#[derive(Debug, Clone)]
pub struct NewToken {
    pub user: String,
    pub label: Option<String>,
    pub role: Role,
    pub read_only: bool,
    pub rooms: Vec<RoomId>,
}

impl NewToken {
    /// A member needs a room to act in; nobody is granted `@global` or `@internal` (admins
    /// reach them by role); names are short printable text.
    pub fn check(&self) -> Result<(), String> {
        // Characters, as the `varchar(128)` columns count them.
        let printable =
            |text: &str| !text.is_empty() && text.chars().count() <= MAX_NAME && !text.chars().any(char::is_control);
        if !printable(&self.user) {
            return Err(format!("user must be 1-{MAX_NAME} characters with no control character"));
        }
        if self.label.as_deref().is_some_and(|label| !printable(label)) {
            return Err(format!("label must be 1-{MAX_NAME} characters with no control character"));
        }
        if let Some(reserved) = self.rooms.iter().find(|room| room.is_reserved()) {
            return Err(format!("{reserved} is not granted to tokens: admins write it, every member reads @global"));
        }
        if self.rooms.len() > MAX_ROOMS {
            return Err(format!("at most {MAX_ROOMS} rooms per token"));
        }
        if self.role != Role::Admin && self.rooms.is_empty() {
            return Err(format!("a {} token needs at least one room", self.role.as_str()));
        }
        Ok(())
    }
}

/// A token as listed: everything but its secret, which is never stored.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: Uuid,
    pub user: String,
    pub label: Option<String>,
    pub role: Role,
    pub read_only: bool,
    #[schema(value_type = Vec<String>)]
    pub rooms: Vec<RoomId>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token just made: its text is shown this once (and never by `Debug`).
#[derive(Clone, Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

impl std::fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedToken").field("token", &"[redacted]").field("info", &self.info).finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    Invalid(String),
    #[error("the system's random generator failed: {0}")]
    Random(String),
    #[error(transparent)]
    Database(#[from] DbErr),
    #[error("stored token {0} is unreadable: {1}")]
    Corrupt(Uuid, String),
}

/// Makes a token and stores its digest.
pub async fn create(db: &impl ConnectionTrait, new: NewToken) -> Result<CreatedToken, TokenError> {
    new.check().map_err(TokenError::Invalid)?;
    let issued = secret::issue().map_err(|err| TokenError::Random(err.to_string()))?;
    let row = insert(db, issued.id, issued.digest, &new).await?;
    Ok(CreatedToken { token: issued.text, info: to_info(row)? })
}

/// The id of the admin token a new store makes at its first start.
pub const FIRST_ADMIN_ID: Uuid = Uuid::from_u128(1);

/// Makes the first admin token of a store, unless another process made it first (`None`):
/// processes starting together on an empty store all try the one id, and one insert wins.
pub async fn create_first(db: &impl ConnectionTrait, new: NewToken) -> Result<Option<CreatedToken>, TokenError> {
    new.check().map_err(TokenError::Invalid)?;
    let issued = secret::issue_as(FIRST_ADMIN_ID).map_err(|err| TokenError::Random(err.to_string()))?;
    if !insert_new(db, issued.id, issued.digest, &new).await? {
        return Ok(None);
    }
    let Some(row) = api_token::Entity::find_by_id(issued.id).one(db).await? else {
        return Err(TokenError::Invalid(format!("token {} vanished as it was made", issued.id)));
    };
    Ok(Some(CreatedToken { token: issued.text, info: to_info(row)? }))
}

/// Stores a token made elsewhere (a deployment's bootstrap token), unless its id is stored
/// already. Err when that id is stored with another secret.
pub async fn register(db: &impl ConnectionTrait, presented: &Presented, new: NewToken) -> Result<bool, TokenError> {
    new.check().map_err(TokenError::Invalid)?;
    // Insert-if-absent, then compare: servers starting together all end with the one row.
    let inserted = insert_new(db, presented.id, presented.digest(), &new).await?;
    let Some(row) = api_token::Entity::find_by_id(presented.id).one(db).await? else {
        return Err(TokenError::Invalid(format!("token {} vanished as it was registered", presented.id)));
    };
    if !presented.matches(&row.secret_sha256) {
        return Err(TokenError::Invalid(format!("token {} is stored with another secret", presented.id)));
    }
    Ok(inserted)
}

async fn insert(db: &impl ConnectionTrait, id: Uuid, digest: String, new: &NewToken) -> Result<Model, TokenError> {
    Ok(api_token::Entity::insert(row(id, digest, new)).exec_with_returning(db).await?)
}

/// Inserts unless a token with this id exists; whether it did.
async fn insert_new(db: &impl ConnectionTrait, id: Uuid, digest: String, new: &NewToken) -> Result<bool, TokenError> {
    let inserted = api_token::Entity::insert(row(id, digest, new))
        .on_conflict_do_nothing_on([api_token::Column::Id])
        .exec_without_returning(db)
        .await?;
    Ok(matches!(inserted, sea_orm::TryInsertResult::Inserted(1)))
}

fn row(id: Uuid, digest: String, new: &NewToken) -> api_token::ActiveModel {
    let rooms: Vec<&str> = new.rooms.iter().map(RoomId::as_str).collect();
    api_token::ActiveModel {
        id: Set(id),
        secret_sha256: Set(digest),
        user_name: Set(new.user.clone()),
        label: Set(new.label.clone()),
        role: Set(new.role.as_str().to_owned()),
        read_only: Set(new.read_only),
        rooms: Set(serde_json::json!(rooms)),
        created_at: Set(clock::now()),
        revoked_at: Set(None),
    }
}

/// Every token, newest first (revoked ones too: they say when).
pub async fn list(db: &impl ConnectionTrait) -> Result<Vec<TokenInfo>, TokenError> {
    let rows = api_token::Entity::find().order_by_desc(api_token::Column::CreatedAt).all(db).await?;
    rows.into_iter().map(to_info).collect()
}

/// How many tokens were ever made (revoked ones count: a store that had tokens is not new).
pub async fn count(db: &impl ConnectionTrait) -> Result<u64, DbErr> {
    api_token::Entity::find().count(db).await
}

/// Revokes a token; `None` when there is no such token. Revoking a revoked token changes
/// nothing and returns it as it is.
pub async fn revoke(db: &impl ConnectionTrait, id: Uuid) -> Result<Option<TokenInfo>, TokenError> {
    api_token::Entity::update_many()
        .col_expr(api_token::Column::RevokedAt, Expr::value(clock::now()))
        .filter(api_token::Column::Id.eq(id))
        .filter(api_token::Column::RevokedAt.is_null())
        .exec(db)
        .await?;
    api_token::Entity::find_by_id(id).one(db).await?.map(to_info).transpose()
}

/// An active (not revoked) token's stored digest and the caller it stands for; `None` when
/// there is no such token or it was revoked. The caller compares the presented secret.
pub async fn active(db: &impl ConnectionTrait, id: Uuid) -> Result<Option<(String, Identity)>, TokenError> {
    let Some(row) = api_token::Entity::find_by_id(id).one(db).await? else { return Ok(None) };
    if row.revoked_at.is_some() {
        return Ok(None);
    }
    let digest = row.secret_sha256.clone();
    let info = to_info(row)?;
    let identity =
        Identity { token_id: info.id, user: info.user, role: info.role, read_only: info.read_only, rooms: info.rooms };
    Ok(Some((digest, identity)))
}

fn to_info(row: Model) -> Result<TokenInfo, TokenError> {
    let id = row.id;
    let corrupt = move |why: String| TokenError::Corrupt(id, why);
    let role = Role::parse(&row.role).map_err(corrupt)?;
    let rooms: Vec<RoomId> = serde_json::from_value(row.rooms.clone()).map_err(|err| corrupt(err.to_string()))?;
    Ok(TokenInfo {
        id: row.id,
        user: row.user_name,
        label: row.label,
        role,
        read_only: row.read_only,
        rooms,
        created_at: row.created_at,
        revoked_at: row.revoked_at,
    })
}
