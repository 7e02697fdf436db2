//! Nearest neighbours by cosine similarity over a stored set, and a one-set cache so the
//! batches of one `nearest_neighbours` job read the set from the database once per process.

use std::cmp::Ordering;
use std::sync::Arc;

use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::Mutex;
use uuid::Uuid;

use super::sets::{self, Item};

/// A set ready to search: its items, and their vectors scaled to unit length.
#[derive(Debug)]
pub struct StoredSet {
    pub name: String,
    pub job_id: Uuid,
    /// The set's labels revision when it was read.
    pub labels_revision: i64,
    pub items: Vec<Item>,
    dims: usize,
    /// `items.len() × dims`, row-major; a zero vector stays zero (similarity 0 to all).
    unit: Vec<f32>,
}

impl StoredSet {
    pub fn new(name: String, job_id: Uuid, labels_revision: i64, items: Vec<Item>) -> StoredSet {
        let dims = items.first().map_or(0, |item| item.vector.len());
        let mut unit = Vec::with_capacity(items.len() * dims);
        for item in &items {
            let mut vector = item.vector.clone();
            vector.resize(dims, 0.0);
            unit.extend(normalised(vector));
        }
        StoredSet { name, job_id, labels_revision, items, dims, unit }
    }

    pub fn dims(&self) -> usize {
        self.dims
    }
}

pub(super) fn normalised(mut vector: Vec<f32>) -> Vec<f32> {
    let length = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if length > 0.0 {
        vector.iter_mut().for_each(|v| *v /= length);
    }
    vector
}

/// One neighbour: an index into [`StoredSet::items`] and its cosine similarity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    pub item: usize,
    pub score: f32,
}

/// The `k` items most similar to `query`, most similar first (ties: lower item first).
/// `Err` when the query's length differs from the set's vectors (another model).
pub fn nearest(set: &StoredSet, query: &[f32], k: usize) -> Result<Vec<Neighbour>, String> {
    nearest_where(set, query, k, |_| true)
}

/// [`nearest`] among the items `keep` takes (by index into [`StoredSet::items`]).
pub fn nearest_where(
    set: &StoredSet,
    query: &[f32],
    k: usize,
    keep: impl Fn(usize) -> bool,
) -> Result<Vec<Neighbour>, String> {
    if query.len() != set.dims {
        return Err(format!(
            "the query vectors have {} values but set {:?} has {}: it was computed by another model",
            query.len(),
            set.name,
            set.dims
        ));
    }
    let query = normalised(query.to_vec());
    let mut scored: Vec<Neighbour> = set
        .unit
        .chunks_exact(set.dims.max(1))
        .enumerate()
        .filter(|(item, _)| keep(*item))
        .map(|(item, vector)| Neighbour { item, score: vector.iter().zip(&query).map(|(a, b)| a * b).sum() })
        .collect();
    let order = |a: &Neighbour, b: &Neighbour| {
        b.score.partial_cmp(&a.score).unwrap_or(Ordering::Equal).then(a.item.cmp(&b.item))
    };
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, order);
        scored.truncate(k);
    }
    scored.sort_by(order);
    scored.truncate(k);
    Ok(scored)
}

/// The last set searched in this process.
#[derive(Default)]
pub struct SetCache {
    last: Mutex<Option<Arc<StoredSet>>>,
}

impl SetCache {
    /// Set `name` as written by `job_id` with `inputs` items and labels revision `revision`,
    /// from the cache when it is the last one read. A set's vectors are fixed once its job
    /// has finished, which the coordinator checked before fanning out; its labels may be
    /// replaced later, which raises the revision, so a cached set of another revision is
    /// read again.
    pub async fn get(
        &self,
        db: &DatabaseConnection,
        name: &str,
        job_id: Uuid,
        inputs: i64,
        revision: i64,
    ) -> Result<Arc<StoredSet>, DbErr> {
        let mut last = self.last.lock().await;
        let current = |set: &&Arc<StoredSet>| {
            set.name == name
                && set.job_id == job_id
                && set.items.len() as i64 == inputs
                && set.labels_revision == revision
        };
        if let Some(set) = last.as_ref().filter(current) {
            return Ok(set.clone());
        }
        let items = sets::page(db, name, None, inputs.max(0) as u64).await?;
        let set = Arc::new(StoredSet::new(name.to_owned(), job_id, revision, items));
        *last = Some(set.clone());
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(item: i64, vector: Vec<f32>) -> Item {
        Item { item, input: format!("item {item}"), vector, labels: Vec::new() }
    }

    #[test]
    fn the_most_similar_come_first() {
        let items = vec![
            item(0, vec![1.0, 0.0]),
            item(1, vec![0.0, 1.0]),
            item(2, vec![10.0, 1.0]),
            item(3, vec![-1.0, 0.0]),
            item(4, vec![0.0, 0.0]),
        ];
        let set = StoredSet::new("s".into(), Uuid::nil(), 0, items);
        let found = nearest(&set, &[2.0, 0.0], 3).unwrap();
        assert_eq!(found.iter().map(|n| n.item).collect::<Vec<_>>(), [0, 2, 1]);
        assert!((found[0].score - 1.0).abs() < 1e-6);
        // k beyond the set: every item, the opposite one last.
        let all = nearest(&set, &[1.0, 0.0], 50).unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all.last().unwrap().item, 3);
        assert!(nearest(&set, &[1.0, 0.0, 0.0], 1).is_err());
    }
}
