//! Message bodies that carry one JSON item or several: a coordinator's batches to an
//! operations queue (`batches_per_message`) and their outcomes to a write queue. One item
//! travels as its own JSON object, as before bundles existed, so a worker of any version
//! reads it; several travel as a JSON array of those objects.

use serde::de::DeserializeOwned;

use super::MAX_MESSAGE_BYTES;

/// Packs encoded items into message bodies: up to `per_message` items a body, in order,
/// and never past [`MAX_MESSAGE_BYTES`] unless one item alone is that big (it goes alone,
/// and the consumer sets it aside as oversized).
pub fn pack(items: Vec<Vec<u8>>, per_message: usize) -> Vec<Vec<u8>> {
    let per_message = per_message.max(1);
    let mut bodies = Vec::with_capacity(items.len().div_ceil(per_message));
    let mut group: Vec<Vec<u8>> = Vec::with_capacity(per_message.min(items.len()));
    let mut bytes = 0;
    for item in items {
        // The array's brackets and a comma per item.
        let grown = bytes + item.len() + 1;
        if !group.is_empty() && (group.len() == per_message || grown + 1 > MAX_MESSAGE_BYTES) {
            bodies.push(join(std::mem::take(&mut group)));
            bytes = 0;
        }
        bytes += item.len() + 1;
        group.push(item);
    }
    if !group.is_empty() {
        bodies.push(join(group));
    }
    bodies
}

/// One item as it is; several as a JSON array.
fn join(mut group: Vec<Vec<u8>>) -> Vec<u8> {
    if group.len() == 1 {
        return group.pop().unwrap_or_default();
    }
    let mut body = Vec::with_capacity(group.iter().map(|item| item.len() + 1).sum::<usize>() + 1);
    body.push(b'[');
    for (n, item) in group.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.push(b']');
    body
}

/// The items of a body: one object, or an array of at least one; `None` when the body is
/// neither (an empty array included).
pub fn unpack<T: DeserializeOwned>(body: &[u8]) -> Option<Vec<T>> {
    let first = body.iter().find(|byte| !byte.is_ascii_whitespace())?;
    if *first == b'[' {
        let items: Vec<T> = serde_json::from_slice(body).ok()?;
        return (!items.is_empty()).then_some(items);
    }
    serde_json::from_slice(body).ok().map(|item| vec![item])
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn items(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|n| serde_json::to_vec(&json!({ "n": n })).unwrap()).collect()
    }

    #[test]
    fn one_item_travels_as_itself() {
        let bodies = pack(items(1), 32);
        assert_eq!(bodies, vec![br#"{"n":0}"#.to_vec()]);
        assert_eq!(unpack::<Value>(&bodies[0]), Some(vec![json!({ "n": 0 })]));
    }

    #[test]
    fn several_items_travel_as_arrays_of_at_most_per_message() {
        let bodies = pack(items(70), 32);
        assert_eq!(bodies.len(), 3);
        let unpacked: Vec<Vec<Value>> = bodies.iter().map(|body| unpack(body).unwrap()).collect();
        assert_eq!(unpacked.iter().map(Vec::len).collect::<Vec<_>>(), [32, 32, 6]);
        let all: Vec<Value> = unpacked.into_iter().flatten().collect();
        assert_eq!(all, (0..70).map(|n| json!({ "n": n })).collect::<Vec<_>>());
    }

    #[test]
    fn a_body_never_grows_past_the_message_limit() {
        let big = |fill: char| serde_json::to_vec(&json!({ "fill": fill.to_string().repeat(400 * 1024) })).unwrap();
        let bodies = pack(vec![big('a'), big('b'), big('c')], 32);
        assert_eq!(bodies.len(), 2, "two fit in a message, the third goes on");
        assert!(bodies.iter().all(|body| body.len() <= MAX_MESSAGE_BYTES));
        assert_eq!(unpack::<Value>(&bodies[0]).unwrap().len(), 2);
    }

    #[test]
    fn what_is_neither_an_item_nor_items_is_refused() {
        assert_eq!(unpack::<Value>(b"[]"), None);
        assert_eq!(unpack::<Value>(b""), None);
        assert_eq!(unpack::<Value>(b"[{\"n\":1},"), None);
        assert_eq!(unpack::<std::collections::HashMap<String, u32>>(b"[{\"n\":1},{\"n\":\"x\"}]"), None);
    }
}
