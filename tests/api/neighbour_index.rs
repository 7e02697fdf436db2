//! The HNSW index of a set, on its own: recall@10 against exact ranking on 100,000 vectors,
//! and the memory of a process answering queries from the mapped file (its own memory
//! grows by a small share of the vectors', which stay in the file).

use tch::Tensor;
use yardmaster::config::InferenceSettings;
use yardmaster::inference::index::hnsw::{Builder, Graph};

/// Deterministic vectors shaped like a model's embeddings: `clusters` families, each a
/// random centre with members scattered around it.
pub struct Clustered {
    state: u64,
    centres: Vec<Vec<f32>>,
    pub dims: usize,
}

impl Clustered {
    pub fn new(seed: u64, clusters: usize, dims: usize) -> Clustered {
        let mut made = Clustered { state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, centres: Vec::new(), dims };
        made.centres = (0..clusters).map(|_| (0..dims).map(|_| made.normal()).collect()).collect();
        made
    }

    fn uniform(&mut self) -> f32 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        ((self.state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }

    /// A standard normal sample (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    /// The next vector: a random family's centre and a spread of 0.6 of it.
    pub fn next(&mut self) -> Vec<f32> {
        let family = (self.uniform() * self.centres.len() as f32) as usize % self.centres.len();
        let centre = self.centres[family].clone();
        centre.into_iter().map(|c| c + 0.6 * self.normal()).collect()
    }

    /// `count` vectors, flat (one allocation, given back whole when dropped).
    pub fn flat(&mut self, count: usize) -> Vec<f32> {
        let mut flat = Vec::with_capacity(count * self.dims);
        for _ in 0..count {
            flat.extend(self.next());
        }
        flat
    }
}

/// The `k` items most similar to each query among `vectors` (both flat, `dims` a row), by
/// brute force in libtorch: one product of the unit vectors, then the top `k` of each row.
fn exact(vectors: &[f32], queries: &[f32], dims: i64, k: i64) -> Vec<Vec<i64>> {
    let unit = |flat: &[f32]| {
        let rows = Tensor::from_slice(flat).reshape([-1, dims]);
        let norms = rows.norm_scalaropt_dim(2, [1], true);
        rows / norms
    };
    let scores = unit(queries).matmul(&unit(vectors).transpose(0, 1));
    let (_, top) = scores.topk(k, 1, true, true);
    Vec::<Vec<i64>>::try_from(&top).unwrap()
}

/// A process's memory in kB, from /proc/self/status: (anonymous, file-backed) resident.
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// Recall@10 of the index as configured by default (f16, M 16, ef 128) against exact
/// ranking, over 100,000 vectors of 128 values and 100 queries not in the set: at least
/// 0.95. Then the same file opened as a worker opens it answers the queries alike, and the
/// worker's own memory grows by far less than the vectors it searches.
#[test]
fn the_index_finds_the_true_ten_nearest_and_maps_its_vectors() {
    const ITEMS: usize = 100_000;
    let settings = InferenceSettings::default().index;
    let mut data = Clustered::new(7, 2_000, 128);
    let vectors = data.flat(ITEMS);
    let queries = data.flat(100);

    let builder = Builder::new(&settings, data.dims, ITEMS).unwrap();
    let items: Vec<i64> = (0..ITEMS as i64).collect();
    for (items, vectors) in items.chunks(4096).zip(vectors.chunks(4096 * data.dims)) {
        builder.add(items, vectors).unwrap();
    }
    assert_eq!(builder.len(), ITEMS);
    let dir = std::env::temp_dir().join(format!("yardmaster-index-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("set.usearch");
    builder.save(&path).unwrap();
    drop(builder);
    let truth = exact(&vectors, &queries, data.dims as i64, 10);
    let bytes = (vectors.len() * 4 / 1024) as u64;
    drop(vectors);

    let (anon_before, _) = resident();
    let graph = Graph::open(&path, settings.expansion_search).unwrap();
    assert_eq!((graph.len(), graph.dims()), (ITEMS, 128));
    let mut hits = 0;
    for (query, truth) in queries.chunks_exact(data.dims).zip(&truth) {
        let found = graph.search(query, 10, None).unwrap();
        hits += found.iter().filter(|(item, _)| truth.contains(item)).count();
    }
    let recall = hits as f64 / (10 * truth.len()) as f64;
    let (anon_after, file) = resident();
    let grown = anon_after.saturating_sub(anon_before);
    println!("recall@10 {recall:.4}; own memory grew {grown} kB, mapped {file} kB, vectors {bytes} kB");
    assert!(recall >= 0.95, "recall@10 {recall}");
    assert!(grown < bytes / 4, "a worker's own memory grew {grown} kB for {bytes} kB of vectors");
    // A filter: only even items.
    let even = |key: u64| key.is_multiple_of(2);
    let found = graph.search(&queries[..data.dims], 10, Some(&even)).unwrap();
    assert_eq!(found.len(), 10);
    assert!(found.iter().all(|(item, _)| item % 2 == 0), "{found:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
