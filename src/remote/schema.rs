//! JSON Schema (draft 2020-12) for registered types: a schema is checked against the
//! meta-schema when registered, and payloads against the schema at submit, answered with
//! the JSON pointers that fail. No `$ref` leaves the document (no HTTP or file resolving
//! is built in), so a registration cannot make the server fetch anything.

use serde_json::Value;

/// Most failures reported for one payload.
const MAX_VIOLATIONS: usize = 20;

pub use jsonschema::Validator;

/// One way a payload fails its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the payload (`""` for the whole payload).
    pub pointer: String,
    pub message: String,
}

/// Compiles a schema after checking it against the draft 2020-12 meta-schema.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("a schema is a JSON object (or true / false)".into());
    }
    if let Err(err) = jsonschema::draft202012::meta::validate(schema) {
        return Err(format!("not a draft 2020-12 schema: {err} at {:?}", err.instance_path().as_str()));
    }
    jsonschema::draft202012::new(schema).map_err(|err| format!("the schema cannot be used: {err}"))
}

/// The ways `payload` fails, at most [`MAX_VIOLATIONS`], in the validator's order.
pub fn violations(validator: &Validator, payload: &Value) -> Vec<Violation> {
    validator
        .iter_errors(payload)
        .take(MAX_VIOLATIONS)
        .map(|err| Violation { pointer: err.instance_path().as_str().to_owned(), message: err.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn payloads_are_checked_with_pointers_and_bad_schemas_refused() {
        let schema = json!({
            "type": "object",
            "properties": {"angle": {"type": "number"}, "axis": {"enum": ["x", "y", "z"]}},
            "required": ["angle"],
        });
        let validator = compile(&schema).unwrap();
        assert!(violations(&validator, &json!({"angle": 90, "axis": "z"})).is_empty());
        let found = violations(&validator, &json!({"angle": "ninety", "axis": "w"}));
        let pointers: Vec<&str> = found.iter().map(|violation| violation.pointer.as_str()).collect();
        assert_eq!(pointers, ["/angle", "/axis"]);
        assert_eq!(violations(&validator, &json!({}))[0].pointer, "");
        assert!(compile(&json!({"type": "nope"})).is_err());
        assert!(compile(&json!([1])).is_err());
        assert!(compile(&json!({"$ref": "https://example.com/schema.json"})).is_err());
    }
}
