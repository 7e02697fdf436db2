//! Text the store cannot keep: PostgreSQL refuses the NUL character in text and JSONB, so
//! both backends refuse it at the door (submissions, filters) and scrub it from what workers
//! write (error messages, events), and a result holding one fails its job clearly.

use std::borrow::Cow;

use serde_json::Value;

/// The JSON pointer of the first string or object key in `value` that holds a NUL
/// character (`""` for `value` itself), or `None`.
pub fn nul_pointer(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => text.contains('\0').then(String::new),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(at, item)| nul_pointer(item).map(|inner| format!("/{at}{inner}")))
        }
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            let escaped = key.replace('~', "~0").replace('/', "~1");
            match key.contains('\0') {
                true => Some(format!("/{escaped}")),
                false => nul_pointer(item).map(|inner| format!("/{escaped}{inner}")),
            }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `text` with every NUL replaced by U+FFFD, borrowed when it holds none.
pub fn scrub_nul(text: &str) -> Cow<'_, str> {
    match text.contains('\0') {
        true => Cow::Owned(text.replace('\0', "\u{FFFD}")),
        false => Cow::Borrowed(text),
    }
}

/// Replaces every NUL in `value`'s strings and keys by U+FFFD, in place.
pub fn scrub_nul_value(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(clean) = scrub_nul(text) {
                *text = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub_nul_value),
        Value::Object(fields) => {
            if fields.keys().any(|key| key.contains('\0')) {
                let taken = std::mem::take(fields);
                fields.extend(taken.into_iter().map(|(key, item)| (scrub_nul(&key).into_owned(), item)));
            }
            fields.values_mut().for_each(scrub_nul_value);
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_pointer_names_the_first_nul() {
        assert_eq!(nul_pointer(&json!({ "a": [1, "x\u{0}"] })), Some("/a/1".into()));
        assert_eq!(nul_pointer(&json!({ "a/b": { "\u{0}": 1 } })), Some("/a~1b/\u{0}".into()));
        assert_eq!(nul_pointer(&json!("\u{0}")), Some(String::new()));
        assert_eq!(nul_pointer(&json!({ "a": ["\\u0000", 0] })), None);
    }

    #[test]
    fn scrubbing_leaves_no_nul() {
        let mut value = json!({ "k\u{0}": ["a\u{0}b", { "c": "\u{0}" }] });
        scrub_nul_value(&mut value);
        assert_eq!(nul_pointer(&value), None);
        assert_eq!(value, json!({ "k\u{FFFD}": ["a\u{FFFD}b", { "c": "\u{FFFD}" }] }));
        assert!(matches!(scrub_nul("plain"), Cow::Borrowed("plain")));
    }
}
