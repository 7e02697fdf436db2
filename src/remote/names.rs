//! Names of registered types: `room:category:name` in full, or `category:name` in a
//! submission (the job's room first, then `@global`).

use crate::domain::RoomId;

/// Longest category.
pub const MAX_CATEGORY: usize = 32;
/// Longest type name.
pub const MAX_NAME: usize = 64;

/// A registered type's full name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TypeName {
    pub room: RoomId,
    pub category: String,
    pub name: String,
}

impl TypeName {
    /// Checks the parts (not the category allow-list, which is configuration).
    pub fn new(room: RoomId, category: &str, name: &str) -> Result<TypeName, String> {
        segment("category", category, MAX_CATEGORY)?;
        segment("name", name, MAX_NAME)?;
        Ok(TypeName { room, category: category.to_owned(), name: name.to_owned() })
    }

    /// Reads `room:category:name`.
    pub fn parse(full: &str) -> Result<TypeName, String> {
        let mut parts = full.splitn(3, ':');
        let (Some(room), Some(category), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("{full:?} is not a type name of the form room:category:name"));
        };
        TypeName::new(RoomId::parse(room)?, category, name)
    }

    /// `room:category:name`: the `operation` of the type's jobs.
    pub fn full(&self) -> String {
        format!("{}:{}:{}", self.room, self.category, self.name)
    }
}

impl std::fmt::Display for TypeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.room, self.category, self.name)
    }
}

/// Whether a submission's `operation` names a registered type rather than a built-in
/// operation (built-in names hold no `:`).
pub fn is_type_reference(operation: &str) -> bool {
    operation.contains(':')
}

/// What a submission's `operation` may say: `category:name`, or the full name.
pub enum TypeReference {
    Short { category: String, name: String },
    Full(TypeName),
}

impl TypeReference {
    pub fn parse(operation: &str) -> Result<TypeReference, String> {
        match operation.matches(':').count() {
            1 => {
                let (category, name) = operation.split_once(':').unwrap_or_default();
                segment("category", category, MAX_CATEGORY)?;
                segment("name", name, MAX_NAME)?;
                Ok(TypeReference::Short { category: category.to_owned(), name: name.to_owned() })
            }
            _ => TypeName::parse(operation).map(TypeReference::Full),
        }
    }
}

/// 1 to `max` characters of letters, digits, `.`, `_` or `-`.
fn segment(what: &str, text: &str, max: usize) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if text.is_empty() || text.len() > max || !text.chars().all(valid) {
        return Err(format!("type {what} {text:?} must be 1-{max} characters of letters, digits, '.', '_' or '-'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_names_round_trip_and_bad_parts_are_refused() {
        let name = TypeName::parse("room_42:modifiers:Rotate").unwrap();
        assert_eq!(name.full(), "room_42:modifiers:Rotate");
        assert_eq!(TypeName::parse("@global:analysis:RDF").unwrap().room.as_str(), "@global");
        for bad in ["a:b", "a::c", "a:b:", "a:b:c:d", "@x:b:c", "a:b c:d", "a:b:\u{0}"] {
            assert!(TypeName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(TypeReference::parse("modifiers:Rotate"), Ok(TypeReference::Short { .. })));
        assert!(matches!(TypeReference::parse("r:modifiers:Rotate"), Ok(TypeReference::Full(_))));
        assert!(!is_type_reference("sleep") && is_type_reference("modifiers:Rotate"));
    }
}
