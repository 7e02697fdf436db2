//! The HNSW index of a set, on its own: recall@10 against exact ranking on 100,000 vectors
//! (yardmaster's file index, and pgvector's on a server that has it), and the memory of a process answering queries from the mapped file (its own memory
//! grows by a small share of the vectors', which stay in the file).

use tch::Tensor;
use yardmaster::config::InferenceSettings;
use yardmaster::inference::index::hnsw::{Builder, Graph};
use yardmaster::inference::index::sample::Clustered;

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

/// The same on PostgreSQL with pgvector: 100,000 vectors in a build's table, pgvector's HNSW
/// index at the default settings (a `halfvec` table, M 16, ef 128), recall@10 against exact
/// ranking of 100 queries at least 0.95. Searched as a worker searches it, with twice the
/// candidates (the worker scores them again from the stored vectors).
#[actix_rt::test]
async fn pgvector_finds_the_true_ten_nearest() {
    use yardmaster::inference::entity::embedding_index;
    use yardmaster::inference::index::pgvector::{self, Build, Layout};

    use crate::helpers::{Backend, TestApp, TestOptions};

    const ITEMS: usize = 100_000;
    let settings = InferenceSettings::default().index;
    let app = TestApp::spawn_with(Backend::Pgvector, TestOptions { workers: false, ..Default::default() }).await;
    let version = pgvector::availability(&app.db, &settings).await.expect("this server offers pgvector");
    let mut data = Clustered::new(7, 2_000, 128);
    let vectors = data.flat(ITEMS);
    let queries = data.flat(100);

    let layout = Layout::new(&settings.precision, data.dims).unwrap();
    let build = uuid::Uuid::new_v4();
    let made = Build::start(&app.db, "default:recall", build, layout).await.unwrap();
    let items: Vec<i64> = (0..ITEMS as i64).collect();
    for (items, vectors) in items.chunks(4096).zip(vectors.chunks(4096 * data.dims)) {
        made.add(&app.db, items, vectors).await.unwrap();
    }
    let bytes = made.index(&app.db, &settings).await.unwrap();
    let truth = exact(&vectors, &queries, data.dims as i64, 10);

    let index = embedding_index::Model {
        set_name: "default:recall".into(),
        build,
        vectors_revision: 0,
        method: pgvector::PGVECTOR.into(),
        items: ITEMS as i64,
        dims: data.dims as i64,
        bytes,
        parts: 0,
        built_at: chrono::Utc::now(),
    };
    let queries: Vec<Vec<f32>> = queries.chunks_exact(data.dims).map(<[f32]>::to_vec).collect();
    let found = pgvector::search(&app.db, &index, &queries, 20, settings.expansion_search, false).await.unwrap();
    let (mut hits, mut first_hits) = (0, 0);
    for (found, truth) in found.iter().zip(&truth) {
        assert_eq!(found.len(), 20);
        hits += found.iter().filter(|item| truth.contains(item)).count();
        first_hits += found[..10].iter().filter(|item| truth.contains(item)).count();
    }
    let recall = hits as f64 / (10 * truth.len()) as f64;
    let first = first_hits as f64 / (10 * truth.len()) as f64;
    println!("pgvector {version}: recall@10 {recall:.4} from 20 candidates, {first:.4} of the first 10; {bytes} bytes");
    assert!(recall >= 0.95 && first >= 0.95, "recall@10 {recall} from 20 candidates, {first} of the first 10");
}
