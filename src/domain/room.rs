//! Rooms: the tenants jobs belong to. A room id is checked once, here; `auth/` decides who
//! may read or write which room.

use serde::{Deserialize, Serialize};

/// A room id: `@global`, `@internal`, or 1-64 characters with no `@`, no `:` and no control
/// character (`:` separates a room from the names inside it, `@` marks the reserved rooms).
/// Characters, not bytes: the column is `varchar(64)`, which counts characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RoomId(String);

impl RoomId {
    /// Visible to every room; only admins submit to it.
    pub const GLOBAL: &'static str = "@global";
    /// The server's own work: nobody submits to it over the API; admins read it.
    pub const INTERNAL: &'static str = "@internal";
    /// The room of jobs submitted before rooms existed, and an admin's default.
    pub const DEFAULT: &'static str = "default";
    pub const MAX_LEN: usize = 64;

    pub fn parse(id: &str) -> Result<Self, String> {
        if id == Self::GLOBAL || id == Self::INTERNAL {
            return Ok(RoomId(id.to_owned()));
        }
        let allowed = |c: char| c != '@' && c != ':' && !c.is_control();
        if id.is_empty() || id.chars().count() > Self::MAX_LEN || !id.chars().all(allowed) {
            let max = Self::MAX_LEN;
            return Err(format!(
                "room id {id:?} must be @global, @internal, or 1-{max} characters with no '@', ':' or control character"
            ));
        }
        Ok(RoomId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `@global` or `@internal`: never granted to a member.
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with('@')
    }
}

impl Default for RoomId {
    fn default() -> Self {
        RoomId(Self::DEFAULT.to_owned())
    }
}

impl TryFrom<String> for RoomId {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        RoomId::parse(&value)
    }
}

impl From<RoomId> for String {
    fn from(value: RoomId) -> Self {
        value.0
    }
}

impl std::fmt::Display for RoomId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::RoomId;

    #[test]
    fn room_ids_follow_the_rules() {
        for good in ["@global", "@internal", "default", "room_42", "team a", "é"] {
            assert!(RoomId::parse(good).is_ok(), "{good:?}");
        }
        assert!(RoomId::parse(&"é".repeat(64)).is_ok(), "64 characters of two bytes each");
        for bad in ["", "@", "@globalx", "a@b", "a:b", "x\0", "tab\t", "\u{85}", &"r".repeat(65)] {
            assert!(RoomId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(RoomId::parse("@global").unwrap().is_reserved() && !RoomId::default().is_reserved());
    }
}
