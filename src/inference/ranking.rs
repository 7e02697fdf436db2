//! How a search batch ranks a set against its queries, and says which way it did
//! (`method`): a small set exactly, from a copy cached in the process (`neighbours`); a
//! large set through its HNSW index (`index`), its candidates scored again exactly from the
//! stored vectors; a large set whose index is not built yet (or cannot be opened) exactly,
//! page by page, holding one page and each query's best at a time.

use std::collections::HashMap;
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use serde_json::Value;
use tokio::sync::Mutex;
use tracing::warn;
use uuid::Uuid;

use super::index::{pgvector, stored, Indexes, Labelled};
use super::neighbours::{nearest_where, normalised, SetCache};
use super::ops::{database, DIMENSION_MISMATCH};
use super::sets::{self, Item};
use super::settings::IndexSettings;
use crate::ops::OperationError;

/// The methods a result names.
pub const EXACT: &str = "exact";
pub const HNSW: &str = stored::HNSW;
pub const PGVECTOR: &str = pgvector::PGVECTOR;
/// Items read at a time by an exact ranking of a large set.
const PAGE: u64 = 4096;

/// One neighbour found: the stored item and its cosine similarity to the query.
#[derive(Debug, Clone)]
pub struct Found {
    pub item: Item,
    pub score: f32,
}

/// A batch's answer: per query its neighbours, most similar first; and how they were found.
pub struct Ranked {
    pub method: &'static str,
    pub queries: Vec<Vec<Found>>,
}

/// The set a search batch ranks, as its coordinator saw it.
pub struct Target<'a> {
    pub key: &'a str,
    pub job_id: Uuid,
    pub inputs: i64,
    pub labels_revision: i64,
    pub vectors_revision: i64,
}

impl<'a> Target<'a> {
    /// From a search batch's snapshot.
    pub fn of(snapshot: &'a Value) -> Target<'a> {
        Target {
            key: snapshot["set"].as_str().unwrap_or_default(),
            job_id: snapshot["job_id"].as_str().and_then(|id| id.parse().ok()).unwrap_or_default(),
            inputs: snapshot["inputs"].as_i64().unwrap_or(0),
            labels_revision: snapshot["labels_revision"].as_i64().unwrap_or(0),
            vectors_revision: snapshot["vectors_revision"].as_i64().unwrap_or(0),
        }
    }
}

/// A process's ranking: its cache of the last small set, its open indexes, and the last
/// set's labelled items.
pub struct Ranker {
    min_items: u64,
    expansion: usize,
    small: SetCache,
    indexes: Indexes,
    labelled: Mutex<HashMap<String, (i64, Arc<Labelled>)>>,
}

impl Ranker {
    pub fn new(settings: &IndexSettings) -> Ranker {
        Ranker {
            min_items: settings.min_items,
            expansion: settings.expansion_search,
            small: SetCache::default(),
            indexes: Indexes::new(settings),
            labelled: Mutex::default(),
        }
    }

    /// The `k` items of `target` nearest each query vector (only labelled ones when
    /// `labelled_only`), most similar first.
    pub async fn rank(
        &self,
        db: &DatabaseConnection,
        target: &Target<'_>,
        queries: &[Vec<f32>],
        k: usize,
        labelled_only: bool,
    ) -> Result<Ranked, OperationError> {
        if (target.inputs as u64) < self.min_items {
            return self.rank_cached(db, target, queries, k, labelled_only).await;
        }
        let keep = match labelled_only {
            true => Some(self.labelled(db, target).await?),
            false => None,
        };
        // One read: the index built from the vectors the coordinator saw, if any.
        let index = stored::built_from(db, target.key, target.vectors_revision).await.map_err(database)?;
        if let Some(index) = index {
            if index.dims as usize != queries.first().map_or(0, Vec::len) {
                return Err(mismatch(target.key, queries, index.dims as usize));
            }
            // A graph searched under a narrow filter (few labelled items) can come back
            // short: a query answered with fewer than it could have is ranked exactly.
            let could = keep.as_ref().map_or(target.inputs as usize, |keep| keep.len()).min(k);
            let ranked = match index.method.as_str() {
                PGVECTOR => self.rank_pgvector(db, target, &index, queries, k, keep.is_some()).await,
                _ => self.rank_indexed(db, target, &index, queries, k, keep.clone()).await,
            };
            match ranked {
                Ok(ranked) if ranked.queries.iter().all(|found| found.len() >= could) => return Ok(ranked),
                Ok(_) => {
                    warn!(set = %target.key, "the index answered short of k under the labelled filter; ranking exactly")
                }
                Err(err) => warn!(set = %target.key, error = %err, "the index could not be searched; ranking exactly"),
            }
        }
        self.rank_paged(db, target, queries, k, keep).await
    }

    async fn rank_cached(
        &self,
        db: &DatabaseConnection,
        target: &Target<'_>,
        queries: &[Vec<f32>],
        k: usize,
        labelled_only: bool,
    ) -> Result<Ranked, OperationError> {
        let set = self
            .small
            .get(db, target.key, target.job_id, target.inputs, target.labels_revision)
            .await
            .map_err(database)?;
        let queries = queries
            .iter()
            .map(|query| {
                let found = nearest_where(&set, query, k, |at| !labelled_only || !set.items[at].labels.is_empty())
                    .map_err(|err| OperationError::new(DIMENSION_MISMATCH, err))?;
                Ok(found.into_iter().map(|n| Found { item: set.items[n.item].clone(), score: n.score }).collect())
            })
            .collect::<Result<_, OperationError>>()?;
        Ok(Ranked { method: EXACT, queries })
    }

    async fn rank_indexed(
        &self,
        db: &DatabaseConnection,
        target: &Target<'_>,
        index: &crate::inference::entity::embedding_index::Model,
        queries: &[Vec<f32>],
        k: usize,
        keep: Option<Arc<Labelled>>,
    ) -> Result<Ranked, super::index::IndexError> {
        let graph = self.indexes.open(db, index).await?;
        // Twice the neighbours asked, scored again exactly: the graph's precision may be
        // below the stored vectors'.
        let candidates = (2 * k).max(16);
        let found = self.indexes.search(graph, queries.to_vec(), candidates, keep).await?;
        let wanted: Vec<Vec<i64>> = found.iter().map(|list| list.iter().map(|(item, _)| *item).collect()).collect();
        let queries = rescore(db, target.key, queries, &wanted, k).await.map_err(stored::UploadError::from)?;
        Ok(Ranked { method: HNSW, queries })
    }

    async fn rank_pgvector(
        &self,
        db: &DatabaseConnection,
        target: &Target<'_>,
        index: &crate::inference::entity::embedding_index::Model,
        queries: &[Vec<f32>],
        k: usize,
        labelled_only: bool,
    ) -> Result<Ranked, super::index::IndexError> {
        // As for the file index: twice the neighbours asked, scored again exactly (a
        // `halfvec` table holds the vectors at half precision).
        let candidates = (2 * k).max(16);
        let wanted = pgvector::search(db, index, queries, candidates, self.expansion, labelled_only)
            .await
            .map_err(stored::UploadError::from)?;
        let queries = rescore(db, target.key, queries, &wanted, k).await.map_err(stored::UploadError::from)?;
        Ok(Ranked { method: PGVECTOR, queries })
    }

    async fn rank_paged(
        &self,
        db: &DatabaseConnection,
        target: &Target<'_>,
        queries: &[Vec<f32>],
        k: usize,
        keep: Option<Arc<Labelled>>,
    ) -> Result<Ranked, OperationError> {
        let units: Vec<Vec<f32>> = queries.iter().map(|query| normalised(query.clone())).collect();
        let mut best: Vec<Vec<(f32, i64)>> = vec![Vec::new(); queries.len()];
        let mut after = None;
        loop {
            let (items, vectors) = sets::vectors_page(db, target.key, after, PAGE).await.map_err(database)?;
            let Some(last) = items.last().copied() else { break };
            after = Some(last);
            let dims = vectors.len() / items.len();
            if units.first().map_or(0, Vec::len) != dims {
                return Err(mismatch(target.key, queries, dims));
            }
            for (unit, best) in units.iter().zip(&mut best) {
                for (item, vector) in items.iter().zip(vectors.chunks_exact(dims)) {
                    if keep.as_ref().is_some_and(|keep| !keep.contains(*item as u64)) {
                        continue;
                    }
                    best.push((cosine(unit, vector), *item));
                }
                keep_best(best, k);
            }
        }
        let wanted: Vec<Vec<i64>> = best
            .iter_mut()
            .map(|list| {
                list.sort_by(order);
                list.truncate(k);
                list.iter().map(|(_, item)| *item).collect()
            })
            .collect();
        // Scored exactly already; read again only for the items' texts and labels.
        let queries = rescore(db, target.key, queries, &wanted, k).await.map_err(database)?;
        Ok(Ranked { method: EXACT, queries })
    }

    /// The set's labelled items, read once per labels revision.
    async fn labelled(&self, db: &DatabaseConnection, target: &Target<'_>) -> Result<Arc<Labelled>, OperationError> {
        let mut cached = self.labelled.lock().await;
        if let Some((revision, labelled)) = cached.get(target.key) {
            if *revision == target.labels_revision {
                return Ok(labelled.clone());
            }
        }
        let items = sets::labelled_items(db, target.key).await.map_err(database)?;
        let labelled = Arc::new(Labelled::new(&items));
        cached.clear();
        cached.insert(target.key.to_owned(), (target.labels_revision, labelled.clone()));
        Ok(labelled)
    }
}

fn mismatch(set: &str, queries: &[Vec<f32>], dims: usize) -> OperationError {
    let given = queries.first().map_or(0, Vec::len);
    let message = format!(
        "the query vectors have {given} values but set {:?} has {dims}: it was computed by another model",
        sets::name_of(set)
    );
    OperationError::new(DIMENSION_MISMATCH, message)
}

/// Cosine similarity of `unit` (unit length) and `vector` (any length; zero: 0).
fn cosine(unit: &[f32], vector: &[f32]) -> f32 {
    let (dot, norm) =
        unit.iter().zip(vector).fold((0.0_f32, 0.0_f32), |(dot, norm), (u, v)| (dot + u * v, norm + v * v));
    if norm > 0.0 {
        dot / norm.sqrt()
    } else {
        0.0
    }
}

/// Most similar first; ties: lower item first.
fn order(a: &(f32, i64), b: &(f32, i64)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Keeps the `k` best of `list`, once it holds many more.
fn keep_best(list: &mut Vec<(f32, i64)>, k: usize) {
    if list.len() > 4 * k.max(16) {
        list.select_nth_unstable_by(k - 1, order);
        list.truncate(k);
    }
}

/// Each query's `k` most similar of its `wanted` items, scored exactly from the stored
/// vectors (read once for all queries).
async fn rescore(
    db: &DatabaseConnection,
    set: &str,
    queries: &[Vec<f32>],
    wanted: &[Vec<i64>],
    k: usize,
) -> Result<Vec<Vec<Found>>, sea_orm::DbErr> {
    let mut all: Vec<i64> = wanted.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut items: HashMap<i64, Item> = HashMap::new();
    for chunk in all.chunks(2_000) {
        items.extend(sets::items(db, set, chunk).await?.into_iter().map(|item| (item.item, item)));
    }
    Ok(queries
        .iter()
        .zip(wanted)
        .map(|(query, wanted)| {
            let unit = normalised(query.clone());
            let mut scored: Vec<(f32, i64)> = wanted
                .iter()
                .filter_map(|item| items.get(item).map(|found| (cosine(&unit, &found.vector), *item)))
                .collect();
            scored.sort_by(order);
            scored.truncate(k);
            scored.into_iter().map(|(score, item)| Found { item: items[&item].clone(), score }).collect()
        })
        .collect())
}
