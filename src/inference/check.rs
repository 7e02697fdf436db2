//! `yardmaster inference check`: what this host would run the model on (the device, libtorch's
//! and CUDA's versions) and a timed forward pass of the configured model, with the same
//! loading, tokeniser and contract as the inference actor, before a worker is started with it.

use std::path::PathBuf;
use std::time::Instant;

use super::actor::{device_name, forward, load, plan, precision_name};
use super::settings::InferenceSettings;
use super::tokenizer::Tokenizer;

/// Timed passes after one warm-up pass.
const PASSES: usize = 5;
/// Residues of each sample input: protein-like, within `inference.max_tokens`.
const SAMPLE_LENGTH: usize = 128;
const ALPHABET: &[u8] = b"ACDEFGHIKLMNPQRSTVWY";

/// Prints the report; the exit code is 0 when the model loaded and answered by the contract.
pub fn run(settings: &InferenceSettings) -> anyhow::Result<i32> {
    println!("libtorch: {}", libtorch_version());
    println!("CUDA: {}", cuda());
    println!("threads: {}", tch::get_num_threads());
    let (passes, threads) = plan(settings);
    let each = threads.map_or_else(|| "libtorch's threads".to_owned(), |threads| format!("{threads} thread(s)"));
    println!("passes: {passes} at once, {each} each (inference.passes = {})", settings.passes);
    if let Some(threads) = threads {
        // The pass timed below runs on one pass's share, as the actor's do.
        tch::set_num_threads(threads);
    }
    let started = Instant::now();
    let model = load(&PathBuf::from(&settings.model), &settings.device, settings.half).map_err(anyhow::Error::msg)?;
    println!("device: {} (inference.device = {})", device_name(model.device), settings.device);
    println!("precision: {} (inference.half = {})", precision_name(model.precision), settings.half);
    println!("model: {} (loaded in {:.0} ms)", settings.model, started.elapsed().as_secs_f64() * 1e3);
    let tokenizer = Tokenizer::from_settings(settings).map_err(anyhow::Error::msg)?;
    println!("tokenizer: {}", settings.tokenizer.kind);
    // Residues, leaving room for the tokeniser's own tokens (start, end) within max_tokens.
    let own = tokenizer.check(0, "A").map_or(0, |tokens| tokens.saturating_sub(1));
    let length = SAMPLE_LENGTH.min(settings.max_tokens.saturating_sub(own)).max(1);
    let inputs: Vec<String> = (0..settings.batch_size).map(|n| sample(n, length)).collect();
    let tokens = tokenizer.encode(0, &inputs)?;
    let pass = || tch::no_grad(|| forward(&model, &tokens)).map_err(|err| anyhow::anyhow!("{err}"));
    let vectors = pass()?;
    let mut times = Vec::with_capacity(PASSES);
    for _ in 0..PASSES {
        let started = Instant::now();
        pass()?;
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[PASSES / 2];
    println!(
        "forward: {} inputs × {} tokens, vectors of {}: {:.1} ms a pass (median of {PASSES}), {:.0} inputs/s",
        inputs.len(),
        tokens.columns,
        vectors.first().map_or(0, Vec::len),
        median * 1e3,
        inputs.len() as f64 / median
    );
    Ok(0)
}

/// A deterministic protein-like sequence.
fn sample(seed: usize, length: usize) -> String {
    (0..length).map(|at| ALPHABET[(seed * 7 + at * 13) % ALPHABET.len()] as char).collect()
}

/// libtorch's version, from the `build-version` file beside the library this process loaded
/// (`scripts/libtorch.sh` writes it, as libtorch's own archives carry it).
fn libtorch_version() -> String {
    let Some(library) = loaded(|name| name.starts_with("libtorch_cpu.") || name.starts_with("libtorch.")) else {
        return "unknown (libtorch is not among the loaded libraries)".into();
    };
    let root = PathBuf::from(&library).parent().and_then(|lib| lib.parent()).map(PathBuf::from).unwrap_or_default();
    match std::fs::read_to_string(root.join("build-version")) {
        Ok(version) => format!("{} ({})", version.trim(), root.display()),
        Err(_) => format!("unknown version ({library}: no build-version beside it)"),
    }
}

/// The path of the first library this process has mapped whose file name `matches`.
fn loaded(matches: impl Fn(&str) -> bool) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.rsplit('/').next().is_some_and(&matches))
        .map(str::to_owned)
}

/// Whether libtorch has CUDA (its CUDA library loaded) and, if it sees a GPU, the versions
/// and devices. libtorch itself says "no CUDA" for both a CPU build and a CUDA build on a
/// host without a GPU; the loaded library tells them apart.
fn cuda() -> String {
    if loaded(|name| name.starts_with("libtorch_cuda.")).is_none() {
        return "not built in (a CPU libtorch)".into();
    }
    if !tch::utils::has_cuda() {
        return "built in, but no CUDA device is visible to this process (no GPU, no driver, or no device nodes)"
            .into();
    }
    let devices = tch::Cuda::device_count();
    let runtime = tch::utils::version_cudart();
    format!(
        "runtime {}.{}, cuDNN {}, {devices} device(s)",
        runtime / 1000,
        (runtime % 1000) / 10,
        tch::utils::version_cudnn(),
    )
}
