//! The neighbour index of a stored set: an HNSW graph (`hnsw`) built by the operation
//! `embeddings.index` once the set is whole (`build`), kept in the store with the set
//! (`stored`), and opened by each process that answers searches from a file it fetched once
//! and maps read-only ([`Indexes`]), so no process holds a whole set and no query scans one;
//! or, on a PostgreSQL server with the `vector` extension, pgvector's index (`pgvector`),
//! searched in the database.

pub mod build;
pub mod hnsw;
pub mod pgvector;
pub mod sample;
pub mod stored;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::sync::{Mutex, Semaphore};
use uuid::Uuid;

use self::hnsw::Graph;
use self::stored::UploadError;
use crate::inference::entity::embedding_index;
use crate::inference::settings::IndexSettings;

/// Why an index could not be opened or searched: the search falls back to exact ranking.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Fetch(#[from] UploadError),
    #[error(transparent)]
    Graph(#[from] hnsw::HnswError),
}

/// The graphs this process has open, one per set (its current build), and the searches
/// running on them at once (at most one per core: the graph keeps a scratch space per
/// searching thread, as many as cores).
pub struct Indexes {
    dir: PathBuf,
    expansion: usize,
    open: Mutex<HashMap<String, (Uuid, Arc<Graph>)>>,
    searches: Arc<Semaphore>,
}

impl Indexes {
    pub fn new(settings: &IndexSettings) -> Indexes {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Indexes {
            dir: PathBuf::from(&settings.dir),
            expansion: settings.expansion_search,
            open: Mutex::default(),
            searches: Arc::new(Semaphore::new(cores)),
        }
    }

    /// Where this process keeps the files it fetched.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The graph of `index`'s build, fetched into this process's directory first if it is
    /// not there. An earlier build of the same set is closed and its file removed.
    pub async fn open(
        &self,
        db: &DatabaseConnection,
        index: &embedding_index::Model,
    ) -> Result<Arc<Graph>, IndexError> {
        let mut open = self.open.lock().await;
        if let Some((build, graph)) = open.get(&index.set_name) {
            if *build == index.build {
                return Ok(graph.clone());
            }
        }
        let path = stored::fetch(db, &self.dir, index).await?;
        let expansion = self.expansion;
        let graph = tokio::task::spawn_blocking(move || Graph::open(&path, expansion))
            .await
            .map_err(|err| hnsw::HnswError::from_panic(&err))??;
        let graph = Arc::new(graph);
        if let Some((earlier, _)) = open.insert(index.set_name.clone(), (index.build, graph.clone())) {
            // Best effort: a file left behind is only disk space.
            let _ = tokio::fs::remove_file(stored::cached(&self.dir, earlier)).await;
        }
        Ok(graph)
    }

    /// For each query, up to `count` items of `graph` near it that `keep` takes (every item
    /// when `None`), nearest first, with their similarity at the graph's precision.
    pub async fn search(
        &self,
        graph: Arc<Graph>,
        queries: Vec<Vec<f32>>,
        count: usize,
        keep: Option<Arc<Labelled>>,
    ) -> Result<Vec<Vec<(i64, f32)>>, IndexError> {
        let _permit = self.searches.clone().acquire_owned().await.map_err(|_| hnsw::HnswError::closed())?;
        tokio::task::spawn_blocking(move || {
            let filter = keep.as_ref().map(|keep| move |key: u64| keep.contains(key));
            queries
                .iter()
                .map(|query| match &filter {
                    Some(filter) => graph.search(query, count, Some(filter as &dyn Fn(u64) -> bool)),
                    None => graph.search(query, count, None),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|err| hnsw::HnswError::from_panic(&err))?
        .map_err(IndexError::from)
    }
}

/// The items of a set that carry labels, as a bitmap over item numbers.
pub struct Labelled {
    bits: Vec<u64>,
    count: usize,
}

impl Labelled {
    pub fn new(items: &[i64]) -> Labelled {
        let top = items.iter().copied().max().unwrap_or(0).max(0) as usize;
        let mut bits = vec![0_u64; top / 64 + 1];
        for item in items.iter().filter(|item| **item >= 0) {
            bits[*item as usize / 64] |= 1 << (*item as usize % 64);
        }
        let count = bits.iter().map(|word| word.count_ones() as usize).sum();
        Labelled { bits, count }
    }

    /// How many items carry labels.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn contains(&self, item: u64) -> bool {
        let at = item as usize;
        self.bits.get(at / 64).is_some_and(|word| word & (1 << (at % 64)) != 0)
    }
}
