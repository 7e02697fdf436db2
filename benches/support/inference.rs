//! The inference cases: embeddings/s of `compute_embeddings` on the embedded default (batches
//! through the in-process inference queue and the actor, vectors stored in SQLite by the
//! write queue), against the same default model run directly with tch in one loop, both in
//! this run on the same inputs: protein-like sequences of long-tailed lengths. The direct
//! loop runs twice: in the caller's order by `batch_size` (batches as they were cut before
//! token budgets) and by the batches yardmaster cuts (sorted, `max_batch_tokens`), the
//! baseline of its ratio.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tch::{CModule, Device, Kind as TensorKind, Tensor};
use yardmaster::config::InferenceSettings;
use yardmaster::dispatch::Dispatcher;
use yardmaster::domain::NewJob;
use yardmaster::inference::batches;
use yardmaster::inference::tokenizer::Tokenizer;
use yardmaster::{Application, Settings};

use super::{bench_settings, sampler, wait_for_success, Figure, Kind, Scratch, Store};

/// A protein-like sequence of `len` residues, the same for the same `seed`.
fn sequence(seed: usize, len: usize) -> String {
    const RESIDUES: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";
    let mut state = (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            RESIDUES[(state % RESIDUES.len() as u64) as usize] as char
        })
        .collect()
}

pub async fn figures(inputs: usize) -> Vec<Figure> {
    let dir = std::env::temp_dir().join(format!("yardmaster-bench-model-{}", uuid::Uuid::new_v4().simple()));
    let model = dir.join("default.pt");
    // `BENCH_INFERENCE_DEVICE`: `cpu` (the default) or `cuda` (scripts/gpu-check.sh), both sides.
    let device = std::env::var("BENCH_INFERENCE_DEVICE").unwrap_or_else(|_| "cpu".into());
    let settings = InferenceSettings { model: model.display().to_string(), device, ..Default::default() };
    yardmaster::inference::model::write_default(&model, settings.vocab).unwrap();
    // Lengths as UniProt's fall (median 300, long-tailed), up to max_tokens.
    let lengths = batches::protein_lengths(inputs, settings.max_tokens, 11);
    let texts: Vec<String> = lengths.iter().enumerate().map(|(i, &len)| sequence(i, len)).collect();
    let in_order = batches::by_count(texts.len(), settings.batch_size);
    let planned = batches::plan(&lengths, settings.batch_size, settings.max_batch_tokens);
    // The allocator thresholds the inference actor sets for its process, set for both sides
    // from the start.
    yardmaster::inference::actor::keep_tensor_memory();
    // Alternated, so a slow spell of the machine falls on both sides alike.
    let mut figures = Vec::new();
    for _ in 0..rounds() {
        let name = format!("tch directly, in order, batches of {}", settings.batch_size);
        figures.push(direct(&model, &texts, &in_order, &settings, name));
        let name = format!("tch directly, yardmaster's batches ({} tokens)", settings.max_batch_tokens);
        figures.push(direct(&model, &texts, &planned, &settings, name));
        figures.push(embedded(&texts, &settings).await);
        figures.push(direct_loops(&model, &texts, &planned, &settings));
    }
    let _ = std::fs::remove_dir_all(&dir);
    figures
}

/// Rounds of the cases (`BENCH_INFERENCE_ROUNDS`, default 3), each round the two direct
/// runs, a yardmaster one, then the direct loops on every core.
pub fn rounds() -> usize {
    std::env::var("BENCH_INFERENCE_ROUNDS").ok().and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(3)
}

/// Figures per round, in that order.
pub const PER_ROUND: usize = 4;

/// The padding share of the benchmark's length mix, in the caller's order by count and as
/// yardmaster cuts it, for `inputs` inputs: `(by count, planned, batches by count, planned)`.
pub fn padding(inputs: usize) -> (f64, f64, usize, usize) {
    let settings = InferenceSettings::default();
    let lengths = batches::protein_lengths(inputs, settings.max_tokens, 11);
    let in_order = batches::by_count(lengths.len(), settings.batch_size);
    let planned = batches::plan(&lengths, settings.batch_size, settings.max_batch_tokens);
    (
        batches::padding_share(&lengths, &in_order),
        batches::padding_share(&lengths, &planned),
        in_order.len(),
        planned.len(),
    )
}

/// The device the bench's settings name.
fn device_of(settings: &InferenceSettings) -> Device {
    match settings.device.as_str() {
        "cuda" => Device::Cuda(0),
        _ => Device::Cpu,
    }
}

/// One batch (positions of `texts`) tokenised, run and copied out: its vectors.
fn embed(module: &CModule, tokenizer: &Tokenizer, device: Device, texts: &[String], batch: &[usize]) -> Vec<Vec<f32>> {
    let chunk: Vec<&String> = batch.iter().map(|&at| &texts[at]).collect();
    let tokens = tokenizer.encode(0, &chunk).unwrap();
    let ids = Tensor::from_slice(&tokens.ids).reshape([tokens.rows as i64, tokens.columns as i64]).to_device(device);
    let out = tch::no_grad(|| module.forward_ts(&[ids]).unwrap()).to_device(Device::Cpu);
    let dims = out.size()[1] as usize;
    let flat = Vec::<f32>::try_from(&out.to_kind(TensorKind::Float).flatten(0, -1)).unwrap();
    flat.chunks(dims).map(<[f32]>::to_vec).collect()
}

/// The model loaded once, then every batch (positions of `texts`) tokenised, run and copied
/// out, one after another.
fn direct(model: &Path, texts: &[String], plan: &[Vec<usize>], settings: &InferenceSettings, name: String) -> Figure {
    let device = device_of(settings);
    let module = CModule::load_on_device(model, device).unwrap();
    let tokenizer = Tokenizer::new(settings.vocab, settings.max_tokens);
    embed(&module, &tokenizer, device, texts, &[0]);
    let before = sampler().snapshot();
    let start = Instant::now();
    let vectors: usize = plan.iter().map(|batch| embed(&module, &tokenizer, device, texts, batch).len()).sum();
    let seconds = start.elapsed().as_secs_f64();
    let usage = sampler().since(&before);
    assert_eq!(vectors, texts.len());
    let name = format!("{name}, {}", settings.device);
    let note = format!("{} inputs, {} batches, {seconds:.1} s", texts.len(), plan.len());
    Figure::rate(name, texts.len() as f64 / seconds, note).of_kind(Kind::Inference).with_cpu(usage, texts.len())
}

/// The same batches shared by one loop a core, each loop with one of libtorch's threads and
/// the one model: what yardmaster's passes do, without a job system around them. Not the
/// baseline of the ratio (the is one loop); printed beside it.
fn direct_loops(model: &Path, texts: &[String], plan: &[Vec<usize>], settings: &InferenceSettings) -> Figure {
    let device = device_of(settings);
    let cores = tch::get_num_threads().max(1);
    let module = CModule::load_on_device(model, device).unwrap();
    let tokenizer = Tokenizer::new(settings.vocab, settings.max_tokens);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let before = sampler().snapshot();
    let start = Instant::now();
    let vectors: usize = std::thread::scope(|scope| {
        let loops: Vec<_> = (0..cores)
            .map(|_| {
                scope.spawn(|| {
                    tch::set_num_threads(1);
                    let mut vectors = 0;
                    loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(batch) = plan.get(at) else { break vectors };
                        vectors += embed(&module, &tokenizer, device, texts, batch).len();
                    }
                })
            })
            .collect();
        loops.into_iter().map(|one| one.join().unwrap()).sum()
    });
    let seconds = start.elapsed().as_secs_f64();
    let usage = sampler().since(&before);
    // libtorch keeps the last count set for threads it meets later: give it back.
    tch::set_num_threads(cores);
    assert_eq!(vectors, texts.len());
    let name = format!("tch directly, yardmaster's batches, {cores} loops of one thread, {}", settings.device);
    let note = format!("{} inputs, {} batches, {seconds:.1} s", texts.len(), plan.len());
    Figure::rate(name, texts.len() as f64 / seconds, note).of_kind(Kind::Inference).with_cpu(usage, texts.len())
}

/// One `compute_embeddings` job of every input on the embedded default, after a one-input
/// job has loaded the model.
async fn embedded(texts: &[String], inference: &InferenceSettings) -> Figure {
    let scratch = Scratch::create(Store::Sqlite).await;
    let mut settings = bench_settings(&scratch.url);
    settings.queues.extend(Settings::default().queues.into_iter().filter(|(name, _)| name != "default"));
    settings.inference = inference.clone();
    // No index build after the job: it would start once the coordinator has succeeded (the
    // round's end), outlive the dropped application and take the cores from the next rounds
    // (up to a quarter of their rate until 2026-12-07).
    settings.inference.index.min_items = texts.len() as u64 + 1;
    // `BENCH_INFERENCE_SLOTS` batches in flight (the queue's concurrency and the actor's
    // mailbox); default: the shipped configuration's.
    if let Some(slots) = std::env::var("BENCH_INFERENCE_SLOTS").ok().and_then(|n| n.parse().ok()) {
        settings.inference.mailbox = slots;
        if let Some(queue) = settings.queues.get_mut(&settings.inference.queue) {
            queue.concurrency = slots;
        }
    }
    // `BENCH_INFERENCE_PASSES`: the actor's passes at once (default: the shipped `0`).
    if let Some(passes) = std::env::var("BENCH_INFERENCE_PASSES").ok().and_then(|n| n.parse().ok()) {
        settings.inference.passes = passes;
    }
    let app = Application::builder(settings).without_api().build().await.unwrap();
    let (db, dispatcher) = (app.db(), Dispatcher::new(app.store(), app.transport()));
    let job = |set: &str, inputs: &[String]| NewJob {
        payload: json!({ "set": set, "inputs": inputs }),
        ..NewJob::new("compute_embeddings")
    };
    let warm = dispatcher.submit(job("warm-up", &texts[..1])).await.unwrap().job.id;
    wait_for_success(&db, warm).await;
    let before = sampler().snapshot();
    let (start, submitted) = (Instant::now(), chrono::Utc::now());
    let id = dispatcher.submit(job("bench", texts)).await.unwrap().job.id;
    let seconds = wait_for_success(&db, id).await.duration_since(start).as_secs_f64();
    let usage = sampler().since(&before);
    let phases = phases(&db, id, submitted).await;
    drop(app);
    tokio::time::sleep(Duration::from_millis(100)).await;
    scratch.remove().await;
    let name = format!("yardmaster embedded: compute_embeddings, SQLite, {}", inference.device);
    let note = format!("{} inputs, {seconds:.1} s; vectors stored, parent counted; {phases}", texts.len());
    Figure::rate(name, texts.len() as f64 / seconds, note).of_kind(Kind::Inference).with_cpu(usage, texts.len())
}

/// Where a coordinator's time went, from its events: submitted → started → fanned out → the
/// first batch counted → the last → succeeded, in seconds.
async fn phases(db: &sea_orm::DatabaseConnection, id: uuid::Uuid, submitted: chrono::DateTime<chrono::Utc>) -> String {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    use yardmaster::domain::EventName;
    use yardmaster::store::entity::job_event;
    let events = job_event::Entity::find()
        .filter(job_event::Column::JobId.eq(id))
        .order_by_asc(job_event::Column::Id)
        .all(db)
        .await
        .unwrap();
    let at = |name: &str, last: bool| {
        let mut times = events.iter().filter(|event| event.event == name).map(|event| event.ts);
        if last {
            times.next_back()
        } else {
            times.next()
        }
    };
    let marks = [
        at(EventName::STARTED, false),
        at(EventName::FANNED_OUT, false),
        at(EventName::BATCHES_SUCCEEDED, false),
        at(EventName::BATCHES_SUCCEEDED, true),
        at(EventName::SUCCEEDED, false),
    ];
    let mut previous = submitted;
    let mut spans = Vec::new();
    for (name, mark) in ["to start", "to fan out", "to the first batch", "batches", "to close"].iter().zip(marks) {
        let Some(mark) = mark else { continue };
        spans.push(format!("{name} {:.2}", (mark - previous).num_milliseconds() as f64 / 1000.0));
        previous = mark;
    }
    format!("phases (s): {}", spans.join(", "))
}
