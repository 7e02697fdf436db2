//! The HNSW graph itself (usearch): built in memory from a set's vectors by several threads,
//! saved to one file, and opened again as a read-only memory map, so a process answering
//! queries holds only the pages its searches touch.

use std::path::Path;

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::inference::settings::IndexSettings;

/// What the graph failed at, in usearch's words.
#[derive(Debug, thiserror::Error)]
#[error("the neighbour index: {0}")]
pub struct HnswError(String);

impl HnswError {
    /// A search or build thread that ended without an answer.
    pub fn from_panic(err: &tokio::task::JoinError) -> HnswError {
        HnswError(format!("a thread of the index ended: {err}"))
    }

    /// The process is shutting down.
    pub fn closed() -> HnswError {
        HnswError("the index is closing".into())
    }
}

fn failed(err: impl std::fmt::Display) -> HnswError {
    HnswError(err.to_string())
}

/// How the index holds vectors, by `inference.index.precision`.
fn scalar(precision: &str) -> ScalarKind {
    match precision {
        "f32" => ScalarKind::F32,
        "i8" => ScalarKind::I8,
        _ => ScalarKind::F16,
    }
}

/// A graph being built: vectors go in, keyed by their item, from any thread.
pub struct Builder {
    index: Index,
    threads: usize,
}

impl Builder {
    /// A graph for `capacity` vectors of `dims` values, cosine similarity.
    pub fn new(settings: &IndexSettings, dims: usize, capacity: usize) -> Result<Builder, HnswError> {
        let options = IndexOptions {
            dimensions: dims,
            metric: MetricKind::Cos,
            quantization: scalar(&settings.precision),
            connectivity: settings.connectivity,
            expansion_add: settings.expansion_add,
            expansion_search: settings.expansion_search,
            multi: false,
        };
        let index = Index::new(&options).map_err(failed)?;
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        index.reserve_capacity_and_threads(capacity.max(1), threads).map_err(failed)?;
        Ok(Builder { index, threads })
    }

    /// Adds `vectors` (`items.len() × dims`, row-major) under their items, on every core.
    pub fn add(&self, items: &[i64], vectors: &[f32]) -> Result<(), HnswError> {
        let dims = self.index.dimensions();
        if vectors.len() != items.len() * dims {
            return Err(HnswError(format!("{} values for {} vectors of {dims}", vectors.len(), items.len())));
        }
        let share = items.len().div_ceil(self.threads).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = items
                .chunks(share)
                .zip(vectors.chunks(share * dims))
                .map(|(items, vectors)| {
                    scope.spawn(move || {
                        for (item, vector) in items.iter().zip(vectors.chunks_exact(dims)) {
                            self.index.add(*item as u64, vector).map_err(failed)?;
                        }
                        Ok::<(), HnswError>(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|worker| worker.join().unwrap_or_else(|_| Err(failed("a thread panicked"))))
        })
    }

    pub fn dims(&self) -> usize {
        self.index.dimensions()
    }

    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the graph to `path`.
    pub fn save(&self, path: &Path) -> Result<(), HnswError> {
        self.index.save(&path.to_string_lossy()).map_err(failed)
    }
}

/// A saved graph, mapped read-only.
pub struct Graph {
    index: Index,
}

impl Graph {
    /// Maps the graph saved at `path`, searching with `expansion` candidates.
    pub fn open(path: &Path, expansion: usize) -> Result<Graph, HnswError> {
        let index = Index::restore_view(&path.to_string_lossy()).map_err(failed)?;
        index.change_expansion_search(expansion);
        Ok(Graph { index })
    }

    pub fn dims(&self) -> usize {
        self.index.dimensions()
    }

    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `count` items near `query` that `keep` takes, nearest first, with their cosine
    /// similarity as the graph holds it (at its precision).
    pub fn search(
        &self,
        query: &[f32],
        count: usize,
        keep: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<(i64, f32)>, HnswError> {
        let matches = match keep {
            Some(keep) => self.index.filtered_search(query, count, keep),
            None => self.index.search(query, count),
        }
        .map_err(failed)?;
        Ok(matches.keys.iter().zip(&matches.distances).map(|(key, distance)| (*key as i64, 1.0 - distance)).collect())
    }
}
