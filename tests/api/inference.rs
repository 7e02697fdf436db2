//! The inference actor and its operations, with real libtorch: the actor against the model
//! run directly, `compute_embeddings` and `nearest_neighbours` end to end on SQLite and
//! PostgreSQL, a batch worker in another process over RabbitMQ (and killed mid-run), two
//! jobs contending for a full actor, and models that cannot serve.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tch::{CModule, Kind, Tensor};
use uuid::Uuid;
use yardmaster::config::InferenceSettings;
use yardmaster::inference::actor::Inference;
use yardmaster::inference::tokenizer::Tokenizer;

use crate::helpers::{eventually, Backend, TestApp, TestOptions};

/// A directory of model files for one test, removed afterwards.
pub struct Models {
    dir: PathBuf,
}

impl Models {
    pub fn new() -> Models {
        let dir = std::env::temp_dir().join(format!("yardmaster-models-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Models { dir }
    }

    /// The default model, written as `yardmaster model init` writes it.
    pub fn default_model(&self) -> PathBuf {
        let path = self.dir.join("default.pt");
        yardmaster::inference::model::write_default(&path, InferenceSettings::default().vocab).unwrap();
        path
    }

    /// A file at `name` holding `bytes`.
    pub fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Models {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The device the tests run inference on: `cpu`, unless `YARDMASTER_TEST_INFERENCE_DEVICE`
/// says `cuda` (as `scripts/gpu-check.sh` does on a GPU host).
pub fn test_device() -> String {
    std::env::var("YARDMASTER_TEST_INFERENCE_DEVICE").unwrap_or_else(|_| "cpu".into())
}

/// What a result names the test device as.
fn test_device_name() -> &'static str {
    match test_device().as_str() {
        "cuda" => "cuda:0",
        _ => "cpu",
    }
}

/// How far vectors made on the test device may be from the same model run on the CPU:
/// bit-for-bit kernels on the CPU, others (TF32 matrix products) on a GPU.
fn tolerance(on_cpu: f32) -> f32 {
    match test_device().as_str() {
        "cuda" => 1e-3,
        _ => on_cpu,
    }
}

/// The test's inference settings: its model, the test device, and the neighbour indexes
/// fetched into a directory beside the model (removed with it).
pub fn settings(model: &Path) -> InferenceSettings {
    let mut settings =
        InferenceSettings { model: model.display().to_string(), device: test_device(), ..Default::default() };
    settings.index.dir = model.with_file_name("indexes").display().to_string();
    settings
}

/// A protein-like sequence, the same for the same `seed`.
pub fn sequence(seed: usize, len: usize) -> String {
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

/// The model at `path` run directly with tch, one input at a time.
fn direct(path: &Path, inputs: &[String]) -> Vec<Vec<f32>> {
    let module = CModule::load(path).unwrap();
    let tokenizer = Tokenizer::new(InferenceSettings::default().vocab, InferenceSettings::default().max_tokens);
    tch::no_grad(|| {
        inputs
            .iter()
            .map(|input| {
                let tokens = tokenizer.encode(0, &[input]).unwrap();
                let ids = Tensor::from_slice(&tokens.ids).reshape([1, tokens.columns as i64]);
                let out = module.forward_ts(&[ids]).unwrap().to_kind(Kind::Float).flatten(0, -1);
                Vec::<f32>::try_from(&out).unwrap()
            })
            .collect()
    })
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn inference_options(inference: InferenceSettings) -> TestOptions {
    TestOptions {
        operation_queues: vec!["inference"],
        write_queues: vec!["batch_writes"],
        inference: Some(inference),
        ..Default::default()
    }
}

async fn wait_for_end(app: &TestApp, id: &str, within: Duration) -> Value {
    eventually("the job ended", within, || async {
        let (code, job) = app.get(&format!("/jobs/{id}")).await;
        assert_eq!(code, 200, "{job}");
        let ended = ["succeeded", "failed", "cancelled"].contains(&job["status"].as_str().unwrap_or(""));
        ended.then_some(job)
    })
    .await
}

/// Every item of a stored set, paged through `GET /embeddings/{set}`.
async fn stored_items(app: &TestApp, set: &str, limit: u64) -> Vec<Value> {
    let mut items = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let query = after.map(|after| format!("&after={after}")).unwrap_or_default();
        let (code, page) = app.get(&format!("/embeddings/{set}?limit={limit}{query}")).await;
        assert_eq!(code, 200, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_after"].as_i64() {
            Some(next) => after = Some(next),
            None => return items,
        }
    }
}

fn vector(value: &Value) -> Vec<f32> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
}

/// The `k` items of `stored` (as `GET /embeddings` gives them) that `keep` takes, most
/// similar to `query` first (ties: lower item), by brute force.
fn brute_force(stored: &[Value], query: &[f32], k: usize, keep: impl Fn(i64) -> bool) -> Vec<i64> {
    let mut ranked: Vec<(f32, i64)> = stored
        .iter()
        .filter(|item| keep(item["item"].as_i64().unwrap()))
        .map(|item| {
            let v = vector(&item["vector"]);
            let dot: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
            let norms = v.iter().map(|x| x * x).sum::<f32>().sqrt() * query.iter().map(|x| x * x).sum::<f32>().sqrt();
            (dot / norms, item["item"].as_i64().unwrap())
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.iter().take(k).map(|(_, item)| *item).collect()
}

/// A model traced here (not the default one), loaded by the actor, answers what the same
/// file answers run directly with tch.
#[actix_rt::test]
async fn the_actor_answers_what_the_model_answers_run_directly() {
    let models = Models::new();
    let path = models.path("mean.pt");
    let table = Tensor::from_slice(&(0..4096 * 8).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect::<Vec<_>>())
        .reshape([4096, 8]);
    let mut forward = |inputs: &[Tensor]| {
        let ids = &inputs[0];
        let mask = ids.ne(0).to_kind(Kind::Float).unsqueeze(-1);
        let summed = (Tensor::embedding(&table, ids, 0, false, false) * &mask).sum_dim_intlist(
            [1_i64].as_slice(),
            false,
            Kind::Float,
        );
        vec![summed / mask.sum_dim_intlist([1_i64].as_slice(), false, Kind::Float)]
    };
    let example = Tensor::from_slice(&[1_i64, 2, 0, 3]).reshape([2, 2]);
    CModule::create_by_tracing("mean", "forward", &[example], &mut forward).unwrap().save(&path).unwrap();

    let inputs: Vec<String> = (0..20).map(|i| sequence(i, 5 + i)).collect();
    let inference = Inference::new(settings(&path));
    let tokenizer = Tokenizer::new(4096, 512);
    let embedded = inference.embed(tokenizer.encode(0, &inputs).unwrap()).await.unwrap();
    assert_eq!((embedded.model.as_str(), embedded.device.as_str()), ("mean.pt", test_device_name()));
    let expected = direct(&path, &inputs);
    assert_eq!(embedded.vectors.len(), inputs.len());
    for (got, want) in embedded.vectors.iter().zip(&expected) {
        assert_eq!(got.len(), 8);
        assert!(max_difference(got, want) <= tolerance(1e-6), "{got:?} vs {want:?}");
    }
}

/// Two passes at once on the one loaded model (`inference.passes`): batches sent together
/// each get what the model answers for them run alone.
#[actix_rt::test]
async fn passes_at_once_answer_what_the_model_answers_alone() {
    let models = Models::new();
    let path = models.default_model();
    let inference = Inference::new(InferenceSettings { passes: 2, mailbox: 4, ..settings(&path) });
    let tokenizer = Tokenizer::new(4096, 512);
    let batches: Vec<Vec<String>> =
        (0..4).map(|batch| (0..16).map(|i| sequence(batch * 100 + i, 40 + 20 * i)).collect()).collect();
    let answers = futures_util::future::join_all(
        batches.iter().map(|inputs| inference.embed(tokenizer.encode(0, inputs).unwrap())),
    )
    .await;
    for (inputs, answer) in batches.iter().zip(answers) {
        let answer = answer.unwrap();
        let expected = direct(&path, inputs);
        assert_eq!(answer.vectors.len(), inputs.len());
        for (got, want) in answer.vectors.iter().zip(&expected) {
            assert!(max_difference(got, want) <= tolerance(1e-5), "{got:?} vs {want:?}");
        }
    }
}

/// A corrupt model, a missing one, and one answering the wrong shape are errors with their
/// own codes, never a panic; the actor goes on answering.
#[actix_rt::test]
async fn models_that_cannot_serve_answer_with_their_codes() {
    let models = Models::new();
    let tokenizer = Tokenizer::new(4096, 512);
    let tokens = || tokenizer.encode(0, &["MKV", "AAAA"]).unwrap();

    let corrupt = Inference::new(settings(&models.file("corrupt.pt", b"PK\x03\x04 not a model at all")));
    let err = corrupt.embed(tokens()).await.unwrap_err();
    assert_eq!(err.code(), "ModelUnavailable", "{err}");
    assert_eq!(corrupt.embed(tokens()).await.unwrap_err().code(), "ModelUnavailable");

    let missing = Inference::new(settings(&models.path("absent.pt")));
    let err = missing.embed(tokens()).await.unwrap_err();
    assert!(err.code() == "ModelUnavailable" && err.to_string().contains("does not exist"), "{err}");

    let path = models.path("flat.pt");
    let mut flat = |inputs: &[Tensor]| {
        vec![inputs[0].to_kind(Kind::Float).sum_dim_intlist([1_i64].as_slice(), false, Kind::Float)]
    };
    let example = Tensor::from_slice(&[1_i64, 2, 0, 3]).reshape([2, 2]);
    CModule::create_by_tracing("flat", "forward", &[example], &mut flat).unwrap().save(&path).unwrap();
    let err = Inference::new(settings(&path)).embed(tokens()).await.unwrap_err();
    assert_eq!(err.code(), "ModelShapeMismatch", "{err}");
}

/// The mailbox is bounded: with one batch accepted, the next is refused at once as busy.
#[actix_rt::test]
async fn a_full_actor_answers_busy_at_once() {
    let models = Models::new();
    let inference = Inference::new(InferenceSettings { mailbox: 1, passes: 1, ..settings(&models.default_model()) });
    let tokenizer = Tokenizer::new(4096, 512);
    let long: Vec<String> = (0..64).map(|i| sequence(i, 500)).collect();
    let first = inference.embed(tokenizer.encode(0, &long).unwrap());
    let second = async {
        // The first request holds the only place from its first poll on.
        tokio::task::yield_now().await;
        inference.embed(tokenizer.encode(0, &["MKV"]).unwrap()).await
    };
    let (first, second) = futures_util::future::join(first, second).await;
    assert!(first.is_ok());
    assert_eq!(second.unwrap_err().code(), "InferenceBusy");
    // Once the first is answered, the place is free again.
    assert!(inference.embed(tokenizer.encode(0, &["MKV"]).unwrap()).await.is_ok());
}

/// 1,000 inputs of mixed lengths, batched sorted by length under a token budget: the
/// coordinator ends SUCCEEDED with exact progress, one stored vector per input in the
/// caller's order, each the model's own answer for that input.
async fn compute_embeddings_stores_a_vector_per_input(backend: Backend) {
    let models = Models::new();
    let model = models.default_model();
    let inference = InferenceSettings { max_batch_tokens: 1024, ..settings(&model) };
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let inputs: Vec<String> = (0..1000).map(|i| sequence(i, 20 + i * 7 % 40)).collect();
    let body = json!({ "operation": "compute_embeddings", "payload": { "set": "proteins", "inputs": inputs } });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = wait_for_end(&app, id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let lengths: Vec<usize> = inputs.iter().map(String::len).collect();
    let batches = yardmaster::inference::batches::plan(&lengths, 64, 1024).len() as i64;
    assert!(batches > 1000_u64.div_ceil(64) as i64, "the budget, not the count, cuts most batches: {batches}");
    assert_eq!((done["progress_current"].as_i64(), done["progress_total"].as_i64()), (Some(batches), Some(batches)));
    let result = &done["result"];
    assert_eq!(
        (result["set"].as_str(), result["count"].as_u64(), result["dims"].as_u64()),
        (Some("proteins"), Some(1000), Some(128))
    );
    assert_eq!((result["model"].as_str(), result["device"].as_str()), (Some("default.pt"), Some(test_device_name())));
    assert_eq!(app.count("SELECT COUNT(*) FROM embedding WHERE set_name = 'default:proteins'").await, 1000);

    let items = stored_items(&app, "proteins", 300).await;
    assert_eq!(items.len(), 1000);
    for (at, item) in items.iter().enumerate() {
        assert_eq!((item["item"].as_i64(), item["input"].as_str()), (Some(at as i64), Some(inputs[at].as_str())));
    }
    let sample: Vec<usize> = vec![0, 1, 63, 64, 500, 999];
    let expected = direct(&model, &sample.iter().map(|&at| inputs[at].clone()).collect::<Vec<_>>());
    for (at, want) in sample.iter().zip(&expected) {
        let got = vector(&items[*at]["vector"]);
        let differs = max_difference(&got, want);
        assert!(differs <= tolerance(1e-5), "item {at}: differs by {differs}");
    }
    let (code, page) = app.get("/embeddings/proteins?limit=1").await;
    assert_eq!((code, page["job_status"].as_str(), page["inputs"].as_i64()), (200, Some("succeeded"), Some(1000)));
}

/// Nearest neighbours of a constructed set: an input's own text finds itself first with
/// similarity 1, and the ranking is the brute-force ranking of the stored vectors.
async fn nearest_neighbours_finds_the_known_nearest(backend: Backend) {
    let models = Models::new();
    let model = models.default_model();
    let app = TestApp::spawn_with(backend, inference_options(settings(&model))).await;
    let inputs: Vec<String> = (0..200).map(|i| sequence(i, 30)).collect();
    let (_, job) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": "known", "inputs": inputs } })).await;
    let embedded = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(embedded["status"], "succeeded", "{embedded}");

    let queries = vec![inputs[17].clone(), inputs[150].clone(), "MKVLAAGIVGLLLAQ".to_owned()];
    let body = json!({ "operation": "nearest_neighbours", "payload": { "set": "known", "queries": queries, "k": 5 } });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let answers = done["result"]["queries"].as_array().unwrap();
    assert_eq!(answers.len(), 3);
    // In the caller's order, though the shortest query was batched first.
    for (answer, query) in answers.iter().zip(&queries) {
        assert_eq!(answer["query"].as_str(), Some(query.as_str()), "{answer}");
    }
    for (at, own) in [(0, 17), (1, 150)] {
        let first = &answers[at]["neighbours"][0];
        assert_eq!(first["item"], own, "{}", answers[at]);
        assert!((first["score"].as_f64().unwrap() - 1.0).abs() < 1e-4, "{first}");
    }
    // Brute force over the stored vectors, for the query that is in no set.
    let stored = stored_items(&app, "known", 500).await;
    let query = direct(&model, &queries[2..]).remove(0);
    let expected = brute_force(&stored, &query, 5, |_| true);
    let got: Vec<i64> =
        answers[2]["neighbours"].as_array().unwrap().iter().map(|n| n["item"].as_i64().unwrap()).collect();
    assert_eq!(got, expected);
}

/// Two embedding jobs at once through an actor that takes one batch at a time: batches
/// that find it full wait (RetryLater, `inference.busy` in the log) and both jobs finish.
async fn two_jobs_share_a_full_actor_through_retry_later(backend: Backend) {
    let models = Models::new();
    let inference = InferenceSettings {
        mailbox: 1,
        passes: 1,
        batch_size: 8,
        retry_after_ms: 20,
        ..settings(&models.default_model())
    };
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let mut ids = Vec::new();
    for set in ["first", "second"] {
        let inputs: Vec<String> = (0..64).map(|i| sequence(i, 200)).collect();
        let (code, job) =
            app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": set, "inputs": inputs } })).await;
        assert_eq!(code, 201, "{job}");
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let mut busy = 0;
    for id in &ids {
        let done = wait_for_end(&app, id, Duration::from_secs(120)).await;
        assert_eq!(
            (done["status"].as_str(), done["result"]["count"].as_u64()),
            (Some("succeeded"), Some(64)),
            "{done}"
        );
        busy += app.event_names(id).await.iter().filter(|name| *name == "inference.busy").count();
    }
    assert!(busy > 0, "no batch ever found the actor full");
    assert_eq!(app.count("SELECT COUNT(*) FROM embedding").await, 128);
}

/// A corrupt model fails the job with the model's code, and the service goes on serving.
async fn a_corrupt_model_fails_the_job_and_the_service_goes_on(backend: Backend) {
    let models = Models::new();
    let corrupt = models.file("corrupt.pt", &[0x50, 0x4b, 0x03, 0x04, 0xde, 0xad, 0xbe, 0xef]);
    let app = TestApp::spawn_with(backend, inference_options(settings(&corrupt))).await;
    let (_, job) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "inputs": ["MKV", "AAA"] } })).await;
    let id = job["id"].as_str().unwrap();
    let failed = wait_for_end(&app, id, Duration::from_secs(60)).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error_message"].as_str().unwrap().contains("ModelUnavailable"), "{failed}");
    let events = app.events(id).await;
    let child = events.iter().find(|event| event["event"] == "child.failed").expect("child.failed");
    assert_eq!(child["fields"]["error_code"], "ModelUnavailable", "{child}");

    let (code, _) = app.get("/healthz").await;
    assert_eq!(code, 200);
    let (_, ping) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(ping["id"].as_str().unwrap(), "succeeded").await;
}

/// Inputs the tokeniser refuses, and a set another job owns, fail the coordinator with
/// their own codes before any batch is sent.
async fn refused_inputs_and_taken_sets_fail_with_their_codes(backend: Backend) {
    let models = Models::new();
    let app = TestApp::spawn_with(backend, inference_options(settings(&models.default_model()))).await;
    let too_long = "A".repeat(513);
    for (inputs, needle) in [(json!(["MKV", ""]), "input 1 is empty"), (json!([too_long]), "513 tokens")] {
        let (_, job) = app.submit(json!({ "operation": "compute_embeddings", "payload": { "inputs": inputs } })).await;
        let failed = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
        assert_eq!(failed["error_code"], "InvalidInput", "{failed}");
        assert!(failed["error_message"].as_str().unwrap().contains(needle), "{failed}");
        assert_eq!(failed["progress_total"], Value::Null, "no batch was sent: {failed}");
    }
    let (_, first) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": "mine", "inputs": ["MKV"] } })).await;
    assert_eq!(wait_for_end(&app, first["id"].as_str().unwrap(), Duration::from_secs(30)).await["status"], "succeeded");
    let (_, second) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": "mine", "inputs": ["AAA"] } })).await;
    let taken = wait_for_end(&app, second["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(taken["error_code"], "SetTaken", "{taken}");
    // The first job's set is untouched.
    let items = stored_items(&app, "mine", 10).await;
    assert_eq!((items.len(), items[0]["input"].as_str()), (1, Some("MKV")));
    // Neighbours of a set that does not exist.
    let body = json!({ "operation": "nearest_neighbours", "payload": { "set": "nowhere", "queries": ["MKV"] } });
    let (_, job) = app.submit(body).await;
    assert_eq!(
        wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await["error_code"],
        "UnknownSet"
    );
}

/// Hostile requests to the new endpoint and payloads: clear problems, nothing written.
async fn hostile_input_gets_clear_problems(backend: Backend) {
    let models = Models::new();
    let app = TestApp::spawn_with(backend, inference_options(settings(&models.default_model()))).await;
    for (path, code, problem) in [
        ("/embeddings/nowhere", 404, "set_not_found"),
        ("/embeddings/bad%00name", 400, "invalid_set_name"),
        ("/embeddings/a%2Fb", 400, "invalid_set_name"),
        ("/embeddings/%40global", 400, "invalid_set_name"),
        (&format!("/embeddings/{}", "x".repeat(201)), 400, "invalid_set_name"),
        ("/embeddings/nowhere?limit=0", 400, "invalid_query"),
        ("/embeddings/nowhere?after=abc", 400, "invalid_query"),
        ("/embeddings/nowhere?limit=99999999", 400, "invalid_query"),
        ("/embeddings/nowhere?cursor=1", 400, "invalid_query"),
    ] {
        let (status, body) = app.get(path).await;
        assert_eq!((status, body["code"].as_str()), (code, Some(problem)), "{path}: {body}");
    }
    for payload in [
        json!({}),
        json!({ "inputs": [] }),
        json!({ "inputs": "MKV" }),
        json!({ "inputs": [1, 2] }),
        json!({ "inputs": ["a"], "from_set": "b" }),
        json!({ "inputs": ["a"], "set": "no/slash" }),
        json!({ "inputs": ["a"], "set": "" }),
        json!({ "inputs": ["a"], "extra": true }),
        json!({ "inputs": ["a", "b"], "labels": [["GO:1"]] }),
        json!({ "inputs": ["a"], "labels": [[""]] }),
        json!({ "inputs": ["a"], "labels": [["GO\u{0007}1"]] }),
        json!({ "inputs": ["a"], "labels": [["x".repeat(257)]] }),
        json!({ "inputs": ["a"], "labels": [vec!["GO:1"; 1001]] }),
        json!({ "inputs": ["a"], "labels": "GO:1" }),
        json!({ "inputs": ["a"], "labels": [[1]] }),
        json!({ "from_set": "b", "labels": [["GO:1"]] }),
    ] {
        let (status, body) = app.submit(json!({ "operation": "compute_embeddings", "payload": payload })).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_payload")), "{payload}: {body}");
    }
    for payload in [
        json!({ "set": "s", "queries": [] }),
        json!({ "set": "s", "queries": ["a"], "k": 0 }),
        json!({ "set": "s", "queries": ["a"], "k": 51 }),
    ] {
        let (status, body) = app.submit(json!({ "operation": "nearest_neighbours", "payload": payload })).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_payload")), "{payload}: {body}");
    }
    for payload in [
        json!({ "set": "s", "queries": [] }),
        json!({ "set": "s", "queries": ["a"], "k": 0 }),
        json!({ "set": "s", "queries": ["a"], "top": 0 }),
        json!({ "set": "s", "queries": ["a"], "top": 101 }),
        json!({ "set": "s", "queries": ["a"], "top": "5" }),
        json!({ "set": "a/b", "queries": ["a"] }),
        json!({ "queries": ["a"] }),
    ] {
        let (status, body) = app.submit(json!({ "operation": "transfer_annotations", "payload": payload })).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_payload")), "{payload}: {body}");
    }
    for payload in [
        json!({}),
        json!({ "set": "" }),
        json!({ "set": "a/b" }),
        json!({ "set": 7 }),
        json!({ "set": "x".repeat(201) }),
        json!({ "set": "s", "extra": 1 }),
    ] {
        let (status, body) = app.submit(json!({ "operation": "embeddings.index", "payload": payload })).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid_payload")), "{payload}: {body}");
    }
    let (status, body) =
        app.submit(json!({ "operation": "embeddings.index", "payload": { "set": "a\u{0000}" } })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("nul_character")), "{body}");
    let (status, body) = app
        .submit(
            json!({ "operation": "compute_embeddings", "payload": { "inputs": ["a"], "labels": [["GO:\u{0000}"]] } }),
        )
        .await;
    assert_eq!((status, body["code"].as_str()), (422, Some("nul_character")), "{body}");
    let (status, body) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "inputs": ["a\u{0000}b"] } })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("nul_character")), "{body}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM embedding_set").await, 0);
}

/// `sequence(seed, len)` with every `every`-th residue changed by `shift`: a member of the
/// family of `sequence(seed, len)`.
fn member(seed: usize, len: usize, every: usize, shift: usize) -> String {
    const RESIDUES: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";
    sequence(seed, len)
        .bytes()
        .enumerate()
        .map(|(at, residue)| match at % every == shift % every {
            true => {
                RESIDUES[(RESIDUES.iter().position(|&r| r == residue).unwrap() + 1 + shift) % RESIDUES.len()] as char
            }
            false => residue as char,
        })
        .collect()
}

/// Label transfer on a set with a known answer: four families of ten related sequences,
/// family f labelled `GO:f` (families 0 and 1 also `GO:01`), five more members of family 2
/// without labels, and ten unlabelled strangers.
/// A new member of a family gets its family's labels at score 1 from five neighbours, all
/// labelled; a set without labels fails `SetUnlabelled`; a set of another room is unknown.
async fn transfer_annotations_gives_a_query_its_family_labels(backend: Backend) {
    let models = Models::new();
    let app = TestApp::spawn_with(backend, inference_options(settings(&models.default_model()))).await;
    let (mut inputs, mut labels) = (Vec::new(), Vec::new());
    for family in 0..4 {
        for at in 0..10 {
            inputs.push(member(100 + family, 80, 7, at));
            let mut own = vec![format!("GO:{family}")];
            if family < 2 {
                own.push("GO:01".to_owned());
            }
            labels.push(own);
        }
    }
    for at in 0..5 {
        inputs.push(member(102, 80, 9, at));
        labels.push(Vec::new());
    }
    for stranger in 0..10 {
        inputs.push(sequence(500 + stranger, 80));
        labels.push(Vec::new());
    }
    let body = json!({ "operation": "compute_embeddings", "payload": { "set": "families", "inputs": inputs, "labels": labels } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let stored = stored_items(&app, "families", 100).await;
    assert_eq!(stored[3]["labels"], json!(["GO:0", "GO:01"]), "{}", stored[3]);
    assert_eq!(stored[45]["labels"], json!([]));

    let queries = vec![member(102, 80, 5, 2), member(100, 80, 6, 3)];
    let body = json!({ "operation": "transfer_annotations", "payload": { "set": "families", "queries": queries, "k": 5, "top": 3 } });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let answers = done["result"]["queries"].as_array().unwrap();
    assert_eq!((done["result"]["k"].as_u64(), done["result"]["top"].as_u64()), (Some(5), Some(3)));
    for (answer, (query, want)) in
        answers.iter().zip([(&queries[0], vec!["GO:2"]), (&queries[1], vec!["GO:0", "GO:01"])])
    {
        assert_eq!(answer["query"].as_str(), Some(query.as_str()));
        let neighbours = answer["neighbours"].as_array().unwrap();
        assert_eq!(neighbours.len(), 5, "{answer}");
        assert!(neighbours.iter().all(|n| n["item"].as_i64().unwrap() < 40), "labelled items only: {answer}");
        let got: Vec<(&str, f64, u64)> = answer["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["label"].as_str().unwrap(), l["score"].as_f64().unwrap(), l["support"].as_u64().unwrap()))
            .collect();
        let mut best: Vec<&str> = got.iter().filter(|(_, score, _)| (score - 1.0).abs() < 1e-5).map(|g| g.0).collect();
        best.sort_unstable();
        let mut want = want;
        want.sort_unstable();
        assert_eq!(best, want, "{answer}");
        assert!(got.iter().filter(|g| want.contains(&g.0)).all(|g| g.2 == 5), "{answer}");
    }

    let (_, job) = app
        .submit(json!({ "operation": "compute_embeddings", "payload": { "set": "bare", "inputs": ["MKV", "MKL"] } }))
        .await;
    wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    let (_, job) = app
        .submit(json!({ "operation": "transfer_annotations", "payload": { "set": "bare", "queries": ["MKV"] } }))
        .await;
    let failed = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(failed["error_code"], "SetUnlabelled", "{failed}");

    let body = json!({
        "operation": "transfer_annotations", "room": "elsewhere",
        "payload": { "set": "families", "queries": ["MKV"] },
    });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let failed = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(failed["error_code"], "UnknownSet", "another room's set is not there: {failed}");
}

/// Labels given after a set was computed (`PUT /embeddings/{set}/labels`) replace the named
/// items' labels, all or none, and `transfer_annotations` reads them; hostile bodies, another
/// room's set and a read-only token are refused, and change nothing.
async fn labels_given_later_replace_an_items_labels(backend: Backend) {
    let models = Models::new();
    let app = TestApp::spawn_with(backend, inference_options(settings(&models.default_model()))).await;
    let inputs: Vec<String> = (0..4).map(|i| sequence(700 + i, 40)).collect();
    let (_, job) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": "later", "inputs": inputs } })).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let put = |body: Value, path: &'static str| {
        let (client, url) = (app.client.clone(), app.url(path));
        async move { crate::helpers::read(client.put(url).json(&body).send().await.unwrap()).await }
    };
    let labels_of = || async {
        stored_items(&app, "later", 10).await.into_iter().map(|item| item["labels"].clone()).collect::<Vec<Value>>()
    };

    // A search first: this process now holds the set, unlabelled, in its cache.
    let body =
        json!({ "operation": "nearest_neighbours", "payload": { "set": "later", "queries": [inputs[2]], "k": 1 } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let body = json!({ "items": [{ "item": 0, "labels": ["GO:1", "GO:2"] }, { "item": 2, "labels": ["GO:3"] }] });
    let (status, written) = put(body, "/embeddings/later/labels").await;
    assert_eq!(
        (status, written["updated"].as_u64(), written["set"].as_str()),
        (200, Some(2), Some("later")),
        "{written}"
    );
    assert_eq!(labels_of().await, [json!(["GO:1", "GO:2"]), json!([]), json!(["GO:3"]), json!([])]);
    let (status, _) = put(json!({ "items": [{ "item": 0, "labels": [] }] }), "/embeddings/later/labels").await;
    assert_eq!(status, 200);
    let transfer = || async {
        let body = json!({ "operation": "transfer_annotations", "payload": { "set": "later", "queries": [inputs[2]], "k": 1 } });
        let (_, job) = app.submit(body).await;
        let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
        done["result"]["queries"][0]["labels"][0]["label"].clone()
    };
    assert_eq!(transfer().await, "GO:3", "the labels given after the set was cached");
    let (status, _) = put(json!({ "items": [{ "item": 2, "labels": ["GO:4"] }] }), "/embeddings/later/labels").await;
    assert_eq!(status, 200);
    assert_eq!(transfer().await, "GO:4", "labels replaced again are read again");

    let refused = [
        (
            json!({ "items": [{ "item": 1, "labels": ["x"] }, { "item": 99, "labels": ["y"] }] }),
            404,
            "item_not_found",
            "/items/1/item",
        ),
        (
            json!({ "items": [{ "item": 1, "labels": ["x"] }, { "item": 1, "labels": ["y"] }] }),
            422,
            "invalid_labels",
            "/items/1/item",
        ),
        (json!({ "items": [] }), 422, "invalid_labels", "/items"),
        (json!({ "items": [{ "item": 1, "labels": ["a\u{0000}b"] }] }), 422, "nul_character", "/items/0/labels/0"),
        (json!({ "items": [{ "item": 1, "labels": [""] }] }), 422, "invalid_labels", "/items/0/labels"),
        (json!({ "items": [{ "item": 1, "labels": ["x".repeat(257)] }] }), 422, "invalid_labels", "/items/0/labels"),
        (json!({ "items": [{ "item": 1, "labels": vec!["x"; 1001] }] }), 422, "invalid_labels", "/items/0/labels"),
    ];
    for (body, code, problem, pointer) in refused {
        let (status, answer) = put(body, "/embeddings/later/labels").await;
        assert_eq!(
            (status, answer["code"].as_str(), answer["pointer"].as_str()),
            (code, Some(problem), Some(pointer)),
            "{answer}"
        );
    }
    // A body past server.max_body_bytes is refused before it is read whole.
    let huge =
        json!({ "items": (0..10_001).map(|i| json!({ "item": i, "labels": ["GO:0000001"] })).collect::<Vec<_>>() });
    let (status, answer) = put(huge, "/embeddings/later/labels").await;
    assert_eq!((status, answer["code"].as_str()), (413, Some("payload_too_large")), "{answer}");
    for body in [
        json!({ "items": [{ "item": "1", "labels": [] }] }),
        json!({ "items": [{ "item": 1 }] }),
        json!({ "labels": [] }),
        json!([1]),
    ] {
        let (status, answer) = put(body.clone(), "/embeddings/later/labels").await;
        assert_eq!((status, answer["code"].as_str()), (422, Some("invalid_request")), "{body}: {answer}");
    }
    let body = json!({ "items": [{ "item": 1, "labels": ["x"] }] });
    for (path, code, problem) in [
        ("/embeddings/nowhere/labels", 404, "set_not_found"),
        ("/embeddings/later/labels?room=elsewhere", 404, "set_not_found"),
        ("/embeddings/bad%00name/labels", 400, "invalid_set_name"),
        ("/embeddings/later/labels?room=a%00b", 400, "invalid_room_id"),
        ("/embeddings/later/labels?what=1", 400, "invalid_query"),
    ] {
        let (status, answer) = put(body.clone(), path).await;
        assert_eq!((status, answer["code"].as_str()), (code, Some(problem)), "{path}: {answer}");
    }
    let (status, created) = crate::helpers::read(
        app.client
            .post(app.url("/admin/tokens"))
            .json(&json!({ "user": "r", "rooms": ["default"], "read_only": true }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let reader = crate::helpers::client_with(created["token"].as_str().unwrap());
    let (status, answer) =
        crate::helpers::read(reader.put(app.url("/embeddings/later/labels")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, answer["code"].as_str()), (403, Some("read_only_token")), "{answer}");
    let member = app.member("mia").await;
    let (status, answer) = crate::helpers::read(
        member.put(app.url("/embeddings/later/labels?room=elsewhere")).json(&body).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, answer["code"].as_str()), (404, Some("set_not_found")), "another room's set: {answer}");
    assert_eq!(labels_of().await, [json!([]), json!([]), json!(["GO:4"]), json!([])], "nothing refused was written");
}

/// `from_set` embeds the inputs of a stored set again: the new set holds the same inputs in
/// the same order, with the same model's vectors.
async fn from_set_embeds_a_stored_set_again(backend: Backend) {
    let models = Models::new();
    let app = TestApp::spawn_with(backend, inference_options(settings(&models.default_model()))).await;
    let inputs: Vec<String> = (0..70).map(|i| sequence(i, 10 + i)).collect();
    let (_, job) = app
        .submit(json!({ "operation": "compute_embeddings", "payload": { "set": "source", "inputs": inputs } }))
        .await;
    assert_eq!(wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await["status"], "succeeded");
    let body = json!({ "operation": "compute_embeddings", "payload": { "set": "copy", "from_set": "source" } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!((done["status"].as_str(), done["result"]["count"].as_u64()), (Some("succeeded"), Some(70)), "{done}");
    let (source, copy) = (stored_items(&app, "source", 500).await, stored_items(&app, "copy", 500).await);
    assert_eq!(source.len(), copy.len());
    for (a, b) in source.iter().zip(&copy) {
        assert_eq!((&a["item"], &a["input"]), (&b["item"], &b["input"]));
        assert!(max_difference(&vector(&a["vector"]), &vector(&b["vector"])) <= 1e-6);
    }
    let body = json!({ "operation": "compute_embeddings", "payload": { "from_set": "nowhere" } });
    let (_, job) = app.submit(body).await;
    assert_eq!(
        wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await["error_code"],
        "UnknownSet"
    );
}

/// `yardmaster model init` writes the default model once, leaves an existing file alone
/// unless `--force`, and the file is one the actor loads.
#[actix_rt::test]
async fn model_init_writes_the_default_model_once() {
    let models = Models::new();
    let path = models.path("nested/dir/model.pt");
    let run = |extra: &[&str]| {
        let mut args = vec!["model", "init", "--out", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_yardmaster")).args(&args).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert!(run(&[]).contains("wrote the default model"));
    let written = std::fs::read(&path).unwrap();
    assert!(run(&[]).contains("already there"));
    std::fs::write(&path, b"replaced").unwrap();
    assert!(run(&[]).contains("already there"));
    assert_eq!(std::fs::read(&path).unwrap(), b"replaced");
    assert!(run(&["--force"]).contains("wrote the default model"));
    assert_eq!(std::fs::read(&path).unwrap(), written, "the default model is the same file every time");
    let embedded = Inference::new(settings(&path)).embed(Tokenizer::new(4096, 512).encode(0, &["MKV"]).unwrap()).await;
    assert_eq!(embedded.unwrap().vectors[0].len(), 128);
}

/// An ESM-shaped model (ESM-2's alphabet: `<cls>` 0, `<pad>` 1, `<eos>` 2; an embedding, one
/// attention block that ignores padding, mean-pooled over the residues, normalised) with
/// random weights, traced here: what `scripts/export-model.py` makes of a real ESM-2.
fn esm_shaped_model(path: &Path) {
    const DIM: i64 = 32;
    tch::manual_seed(7);
    let random = |shape: &[i64]| Tensor::randn(shape, (Kind::Float, tch::Device::Cpu)) / (DIM as f64).sqrt();
    let table = random(&[33, DIM]);
    let (wq, wk, wv, wo, w1, w2) = (
        random(&[DIM, DIM]),
        random(&[DIM, DIM]),
        random(&[DIM, DIM]),
        random(&[DIM, DIM]),
        random(&[DIM, 64]),
        random(&[64, DIM]),
    );
    let norm = |x: &Tensor| x.layer_norm([DIM].as_slice(), None::<Tensor>, None::<Tensor>, 1e-5, false);
    let mut forward = |inputs: &[Tensor]| {
        let ids = &inputs[0];
        let x = Tensor::embedding(&table, ids, 1, false, false);
        let padding = ids.eq(1).to_kind(Kind::Float).unsqueeze(1) * -1e4;
        let h = norm(&x);
        let scores = h.matmul(&wq).matmul(&h.matmul(&wk).transpose(-2, -1)) / (DIM as f64).sqrt() + padding;
        let x = &x + scores.softmax(-1, Kind::Float).matmul(&h.matmul(&wv)).matmul(&wo);
        let x = norm(&(&x + norm(&x).matmul(&w1).gelu("none").matmul(&w2)));
        let residues = (ids.gt(2)).to_kind(Kind::Float).unsqueeze(-1);
        let pooled = (x * &residues).sum_dim_intlist([1_i64].as_slice(), false, Kind::Float)
            / residues.sum_dim_intlist([1_i64].as_slice(), false, Kind::Float);
        vec![&pooled / pooled.norm_scalaropt_dim(2, [1_i64].as_slice(), true)]
    };
    let example = Tensor::from_slice(&[0_i64, 5, 7, 2, 0, 5, 2, 1]).reshape([2, 4]);
    CModule::create_by_tracing("esm", "forward", &[example], &mut forward).unwrap().save(path).unwrap();
}

/// `inference.tokenizer` as ESM-2's vocabulary file, end to end: the vectors stored for
/// protein sequences are the ESM-shaped model's answers for the ids fair-esm gives them
/// (`tests/data/tokenizers/golden.json`), each run alone, though the job ran them in padded
/// batches; a sequence fair-esm refuses fails its job with the characters that are no token.
async fn an_esm_vocabulary_feeds_the_model_the_ids_fair_esm_gives(backend: Backend) {
    let models = Models::new();
    let model = models.path("esm.pt");
    esm_shaped_model(&model);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers");
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(data.join("golden.json")).unwrap()).unwrap();
    let esm = &golden["esm2"];
    let name = |key: &str| esm[key].as_str().unwrap().to_owned();
    let tokenizer = yardmaster::inference::settings::TokenizerSettings {
        kind: "vocabulary".into(),
        file: data.join("esm2-vocab.txt").display().to_string(),
        pad: name("pad"),
        start: name("start"),
        end: name("end"),
        unknown: String::new(),
    };
    let inference = InferenceSettings { tokenizer, batch_size: 4, ..settings(&model) };
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let (mut inputs, mut ids, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for (sequence, want) in golden["sequences"].as_array().unwrap().iter().zip(esm["ids"].as_array().unwrap()) {
        let sequence = sequence.as_str().unwrap().to_owned();
        match want.as_array() {
            Some(want) => {
                inputs.push(sequence);
                ids.push(want.iter().map(|id| id.as_i64().unwrap()).collect::<Vec<i64>>());
            }
            None => refused.push(sequence),
        }
    }
    let body = json!({ "operation": "compute_embeddings", "payload": { "set": "esm", "inputs": inputs } });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let items = stored_items(&app, "esm", 100).await;
    assert_eq!(items.len(), inputs.len());
    let module = CModule::load(&model).unwrap();
    for (at, want_ids) in ids.iter().enumerate() {
        let tensor = Tensor::from_slice(want_ids).reshape([1, want_ids.len() as i64]);
        let want = tch::no_grad(|| module.forward_ts(&[tensor]).unwrap()).flatten(0, -1);
        let want = Vec::<f32>::try_from(&want).unwrap();
        let differs = max_difference(&vector(&items[at]["vector"]), &want);
        assert!(differs <= tolerance(1e-5), "{:?}: differs by {differs}", inputs[at]);
    }
    assert!(!refused.is_empty(), "the golden file holds a sequence fair-esm refuses");
    let body = json!({ "operation": "compute_embeddings", "payload": { "inputs": refused } });
    let (_, job) = app.submit(body).await;
    let failed = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(30)).await;
    assert_eq!(failed["error_code"], "InvalidInput", "{failed}");
    assert!(failed["error_message"].as_str().unwrap().contains("is not in the vocabulary"), "{failed}");
}

/// A tokenizer file that cannot be read leaves the inference operations refused, with the
/// reason, and the rest of the service serving.
async fn an_unreadable_tokenizer_refuses_the_operations_with_the_reason(backend: Backend) {
    let models = Models::new();
    let tokenizer = yardmaster::inference::settings::TokenizerSettings {
        kind: "huggingface".into(),
        file: models.file("tokenizer.json", b"{ not json").display().to_string(),
        ..Default::default()
    };
    let inference = InferenceSettings { tokenizer, ..settings(&models.default_model()) };
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let (code, problem) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "inputs": ["MKV"] } })).await;
    assert_eq!((code, problem["code"].as_str()), (422, Some("operation_unavailable")), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("as a tokenizer.json"), "{problem}");
    let (code, job) = app.submit(json!({ "operation": "ping", "payload": {} })).await;
    assert_eq!(code, 201, "{job}");
}

/// `yardmaster inference check` names the device the actor would pick (whatever this host
/// has), libtorch's version, and times the configured model; a missing model fails it with
/// the command that writes one.
#[test]
fn inference_check_reports_the_device_and_times_the_model() {
    let models = Models::new();
    let check = |model: &Path, half: bool| {
        std::process::Command::new(env!("CARGO_BIN_EXE_yardmaster"))
            .args(["inference", "check"])
            .env("YARDMASTER__INFERENCE__MODEL", model)
            .env("YARDMASTER__INFERENCE__BATCH_SIZE", "8")
            .env("YARDMASTER__INFERENCE__HALF", half.to_string())
            .output()
            .unwrap()
    };
    let output = check(&models.default_model(), false);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let gpu = tch::Cuda::is_available();
    let expected = if gpu { "cuda:0" } else { "cpu" };
    assert!(printed.contains(&format!("device: {expected} (inference.device = auto)")), "{printed}");
    assert!(printed.contains("precision: float32 (inference.half = false)"), "{printed}");
    let libtorch = printed.lines().find(|line| line.starts_with("libtorch: ")).unwrap_or_default();
    assert!(libtorch.starts_with("libtorch: 2."), "libtorch's version is read: {printed}");
    let forward = printed.lines().find(|line| line.starts_with("forward: ")).unwrap_or_default();
    assert!(forward.starts_with("forward: 8 inputs × 128 tokens, vectors of 128:"), "{printed}");
    assert!(forward.ends_with("inputs/s"), "{printed}");

    // Half precision is for GPUs: the CPU keeps float32, and the model still answers.
    let half = check(&models.default_model(), true);
    let printed = String::from_utf8_lossy(&half.stdout);
    assert!(half.status.success(), "{half:?}");
    let precision = if gpu { "float16" } else { "float32" };
    assert!(printed.contains(&format!("precision: {precision} (inference.half = true)")), "{printed}");

    let missing = check(&models.path("missing.pt"), false);
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("does not exist (yardmaster model init writes the default)"), "{said}");
}

/// A set of at least `index.min_items` gets its HNSW index once its job succeeds (the
/// `embeddings.index` job it submitted, after it); searches then say `hnsw` and find what
/// exact ranking finds, labelled items only for `transfer_annotations`. The index is kept
/// with the set: a process without the file fetches it from the store. On a PostgreSQL
/// server with pgvector the index is pgvector's (`pgvector`), one table per set, nothing
/// fetched; elsewhere the build says why not. A smaller set says `exact`.
async fn a_large_set_is_searched_through_its_index(backend: Backend) {
    let models = Models::new();
    let mut inference = settings(&models.default_model());
    inference.index.min_items = 150;
    // The default model's vectors are all alike (cosine about 0.97 between any two), where
    // an approximate search may trade a near tie, and where usearch's pruning of a full list
    // of links leaves an item no link leads to (at connectivity 32, 2 of 3 builds of 300 such
    // vectors did). So this graph keeps every link: its base layer holds 2 × 256 per item,
    // more than the set has, and usearch prunes only a full list, so each item stays linked
    // both ways to the items it was linked to when added. Searched whole (its candidate list
    // outgrows the set) at full precision, it must answer as brute force does. Recall at the
    // defaults is `neighbour_index`'s test.
    inference.index.precision = "f32".into();
    inference.index.connectivity = 256;
    inference.index.expansion_add = 512;
    inference.index.expansion_search = 4096;
    let dir = PathBuf::from(&inference.index.dir);
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let sql = |text: String| sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, text);
    // What a build that crashed before publishing leaves: its table, registered to the set.
    let orphan = uuid::Uuid::new_v4().simple().to_string();
    if backend == Backend::Pgvector {
        for text in [
            format!("INSERT INTO embedding_pgvector_build (build, set_name, created_at) VALUES ('{orphan}', 'default:large', now())"),
            format!("CREATE TABLE embedding_vectors_{orphan} (item bigint)"),
        ] {
            sea_orm::ConnectionTrait::execute_raw(&app.db, sql(text)).await.unwrap();
        }
    }
    let inputs: Vec<String> = (0..300).map(|i| sequence(900 + i, 24 + i % 17)).collect();
    let labels: Vec<Vec<String>> =
        (0..300).map(|i| if i % 2 == 0 { vec![format!("GO:{}", i % 7)] } else { Vec::new() }).collect();
    let body =
        json!({ "operation": "compute_embeddings", "payload": { "set": "large", "inputs": inputs, "labels": labels } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (code, page) = app.get("/jobs?operation=embeddings.index").await;
    assert_eq!(code, 200, "{page}");
    let index_job = page["jobs"][0]["id"].as_str().expect("the set's index build was submitted").to_owned();
    let built = wait_for_end(&app, &index_job, Duration::from_secs(60)).await;
    assert_eq!(built["status"], "succeeded", "{built}");
    let method = if backend == Backend::Pgvector { "pgvector" } else { "hnsw" };
    assert_eq!(
        (built["result"]["method"].as_str(), built["result"]["built"].as_bool()),
        (Some(method), Some(true)),
        "{built}"
    );
    let why_not = built["result"]["why_not_pgvector"].as_str().unwrap_or_default().to_owned();
    match backend {
        Backend::Pgvector => {
            assert!(built["result"]["pgvector"].as_str().is_some_and(|v| v.starts_with("0.")), "{built}")
        }
        Backend::Sqlite => assert_eq!(why_not, "the store is SQLite", "{built}"),
        _ => assert!(why_not.contains("does not offer the vector extension"), "{built}"),
    }

    let stored = stored_items(&app, "large", 500).await;
    let queries: Vec<String> = vec![inputs[40].clone(), sequence(5, 30), sequence(6, 40), inputs[299].clone()];
    let vectors = direct(&models.path("default.pt"), &queries);
    let exact =
        |query: &[f32], labelled_only: bool| brute_force(&stored, query, 5, |item| !labelled_only || item % 2 == 0);
    let items_of = |answer: &Value| -> Vec<i64> {
        answer["neighbours"].as_array().unwrap().iter().map(|n| n["item"].as_i64().unwrap()).collect()
    };
    // The builder's process has the file; without it, the index is fetched from the store.
    if backend != Backend::Pgvector {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let body = json!({ "operation": "nearest_neighbours", "payload": { "set": "large", "queries": queries, "k": 5 } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"]["method"], method, "{}", done["result"]);
    let answers = done["result"]["queries"].as_array().unwrap();
    for (answer, query) in answers.iter().zip(&vectors) {
        assert_eq!(items_of(answer), exact(query, false), "{answer}");
    }
    assert!((answers[0]["neighbours"][0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-4, "{}", answers[0]);
    let fetched = std::fs::read_dir(&dir)
        .map(|dir| dir.filter_map(Result::ok).map(|entry| entry.file_name()).collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(fetched.len(), usize::from(backend != Backend::Pgvector), "{fetched:?}");

    let body =
        json!({ "operation": "transfer_annotations", "payload": { "set": "large", "queries": queries, "k": 5 } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"]["method"], method, "{}", done["result"]);
    for (answer, query) in done["result"]["queries"].as_array().unwrap().iter().zip(&vectors) {
        assert_eq!(items_of(answer), exact(query, true), "labelled items only: {answer}");
    }
    if backend == Backend::Pgvector {
        // One table, the current build's: publishing it dropped the crashed build's.
        let tables = "SELECT tablename FROM pg_tables WHERE tablename LIKE 'embedding_vectors_%'";
        let tables = sea_orm::ConnectionTrait::query_all_raw(&app.db, sql(tables.into())).await.unwrap();
        let tables: Vec<String> = tables.iter().map(|row| row.try_get("", "tablename").unwrap()).collect();
        let build = built["result"]["build"].as_str().unwrap().replace('-', "");
        assert_eq!(tables, [format!("embedding_vectors_{build}")]);
    }

    let small: Vec<String> = inputs[..20].to_vec();
    let (_, job) =
        app.submit(json!({ "operation": "compute_embeddings", "payload": { "set": "small", "inputs": small } })).await;
    wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    let body =
        json!({ "operation": "nearest_neighbours", "payload": { "set": "small", "queries": [inputs[3]], "k": 2 } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(
        (done["status"].as_str(), done["result"]["method"].as_str()),
        (Some("succeeded"), Some("exact")),
        "{done}"
    );

    // Asked again, the build finds the index current; another room has no such set.
    let (_, job) = app.submit(json!({ "operation": "embeddings.index", "payload": { "set": "large" } })).await;
    let again = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(
        (again["status"].as_str(), again["result"]["built"].as_bool()),
        (Some("succeeded"), Some(false)),
        "{again}"
    );
    let body = json!({ "operation": "embeddings.index", "room": "elsewhere", "payload": { "set": "large" } });
    let (_, job) = app.submit(body).await;
    let failed = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(failed["error_code"], "UnknownSet", "{failed}");
}

/// A large set whose index cannot be built (its directory is a file here) is searched
/// exactly, page by page: `method` says `exact`, the neighbours are the brute-force ones,
/// labelled items only for `transfer_annotations`; the failed build is in the job list.
async fn a_large_set_without_its_index_is_ranked_exactly(backend: Backend) {
    let models = Models::new();
    let mut inference = settings(&models.default_model());
    inference.index.min_items = 50;
    std::fs::write(&inference.index.dir, b"not a directory").unwrap();
    let app = TestApp::spawn_with(backend, inference_options(inference)).await;
    let inputs: Vec<String> = (0..120).map(|i| sequence(1300 + i, 20 + i % 13)).collect();
    let labels: Vec<Vec<String>> =
        (0..120).map(|i| if i % 3 == 0 { vec!["GO:3".to_owned()] } else { Vec::new() }).collect();
    let body = json!({ "operation": "compute_embeddings", "payload": { "set": "unindexed", "inputs": inputs, "labels": labels } });
    let (_, job) = app.submit(body).await;
    let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, page) = app.get("/jobs?operation=embeddings.index").await;
    let index_job = page["jobs"][0]["id"].as_str().expect("the set's index build was submitted").to_owned();
    let failed = wait_for_end(&app, &index_job, Duration::from_secs(60)).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error_code"].as_str()),
        (Some("failed"), Some("IndexFailed")),
        "{failed}"
    );

    let stored = stored_items(&app, "unindexed", 500).await;
    let queries: Vec<String> = vec![inputs[7].clone(), sequence(77, 33)];
    let vectors = direct(&models.path("default.pt"), &queries);
    let brute = |query: &[f32], every: i64| brute_force(&stored, query, 4, |item| item % every == 0);
    for (operation, every) in [("nearest_neighbours", 1), ("transfer_annotations", 3)] {
        let body = json!({ "operation": operation, "payload": { "set": "unindexed", "queries": queries, "k": 4 } });
        let (_, job) = app.submit(body).await;
        let done = wait_for_end(&app, job["id"].as_str().unwrap(), Duration::from_secs(60)).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["result"]["method"], "exact", "{operation}: {}", done["result"]);
        for (answer, query) in done["result"]["queries"].as_array().unwrap().iter().zip(&vectors) {
            let got: Vec<i64> =
                answer["neighbours"].as_array().unwrap().iter().map(|n| n["item"].as_i64().unwrap()).collect();
            assert_eq!(got, brute(query, every), "{operation}: {answer}");
        }
    }
}

on_both_backends!(
    a_large_set_without_its_index_is_ranked_exactly,
    a_large_set_is_searched_through_its_index,
    labels_given_later_replace_an_items_labels,
    transfer_annotations_gives_a_query_its_family_labels,
    an_esm_vocabulary_feeds_the_model_the_ids_fair_esm_gives,
    an_unreadable_tokenizer_refuses_the_operations_with_the_reason,
    from_set_embeds_a_stored_set_again,
    compute_embeddings_stores_a_vector_per_input,
    nearest_neighbours_finds_the_known_nearest,
    two_jobs_share_a_full_actor_through_retry_later,
    a_corrupt_model_fails_the_job_and_the_service_goes_on,
    refused_inputs_and_taken_sets_fail_with_their_codes,
    hostile_input_gets_clear_problems,
);

/// PostgreSQL with pgvector.
mod pgvector {
    use crate::helpers::Backend;

    #[actix_rt::test]
    async fn a_large_set_is_searched_through_its_index() {
        super::a_large_set_is_searched_through_its_index(Backend::Pgvector).await
    }
}

/// Production's shape: an API process, a worker for jobs and writes, and the batch worker
/// that holds the model in a process of its own, over PostgreSQL and RabbitMQ.
mod amqp {
    use std::time::{Duration, Instant};

    use sea_orm::Database;
    use serde_json::{json, Value};

    use super::{sequence, Models};
    use crate::amqp_processes::{count, free_port, wait_for_count, Deployment, Process};
    use crate::helpers::{eventually, Backend, TestDatabase};

    struct Fleet {
        deployment: Deployment,
        bind: String,
        env: Vec<(&'static str, String)>,
        _api: Process,
        _jobs: Process,
    }

    impl Fleet {
        async fn start(url: &str, model: &std::path::Path, batch_size: usize) -> Fleet {
            let deployment = Deployment::new(url);
            let bind = format!("127.0.0.1:{}", free_port());
            let env = vec![
                ("YARDMASTER__INFERENCE__MODEL", model.display().to_string()),
                ("YARDMASTER__INFERENCE__BATCH_SIZE", batch_size.to_string()),
                ("YARDMASTER__INFERENCE__DEVICE", super::test_device()),
            ];
            let extra: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
            let api = deployment.spawn(&["serve", "--no-workers", "--bind", &bind], &extra);
            let client = deployment.client();
            eventually("the API came up", Duration::from_secs(60), || async {
                client.get(format!("http://{bind}/healthz")).send().await.is_ok().then_some(())
            })
            .await;
            let jobs = deployment.spawn(&["worker", "--queue", "default", "--queue", "batch_writes"], &extra);
            Fleet { deployment, bind, env, _api: api, _jobs: jobs }
        }

        /// A worker of the inference queue only: the process that loads the model.
        fn batch_worker(&self, id: &str) -> Process {
            let mut extra: Vec<(&str, &str)> = self.env.iter().map(|(key, value)| (*key, value.as_str())).collect();
            extra.push(("YARDMASTER__WORKER__ID", id));
            self.deployment.spawn(&["worker", "--queue", "inference"], &extra)
        }

        async fn submit(&self, body: Value) -> Value {
            let response = self.deployment.client().post(format!("http://{}/jobs", self.bind)).json(&body).send().await;
            let (code, job) = crate::helpers::read(response.unwrap()).await;
            assert_eq!(code, 201, "{job}");
            job
        }

        async fn get(&self, path: &str) -> Value {
            let response = self.deployment.client().get(format!("http://{}{path}", self.bind)).send().await.unwrap();
            crate::helpers::read(response).await.1
        }
    }

    /// 1,000 inputs, the batches run by a worker process of their own.
    #[actix_rt::test]
    async fn a_batch_worker_in_another_process_embeds_a_thousand_inputs() {
        let models = Models::new();
        let model = models.default_model();
        let (_database, url) = TestDatabase::create(Backend::Postgres).await;
        let fleet = Fleet::start(&url, &model, 64).await;
        let _gpu = fleet.batch_worker("gpu");
        let inputs: Vec<String> = (0..1000).map(|i| sequence(i, 20 + i % 40)).collect();
        let job = fleet
            .submit(json!({ "operation": "compute_embeddings", "payload": { "set": "far", "inputs": inputs } }))
            .await;
        let db = Database::connect(&url).await.unwrap();
        wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 1, Duration::from_secs(120)).await;
        let done = fleet.get(&format!("/jobs/{}", job["id"].as_str().unwrap())).await;
        assert_eq!(
            (done["progress_current"].as_i64(), done["progress_total"].as_i64()),
            (Some(16), Some(16)),
            "{done}"
        );
        assert_eq!(done["result"]["count"], 1000, "{done}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM embedding WHERE set_name = 'default:far'").await, 1000);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM embedding WHERE length(vector) <> 512").await, 0);
    }

    /// The batch worker is killed (SIGKILL) with batches in flight; another takes over.
    /// Every input ends stored once, every batch counted once, the job SUCCEEDED.
    #[actix_rt::test]
    async fn a_batch_worker_killed_mid_run_loses_nothing_and_writes_nothing_twice() {
        let models = Models::new();
        let model = models.default_model();
        let (_database, url) = TestDatabase::create(Backend::Postgres).await;
        let fleet = Fleet::start(&url, &model, 10).await;
        let mut first = fleet.batch_worker("first");
        // Long inputs: each batch of 10 takes a noticeable forward pass.
        let inputs: Vec<String> = (0..200).map(|i| sequence(i, 500)).collect();
        let job = fleet
            .submit(json!({ "operation": "compute_embeddings", "payload": { "set": "killed", "inputs": inputs } }))
            .await;
        let db = Database::connect(&url).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while count(&db, "SELECT COUNT(*) FROM embedding").await == 0 {
            assert!(Instant::now() < deadline, "no batch was ever stored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        first.0.kill().unwrap();
        first.0.wait().unwrap();
        let stored_at_kill = count(&db, "SELECT COUNT(*) FROM embedding").await;
        assert!(stored_at_kill < 200, "the run finished before the kill: nothing was tested");

        let _second = fleet.batch_worker("second");
        wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 1, Duration::from_secs(120)).await;
        let id = job["id"].as_str().unwrap();
        assert_eq!(count(&db, "SELECT COUNT(*) FROM embedding WHERE set_name = 'default:killed'").await, 200);
        assert_eq!(
            count(&db, "SELECT COUNT(DISTINCT item) FROM embedding WHERE set_name = 'default:killed'").await,
            200
        );
        let batches = format!("SELECT COUNT(*) FROM job_batch WHERE parent_job_id = '{id}'");
        assert_eq!(count(&db, &batches).await, 20);
        let done = fleet.get(&format!("/jobs/{id}")).await;
        assert_eq!(
            (done["progress_current"].as_i64(), done["result"]["count"].as_i64()),
            (Some(20), Some(200)),
            "{done}"
        );
    }
}
