//! The first admin token. A store with no token at all gets one at the first `serve`, whose
//! text the caller prints once (it is stored only as a digest, and never logged); a
//! deployment can instead hand `serve` its own admin token (`auth.bootstrap_token`, from the
//! environment), registered if it is not stored yet.

use sea_orm::ConnectionTrait;

use super::caller::Role;
use super::secret;
use super::settings::Secret;
use super::tokens::{self, NewToken, TokenError};

/// What start-up did about the first admin token.
pub enum FirstToken {
    /// Tokens exist already (or the bootstrap token was stored before): nothing to do.
    Existing,
    /// The bootstrap token from the settings was stored now.
    Registered,
    /// A new store: this admin token was made, to be shown once.
    Created(Secret),
}

/// The user name of tokens made at start-up.
pub const BOOTSTRAP_USER: &str = "admin";

pub async fn ensure_admin(db: &impl ConnectionTrait, bootstrap: Option<&Secret>) -> Result<FirstToken, TokenError> {
    let admin = NewToken {
        user: BOOTSTRAP_USER.to_owned(),
        label: Some("bootstrap".to_owned()),
        role: Role::Admin,
        read_only: false,
        rooms: Vec::new(),
    };
    if let Some(text) = bootstrap {
        let presented = secret::parse(text.expose()).ok_or_else(|| {
            TokenError::Invalid(
                "auth.bootstrap_token is not a yardmaster token (make one with `yardmaster token new`)".into(),
            )
        })?;
        return Ok(match tokens::register(db, &presented, admin).await? {
            true => FirstToken::Registered,
            false => FirstToken::Existing,
        });
    }
    if tokens::count(db).await? > 0 {
        return Ok(FirstToken::Existing);
    }
    // Servers starting together on an empty store: one makes the token, the rest find it.
    Ok(match tokens::create_first(db, admin).await? {
        Some(created) => FirstToken::Created(Secret::new(created.token)),
        None => FirstToken::Existing,
    })
}
