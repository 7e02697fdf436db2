//! Who is calling: a verified token's user, role and rooms, and the rules of what it may read
//! and write. Handlers take a [`Caller`] as an extractor; the middleware put it there.

use std::sync::Arc;

use actix_web::{dev::Payload, FromRequest, HttpMessage as _, HttpRequest};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::RoomId;
use crate::http::{ApiError, Code};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything: every room, `/admin/*`, token management.
    Admin,
    /// Jobs of its granted rooms, and reading `@global`.
    Member,
    /// Remote workers: register types and themselves, claim and report tasks of their
    /// granted rooms over HTTP; they read no jobs.
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Worker => "worker",
        }
    }

    pub fn parse(text: &str) -> Result<Role, String> {
        match text {
            "admin" => Ok(Role::Admin),
            "member" => Ok(Role::Member),
            "worker" => Ok(Role::Worker),
            other => Err(format!("role {other:?} is not one of admin, member, worker")),
        }
    }
}

/// A verified caller. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Caller(Arc<Identity>);

#[derive(Debug)]
pub struct Identity {
    pub token_id: Uuid,
    pub user: String,
    pub role: Role,
    /// May read, never write.
    pub read_only: bool,
    /// Rooms granted; the first is where a submission without `room` goes.
    pub rooms: Vec<RoomId>,
}

impl Caller {
    pub fn new(identity: Identity) -> Self {
        Caller(Arc::new(identity))
    }

    /// An admin with no token, for [`super::Authenticator::trusting`].
    #[doc(hidden)]
    pub fn admin_for_benchmarks() -> Self {
        let identity = Identity {
            token_id: Uuid::nil(),
            user: "benchmark".into(),
            role: Role::Admin,
            read_only: false,
            rooms: Vec::new(),
        };
        Caller::new(identity)
    }

    pub fn identity(&self) -> &Identity {
        &self.0
    }

    pub fn is_admin(&self) -> bool {
        self.0.role == Role::Admin
    }

    /// Where a submission without `room` goes: the first room granted (an admin without
    /// grants: `default`).
    pub fn default_room(&self) -> RoomId {
        self.0.rooms.first().cloned().unwrap_or_default()
    }

    /// Whether jobs of `room` exist for this caller at all: an admin reads every room, a
    /// member its own and `@global`. Anything else is answered as if it did not exist.
    pub fn can_read(&self, room: &str) -> bool {
        match self.0.role {
            Role::Admin => true,
            Role::Member => room == RoomId::GLOBAL || self.0.rooms.iter().any(|granted| granted.as_str() == room),
            Role::Worker => false,
        }
    }

    /// Whether tasks (jobs of registered types and uploaded scripts) of `room` exist for this
    /// caller: as jobs do ([`Self::can_read`]), and for a worker, those of its granted rooms,
    /// whose types it may serve.
    pub fn can_read_tasks(&self, room: &str) -> bool {
        match self.0.role {
            Role::Worker => self.0.rooms.iter().any(|granted| granted.as_str() == room),
            _ => self.can_read(room),
        }
    }

    /// Whether this caller may create, cancel or retry jobs of `room`: `@internal` is the
    /// server's own, `@global` is written by admins only, a member writes its own rooms.
    pub fn may_write(&self, room: &str) -> Result<(), ApiError> {
        let refuse = |why: &str| Err(ApiError::new(Code::RoomForbidden, format!("room {room:?}: {why}")));
        if self.0.read_only {
            return Err(ApiError::new(Code::ReadOnlyToken, "this token may read, not write"));
        }
        if room == RoomId::INTERNAL {
            return refuse("@internal holds the server's own jobs; nobody writes to it over the API");
        }
        match self.0.role {
            Role::Admin => Ok(()),
            Role::Member if room == RoomId::GLOBAL => refuse("only admins write to @global"),
            Role::Member if self.0.rooms.iter().any(|granted| granted.as_str() == room) => Ok(()),
            _ => refuse("this token has no grant for it"),
        }
    }

    /// Whether this caller may register job types in `room`, or serve them as a remote
    /// worker: an admin anywhere but `@internal` (whose types are the server's own), anyone
    /// else in its granted rooms.
    pub fn may_serve(&self, room: &str) -> Result<(), ApiError> {
        let refuse = |why: &str| Err(ApiError::new(Code::RoomForbidden, format!("room {room:?}: {why}")));
        if self.0.read_only {
            return Err(ApiError::new(Code::ReadOnlyToken, "this token may read, not write"));
        }
        if room == RoomId::INTERNAL {
            return refuse("@internal types are the server's own operations");
        }
        match self.0.role {
            Role::Admin => Ok(()),
            _ if room == RoomId::GLOBAL => refuse("only admins register or serve @global types"),
            _ if self.0.rooms.iter().any(|granted| granted.as_str() == room) => Ok(()),
            _ => refuse("this token has no grant for it"),
        }
    }

    /// The rooms a listing shows: `None` for every room (an admin), else the grants and
    /// `@global`.
    pub fn visible_rooms(&self) -> Option<Vec<String>> {
        if self.is_admin() {
            return None;
        }
        let granted = self.0.rooms.iter().map(|room| room.as_str().to_owned());
        Some(granted.chain([RoomId::GLOBAL.to_owned()]).collect())
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        // Only a route the middleware did not guard lacks one: refuse rather than guess.
        let caller = req.extensions().get::<Caller>().cloned();
        std::future::ready(caller.ok_or_else(|| ApiError::unauthorized("this endpoint needs a bearer token")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(role: Role, read_only: bool, rooms: &[&str]) -> Caller {
        let rooms = rooms.iter().map(|room| RoomId::parse(room).unwrap()).collect();
        Caller::new(Identity { token_id: Uuid::nil(), user: "u".into(), role, read_only, rooms })
    }

    #[test]
    fn members_read_their_rooms_and_global_and_write_their_rooms_only() {
        let member = caller(Role::Member, false, &["a", "b"]);
        assert!(member.can_read("a") && member.can_read("@global"));
        assert!(!member.can_read("c") && !member.can_read("@internal"));
        assert!(member.may_write("b").is_ok());
        for room in ["c", "@global", "@internal"] {
            assert_eq!(member.may_write(room).unwrap_err().code, Code::RoomForbidden, "{room}");
        }
        assert_eq!(member.default_room().as_str(), "a");
        assert_eq!(member.visible_rooms().unwrap(), ["a", "b", "@global"]);
    }

    #[test]
    fn admins_write_everywhere_but_internal_and_read_only_tokens_write_nowhere() {
        let admin = caller(Role::Admin, false, &[]);
        assert!(admin.can_read("@internal") && admin.may_write("@global").is_ok() && admin.may_write("x").is_ok());
        assert_eq!(admin.may_write("@internal").unwrap_err().code, Code::RoomForbidden);
        assert_eq!(admin.default_room().as_str(), "default");
        assert!(admin.visible_rooms().is_none());
        let reader = caller(Role::Admin, true, &[]);
        assert_eq!(reader.may_write("x").unwrap_err().code, Code::ReadOnlyToken);
        let worker = caller(Role::Worker, false, &["a"]);
        assert!(!worker.can_read("a") && worker.may_write("a").is_err());
    }
}
