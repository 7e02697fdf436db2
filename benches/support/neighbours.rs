//! The neighbour cases (`BENCH_ONLY=neighbours`): a set's HNSW index against exact ranking
//! of the same vectors, at `BENCH_NEIGHBOURS` items (default 100,000 and 1,000,000) of
//! `BENCH_NEIGHBOUR_DIMS` values (default 1,280, ESM-2 650M's width), clustered as a
//! model's embeddings are. Per size: the build's time and file; queries/s, p50/p99 and CPU of
//! one query at a time, the index (as configured by default) against exact ranking of the
//! whole set held in memory (what every search did before the index, at its best: one
//! libtorch product); recall@10 against the exact answers; and the memory of a process of
//! its own answering the queries from the mapped file, as a worker does. With
//! `BENCH_PGVECTOR_URL` (a PostgreSQL server with pgvector; `scripts/bench.sh` starts one with
//! `scripts/pgvector.sh`), the same for pgvector's index at `BENCH_PGVECTOR_MAX` items at most
//! (default 100,000): its build, and queries as a worker sends them (twice `k` candidates),
//! with the CPU of the bench process and of PostgreSQL's backends.

use std::time::Instant;

use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use tch::Tensor;
use yardmaster::config::InferenceSettings;
use yardmaster::inference::entity::embedding_index;
use yardmaster::inference::index::hnsw::{Builder, Graph};
use yardmaster::inference::index::pgvector::{self, Layout};
use yardmaster::inference::index::sample::Clustered;
use yardmaster::inference::settings::IndexSettings;

use super::cpu::Role;
use super::{number_or, rss_kib, sampler};

/// Queries timed on the index, and on exact ranking (also the truth for recall).
const INDEX_QUERIES: usize = 2_000;
const EXACT_QUERIES: usize = 100;
const K: usize = 10;

pub async fn figures() {
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
        one(size, dims, &settings).await;
    }
}

async fn one(items: usize, dims: usize, settings: &IndexSettings) {
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
    builder.save(&dir.join("set.usearch")).unwrap();
    let built = started.elapsed().as_secs_f64();
    drop(builder);
    let file = std::fs::metadata(dir.join("set.usearch")).unwrap().len();
    let in_pgvector = match std::env::var("BENCH_PGVECTOR_URL") {
        Ok(url) if items <= number_or("BENCH_PGVECTOR_MAX", 100_000) => {
            Some(PgvectorSet::build(&url, settings, &vectors, dims).await)
        }
        _ => None,
    };

    // Exact: the unit vectors in one libtorch tensor, each query one product with all of
    // them and the top K (BLAS on every core: exact ranking at its best).
    for row in vectors.chunks_exact_mut(dims) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        row.iter_mut().for_each(|v| *v /= norm);
    }
    let units = Tensor::from_slice(&vectors).reshape([items as i64, dims as i64]);
    drop(vectors);
    let cpu = cpu_seconds();
    let mut exact_times = Vec::with_capacity(EXACT_QUERIES);
    let truth: Vec<Vec<i64>> = queries
        .chunks_exact(dims)
        .take(EXACT_QUERIES)
        .map(|query| {
            let at = Instant::now();
            let query = Tensor::from_slice(query).reshape([dims as i64, 1]);
            let scores = units.matmul(&(&query / query.norm())).reshape([-1]);
            let (_, top) = scores.topk(K as i64, 0, true, true);
            let found = Vec::<i64>::try_from(&top).unwrap();
            exact_times.push(at.elapsed().as_secs_f64());
            found
        })
        .collect();
    let exact_cpu = (cpu_seconds() - cpu) / EXACT_QUERIES as f64;
    drop(units);
    let (exact_rate, exact_p50, exact_p99) = spread(&mut exact_times);

    // The index, in a process of its own, as a worker holds it.
    let bytes: Vec<u8> = queries.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("queries"), bytes).unwrap();
    std::fs::write(dir.join("truth.json"), serde_json::to_vec(&truth).unwrap()).unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env(PROBE, &dir)
        .env("BENCH_NEIGHBOUR_DIMS", dims.to_string())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let probe: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let number = |key: &str| probe[key].as_f64().unwrap_or(f64::NAN);
    let vector_mb = (items * dims * 4) as f64 / 1e6;
    println!(
        "  {items} vectors ({vector_mb:.0} MB as float32): built in {built:.1} s, file {:.0} MB",
        file as f64 / 1e6
    );
    println!(
        "    exact (libtorch, in memory) {exact_rate:>9.1} queries/s  p50 {:>8.3} ms  p99 {:>8.3} ms  CPU/query {:>8.3} ms",
        exact_p50 * 1e3,
        exact_p99 * 1e3,
        exact_cpu * 1e3
    );
    println!(
        "    index (mapped)              {:>9.1} queries/s  p50 {:>8.3} ms  p99 {:>8.3} ms  CPU/query {:>8.3} ms  ({:.0}x exact)  recall@10 {:.4}",
        number("rate"),
        number("p50") * 1e3,
        number("p99") * 1e3,
        number("cpu") * 1e3,
        number("rate") / exact_rate,
        number("recall")
    );
    println!(
        "    the index's process: own memory (RssAnon) {:.1} MiB before opening, +{:.1} MiB after {INDEX_QUERIES} queries; file pages resident (RssFile) {:.0} MiB (the vectors: {vector_mb:.0} MB)",
        number("anon_before_kib") / 1024.0,
        (number("anon_after_kib") - number("anon_before_kib")) / 1024.0,
        number("file_kib") / 1024.0
    );
    if let Some(set) = in_pgvector {
        let (rate, p50, p99, cpu, recall) = set.search(settings, &queries, dims, &truth).await;
        println!(
            "    pgvector {} ({}): built in {:.1} s, table and index {:.0} MB",
            set.version,
            set.layout_name,
            set.built,
            set.bytes as f64 / 1e6
        );
        println!(
            "    pgvector (PostgreSQL)       {rate:>9.1} queries/s  p50 {:>8.3} ms  p99 {:>8.3} ms  CPU/query {:>8.3} ms  ({:.0}x exact)  recall@10 {recall:.4} (of {} candidates)",
            p50 * 1e3,
            p99 * 1e3,
            cpu * 1e3,
            rate / exact_rate,
            2 * K
        );
        set.drop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A set's vectors in pgvector's index, in a database of its own on the pgvector server.
struct PgvectorSet {
    admin_url: String,
    name: String,
    db: DatabaseConnection,
    index: embedding_index::Model,
    version: String,
    layout_name: String,
    built: f64,
    bytes: i64,
}

impl PgvectorSet {
    async fn build(admin_url: &str, settings: &IndexSettings, vectors: &[f32], dims: usize) -> PgvectorSet {
        let name = format!("yardmaster_bench_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(admin_url).await.expect("the pgvector server must be running");
        admin.execute_unprepared(&format!("CREATE DATABASE \"{name}\"")).await.unwrap();
        admin.close().await.ok();
        let base = admin_url.rsplit_once('/').map_or(admin_url, |(base, _)| base);
        let db = Database::connect(format!("{base}/{name}")).await.unwrap();
        <migration::Migrator as migration::MigratorTrait>::up(&db, None).await.unwrap();
        let version = pgvector::availability(&db, settings).await.expect("the server offers pgvector");
        let layout = Layout::new(&settings.precision, dims).unwrap();
        let build = uuid::Uuid::new_v4();
        let started = Instant::now();
        let made = pgvector::Build::start(&db, "default:bench", build, layout).await.unwrap();
        let items: Vec<i64> = (0..(vectors.len() / dims) as i64).collect();
        for (items, chunk) in items.chunks(4096).zip(vectors.chunks(4096 * dims)) {
            made.add(&db, items, chunk).await.unwrap();
        }
        let bytes = made.index(&db, settings).await.unwrap();
        let built = started.elapsed().as_secs_f64();
        let index = embedding_index::Model {
            set_name: "default:bench".into(),
            build,
            vectors_revision: 0,
            method: pgvector::PGVECTOR.into(),
            items: items.len() as i64,
            dims: dims as i64,
            bytes,
            parts: 0,
            built_at: chrono::Utc::now(),
        };
        let layout_name = format!("{}({dims})", layout.kind());
        PgvectorSet { admin_url: admin_url.to_owned(), name, db, index, version, layout_name, built, bytes }
    }

    /// Every query one at a time, as a search batch sends it: rate, p50, p99, CPU per query
    /// (this process and PostgreSQL's backends), recall@10 of the candidates.
    async fn search(
        &self,
        settings: &IndexSettings,
        queries: &[f32],
        dims: usize,
        truth: &[Vec<i64>],
    ) -> (f64, f64, f64, f64, f64) {
        let queries: Vec<Vec<f32>> = queries.chunks_exact(dims).map(<[f32]>::to_vec).collect();
        let before = sampler().snapshot();
        let mut times = Vec::with_capacity(queries.len());
        let mut hits = 0;
        for (at, query) in queries.iter().enumerate() {
            let started = Instant::now();
            let search = pgvector::search(
                &self.db,
                &self.index,
                std::slice::from_ref(query),
                2 * K,
                settings.expansion_search,
                false,
            );
            let found = search.await.unwrap().remove(0);
            times.push(started.elapsed().as_secs_f64());
            if let Some(truth) = truth.get(at) {
                hits += found.iter().filter(|item| truth.contains(item)).count();
            }
        }
        let usage = sampler().since(&before);
        let cpu = (usage.get(Role::Bench) + usage.get(Role::Postgres)) / times.len() as f64;
        let (rate, p50, p99) = spread(&mut times);
        (rate, p50, p99, cpu, hits as f64 / (K * truth.len()) as f64)
    }

    async fn drop(self) {
        self.db.close().await.ok();
        if let Ok(admin) = Database::connect(&self.admin_url).await {
            let _ = admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)).await;
        }
    }
}

/// Set to a directory holding `set.usearch`, `queries` and `truth.json`: the bench process
/// is the index's probe ([`probe`]) instead.
pub const PROBE: &str = "BENCH_NEIGHBOURS_PROBE";

/// The probe: opens the graph in `dir` as a worker does, answers every query one at a time,
/// and prints its rate, p50, p99, CPU per query, recall@10 and memory as JSON.
pub fn probe(dir: &str) {
    let dir = std::path::Path::new(dir);
    let dims = number_or("BENCH_NEIGHBOUR_DIMS", 1280);
    let bytes = std::fs::read(dir.join("queries")).unwrap();
    let queries: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let truth: Vec<Vec<i64>> = serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let settings = InferenceSettings::default().index;
    let before = rss_kib(std::process::id());
    let graph = Graph::open(&dir.join("set.usearch"), settings.expansion_search).unwrap();
    let cpu = cpu_seconds();
    let mut times = Vec::new();
    let mut hits = 0;
    for (at, query) in queries.chunks_exact(dims).enumerate() {
        let started = Instant::now();
        let found = graph.search(query, K, None).unwrap();
        times.push(started.elapsed().as_secs_f64());
        if let Some(truth) = truth.get(at) {
            hits += found.iter().filter(|(item, _)| truth.contains(item)).count();
        }
    }
    let cpu = (cpu_seconds() - cpu) / times.len() as f64;
    let after = rss_kib(std::process::id());
    let (rate, p50, p99) = spread(&mut times);
    let answer = serde_json::json!({
        "rate": rate, "p50": p50, "p99": p99, "cpu": cpu,
        "recall": hits as f64 / (K * truth.len()) as f64,
        "anon_before_kib": before.anon, "anon_after_kib": after.anon, "file_kib": after.file,
    });
    println!("{answer}");
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
