//! `transfer_annotations`, PROTEA's last step after embeddings: each query's labels scored
//! from its `k` nearest labelled items of a set (cosine), each label the similarity-weighted
//! share of those neighbours that carry it, the `top` best per query.
//!
//! The coordinator is a search like `nearest_neighbours` (`Coordinator::search`): the same batches
//! embed the queries and rank the set, with `transfer` in their snapshot.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::ops::Coordinator;
use super::ranking::Found;
use super::search::{check_search, in_caller_order, method_of};
use crate::ops::{parse_payload, JobContext, Operation, OperationError};

pub const TRANSFER_ANNOTATIONS: &str = "transfer_annotations";
/// Most labels answered per query.
pub const MAX_TOP: usize = 100;
/// The set has no item with labels.
pub const SET_UNLABELLED: &str = "SetUnlabelled";

/// `transfer_annotations`: `{"set": name, "queries": [text, …], "k": n, "top": n}`.
pub struct TransferAnnotations(pub(super) Coordinator);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferPayload {
    set: String,
    queries: Vec<String>,
    #[serde(default = "default_k")]
    k: usize,
    #[serde(default = "default_top")]
    top: usize,
}

fn default_k() -> usize {
    10
}

fn default_top() -> usize {
    5
}

impl TransferPayload {
    fn parse(payload: &Value) -> Result<TransferPayload, String> {
        let parsed: TransferPayload = parse_payload(payload)?;
        check_search(&parsed.set, &parsed.queries, parsed.k)?;
        if !(1..=MAX_TOP).contains(&parsed.top) {
            return Err(format!("top must be 1 to {MAX_TOP}"));
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Operation for TransferAnnotations {
    fn name(&self) -> &'static str {
        TRANSFER_ANNOTATIONS
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        TransferPayload::parse(payload).map(drop)
    }

    fn is_coordinator(&self) -> bool {
        true
    }

    /// Every query with its scored labels and the neighbours they came from, in the
    /// caller's order.
    fn reduce(&self, outputs: Vec<Value>) -> Value {
        let first = outputs.first().cloned().unwrap_or_default();
        let top = first["top"].clone();
        let method = method_of(&outputs);
        let queries = in_caller_order(outputs);
        json!({ "set": first["set"], "k": first["k"], "top": top, "model": first["model"], "method": method, "queries": queries })
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<Value, OperationError> {
        let payload = TransferPayload::parse(&payload).map_err(|err| OperationError::new("InvalidPayload", err))?;
        let transfer = json!({ "top": payload.top });
        self.0.search(&ctx, &payload.set, &payload.queries, payload.k, transfer).await?;
        Ok(json!({ "set": payload.set }))
    }
}

/// One query's answer: the `top` labels its nearest labelled items (`found`) give.
pub(super) fn answer(query: &str, found: &[Found], top: usize) -> Value {
    let voters: Vec<(f32, &[String])> = found.iter().map(|found| (found.score, found.item.labels.as_slice())).collect();
    let labels: Vec<Value> = score(&voters, top)
        .into_iter()
        .map(|Scored { label, score, support }| json!({ "label": label, "score": score, "support": support }))
        .collect();
    let neighbours: Vec<Value> =
        found.iter().map(|found| json!({ "item": found.item.item, "score": found.score })).collect();
    json!({ "query": query, "labels": labels, "neighbours": neighbours })
}

/// A label's score: the share of the neighbours' similarity (negative similarities count
/// as 0) held by those that carry it, from 0 to 1; and how many carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub label: String,
    pub score: f32,
    pub support: usize,
}

/// The `top` labels of `neighbours` (each its similarity and labels), best first, ties by
/// label. With every similarity 0, each neighbour counts alike.
pub fn score(neighbours: &[(f32, &[String])], top: usize) -> Vec<Scored> {
    let weight = |similarity: f32| similarity.max(0.0);
    let total: f32 = neighbours.iter().map(|(similarity, _)| weight(*similarity)).sum();
    let even = total <= 0.0;
    let mut by_label: std::collections::BTreeMap<&str, (f32, usize)> = std::collections::BTreeMap::new();
    for (similarity, labels) in neighbours {
        // A label listed twice on one item counts once.
        let mut seen = std::collections::BTreeSet::new();
        for label in labels.iter().filter(|label| seen.insert(label.as_str())) {
            let entry = by_label.entry(label).or_default();
            entry.0 += if even { 1.0 } else { weight(*similarity) };
            entry.1 += 1;
        }
    }
    let total = if even { neighbours.len() as f32 } else { total };
    let mut scored: Vec<Scored> = by_label
        .into_iter()
        .map(|(label, (sum, support))| Scored {
            label: label.to_owned(),
            score: sum / total.max(f32::MIN_POSITIVE),
            support,
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.label.cmp(&b.label)));
    scored.truncate(top);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn labels_score_by_their_neighbours_similarity() {
        let (a, b, c) = (labels(&["GO:1", "GO:2"]), labels(&["GO:2"]), labels(&["GO:3", "GO:3"]));
        let neighbours: Vec<(f32, &[String])> = vec![(0.9, &a), (0.6, &b), (0.5, &c), (-0.4, &a)];
        let scored = score(&neighbours, 10);
        let got: Vec<(&str, f32, usize)> = scored.iter().map(|s| (s.label.as_str(), s.score, s.support)).collect();
        // Total weight 2.0 (the negative neighbour counts 0): GO:2 1.5, GO:1 0.9, GO:3 0.5.
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ["GO:2", "GO:1", "GO:3"]);
        for ((_, got, _), want) in got.iter().zip([0.75, 0.45, 0.25]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert_eq!((got[1].2, got[2].2), (2, 1), "support counts neighbours, a label once per item");
        assert_eq!(score(&neighbours, 1).len(), 1);
        // No positive similarity: each neighbour alike.
        let flat: Vec<(f32, &[String])> = vec![(0.0, &b), (-1.0, &c)];
        let scored = score(&flat, 5);
        assert_eq!((scored[0].label.as_str(), scored[0].score), ("GO:2", 0.5));
        assert!(score(&[], 5).is_empty());
    }
}
