//! The neighbour cases (`BENCH_ONLY=neighbours`): a set's HNSW index against exact ranking
//! of the same vectors, at `BENCH_NEIGHBOURS` items (default 100,000 and 1,000,000) of
//! `BENCH_NEIGHBOUR_DIMS` values (default 1,280, ESM-2 650M's width), clustered as a
//! model's embeddings are. Per size: the build's time and file; queries/s and p50/p99 of one
//! query at a time, the index (as configured by default) against exact ranking over the
//! whole set held in memory (what every search did before the index, its best case);
//! recall@10 against the exact answers; and the memory of this process answering queries
//! from the mapped file, once the set's vectors are given back.

use std::time::Instant;

use yardmaster::config::InferenceSettings;
use yardmaster::inference::index::hnsw::{Builder, Graph};
use yardmaster::inference::index::sample::Clustered;
use yardmaster::inference::settings::IndexSettings;

use super::{number_or, rss_kib};

/// Queries timed on the index, and on exact ranking (also the truth for recall).
const INDEX_QUERIES: usize = 2_000;
const EXACT_QUERIES: usize = 100;
const K: usize = 10;

pub fn figures() {
    let sizes: Vec<usize> = std::env::var("BENCH_NEIGHBOURS")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect();
    let dims = number_or("BENCH_NEIGHBOUR_DIMS", 1280);
    let settings = InferenceSettings::default().index;
    println!(
        "\nneighbours: {dims} values a vector, k {K}, index {} M {} efConstruction {} efSearch {}, {} cores",
        settings.precision,
        settings.connectivity,
        settings.expansion_add,
        settings.expansion_search,
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    for size in sizes {
        one(size, dims, &settings);
    }
}

fn one(items: usize, dims: usize, settings: &IndexSettings) {
    let mut data = Clustered::new(11, (items / 50).max(10), dims);
    let mut vectors = data.flat(items);
    let queries = data.flat(INDEX_QUERIES);
    let started = Instant::now();
    let builder = Builder::new(settings, dims, items).unwrap();
    let keys: Vec<i64> = (0..items as i64).collect();
    for (keys, chunk) in keys.chunks(4096).zip(vectors.chunks(4096 * dims)) {
        builder.add(keys, chunk).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("yardmaster-bench-index-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("set.usearch");
    builder.save(&path).unwrap();
    let built = started.elapsed().as_secs_f64();
    drop(builder);
    let file = std::fs::metadata(&path).unwrap().len();

    // Exact: unit vectors in memory, each query against all of them.
    for row in vectors.chunks_exact_mut(dims) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        row.iter_mut().for_each(|v| *v /= norm);
    }
    let cpu = cpu_seconds();
    let mut exact_times = Vec::with_capacity(EXACT_QUERIES);
    let truth: Vec<Vec<i64>> = queries
        .chunks_exact(dims)
        .take(EXACT_QUERIES)
        .map(|query| {
            let at = Instant::now();
            let found = exact(&vectors, query, dims);
            exact_times.push(at.elapsed().as_secs_f64());
            found
        })
        .collect();
    let exact_cpu = (cpu_seconds() - cpu) / EXACT_QUERIES as f64;
    drop(vectors);

    let before = rss_kib(std::process::id());
    let graph = Graph::open(&path, settings.expansion_search).unwrap();
    let cpu = cpu_seconds();
    let mut index_times = Vec::with_capacity(INDEX_QUERIES);
    let mut hits = 0;
    for (at, query) in queries.chunks_exact(dims).enumerate() {
        let started = Instant::now();
        let found = graph.search(query, K, None).unwrap();
        index_times.push(started.elapsed().as_secs_f64());
        if let Some(truth) = truth.get(at) {
            hits += found.iter().filter(|(item, _)| truth.contains(item)).count();
        }
    }
    let index_cpu = (cpu_seconds() - cpu) / INDEX_QUERIES as f64;
    let after = rss_kib(std::process::id());
    let recall = hits as f64 / (K * truth.len()) as f64;
    let (exact_rate, exact_p50, exact_p99) = spread(&mut exact_times);
    let (index_rate, index_p50, index_p99) = spread(&mut index_times);
    let vector_mb = (items * dims * 4) as f64 / 1e6;
    println!(
        "  {items} vectors ({vector_mb:.0} MB as float32): built in {built:.1} s, file {:.0} MB",
        file as f64 / 1e6
    );
    println!(
        "    exact (in memory) {exact_rate:>9.1} queries/s  p50 {:>8.3} ms  p99 {:>8.3} ms  CPU/query {:>8.3} ms",
        exact_p50 * 1e3,
        exact_p99 * 1e3,
        exact_cpu * 1e3
    );
    println!(
        "    index             {index_rate:>9.1} queries/s  p50 {:>8.3} ms  p99 {:>8.3} ms  CPU/query {:>8.3} ms  ({:.0}x exact)  recall@10 {recall:.4}",
        index_p50 * 1e3,
        index_p99 * 1e3,
        index_cpu * 1e3,
        index_rate / exact_rate
    );
    println!(
        "    a worker answering from the index: own memory (RssAnon) +{:.1} MiB, file pages resident (RssFile) {:.0} MiB (of {vector_mb:.0} MB of vectors)",
        (after.anon - before.anon) / 1024.0,
        after.file / 1024.0
    );
    drop(graph);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `K` items whose unit vectors are most similar to `query`.
fn exact(units: &[f32], query: &[f32], dims: usize) -> Vec<i64> {
    let norm = query.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    let query: Vec<f32> = query.iter().map(|v| v / norm).collect();
    let mut scored: Vec<(f32, i64)> = units
        .chunks_exact(dims)
        .enumerate()
        .map(|(item, row)| (row.iter().zip(&query).map(|(a, b)| a * b).sum(), item as i64))
        .collect();
    scored.select_nth_unstable_by(K - 1, |a, b| b.0.total_cmp(&a.0));
    scored.truncate(K);
    scored.into_iter().map(|(_, item)| item).collect()
}

/// Queries/s, p50 and p99 of one query's time.
fn spread(times: &mut [f64]) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |share: f64| times[((times.len() as f64 * share) as usize).min(times.len() - 1)];
    (times.len() as f64 / times.iter().sum::<f64>(), at(0.5), at(0.99))
}

/// This process's CPU time (user and system), in seconds.
fn cpu_seconds() -> f64 {
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
