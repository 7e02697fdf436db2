//! The inference actor: one TorchScript model per process, run by threads of the actor's own
//! (a `SyncArbiter` of `inference.passes`), so a forward pass never blocks the async runtime,
//! and on the CPU two passes on their own cores do not wait at each other's kernels.
//!
//! The model is loaded once, by the first of those threads, when the first batch asks for
//! it, onto CUDA when the configuration allows and a GPU is there, else the CPU, and the log
//! says which. A model that cannot be loaded answers every request with `ModelUnavailable`
//! (loading is tried again at most every [`RELOAD_AFTER`]); the process goes on serving
//! everything else.
//!
//! The mailbox is bounded by [`Inference`]: a request that finds `mailbox` batches already
//! accepted is answered `Busy` at once, never queued, so its batch can wait off the queue
//! (RetryLater) instead of holding a worker's slot.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix::{Actor, Addr, Handler, Message, SyncArbiter, SyncContext};
use tch::{CModule, Device, Kind, Tensor};
use tokio::sync::Semaphore;
use tracing::{error, info};

use super::settings::InferenceSettings;
use super::tokenizer::Tokens;

/// How long a model that failed to load is taken as unavailable before loading is tried again.
pub const RELOAD_AFTER: Duration = Duration::from_secs(10);

/// Why a batch got no vectors. Each has its own stable error code ([`InferenceError::code`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferenceError {
    /// The actor has `mailbox` batches already: try again later.
    #[error("the inference actor is busy")]
    Busy,
    /// The model file is missing, unreadable or not TorchScript, or the device is absent.
    #[error("{0}")]
    ModelUnavailable(String),
    /// The model refused the input, or answered with something other than `[batch, dim]`.
    #[error("{0}")]
    ShapeMismatch(String),
    /// The model answered NaN or infinity.
    #[error("{0}")]
    NonFinite(String),
    /// Anything else libtorch reported.
    #[error("{0}")]
    Failed(String),
}

impl InferenceError {
    pub fn code(&self) -> &'static str {
        match self {
            InferenceError::Busy => "InferenceBusy",
            InferenceError::ModelUnavailable(_) => "ModelUnavailable",
            InferenceError::ShapeMismatch(_) => "ModelShapeMismatch",
            InferenceError::NonFinite(_) => "NonFiniteOutput",
            InferenceError::Failed(_) => "InferenceFailed",
        }
    }
}

/// Vectors for a batch, a row per input, with what made them.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    /// The model file's name.
    pub model: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
}

/// Embed one batch of tokens.
#[derive(Message)]
#[rtype(result = "Result<Embedded, InferenceError>")]
pub struct Embed(pub Tokens);

/// Runs forward passes on a thread of its own; the model is shared by every such thread.
pub struct InferenceActor {
    model: Arc<SharedModel>,
}

/// The one model the actor's threads share: loaded by the first thread to need it (the
/// others wait for it), tried again at most every [`RELOAD_AFTER`] when it failed.
struct SharedModel {
    path: PathBuf,
    device: String,
    half: bool,
    loaded: Mutex<Option<Loading>>,
}

/// The model, or why it could not be loaded and when that was last tried.
type Loading = Result<Arc<Loaded>, (String, Instant)>;

/// A model loaded on its device.
pub(super) struct Loaded {
    module: CModule,
    pub(super) device: Device,
    /// The model's floating-point kind: `Float`, or `Half` on CUDA with `inference.half`.
    pub(super) precision: Kind,
    name: String,
}

impl Actor for InferenceActor {
    type Context = SyncContext<Self>;
}

impl SharedModel {
    fn new(settings: &InferenceSettings) -> SharedModel {
        SharedModel {
            path: PathBuf::from(&settings.model),
            device: settings.device.clone(),
            half: settings.half,
            loaded: Mutex::new(None),
        }
    }

    fn get(&self) -> Result<Arc<Loaded>, InferenceError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if matches!(&*loaded, Some(Err((_, at))) if at.elapsed() >= RELOAD_AFTER) {
            *loaded = None;
        }
        let current = loaded.get_or_insert_with(|| {
            load(&self.path, &self.device, self.half).map(Arc::new).map_err(|reason| (reason, Instant::now()))
        });
        current.clone().map_err(|(reason, _)| InferenceError::ModelUnavailable(reason))
    }
}

/// How many passes run at once and how many of libtorch's threads each gets (`None`:
/// libtorch's own choice), for `settings` with or without a GPU, on `cores` cores. `0`
/// runs as many passes as the mailbox holds batches, up to one a core, and shares the cores
/// among them: every core works whatever the mailbox (two passes of four threads on eight
/// cores with the default mailbox of two).
fn passes(settings: &InferenceSettings, on_gpu: bool, cores: usize) -> (usize, Option<i32>) {
    if on_gpu {
        return (settings.passes.max(1), None);
    }
    let cores = cores.max(1);
    let passes = match settings.passes {
        0 => settings.mailbox.clamp(1, cores),
        asked => asked,
    };
    match passes {
        1 => (1, None),
        _ => (passes, Some((cores / passes).max(1) as i32)),
    }
}

/// The passes and threads a pass this host runs `settings` with (see [`passes`]).
pub(super) fn plan(settings: &InferenceSettings) -> (usize, Option<i32>) {
    passes(settings, on_gpu(&settings.device), cores())
}

/// Whether `setting` puts the model on a GPU here.
fn on_gpu(setting: &str) -> bool {
    match setting {
        "cpu" => false,
        "cuda" => true,
        _ => tch::Cuda::is_available(),
    }
}

/// libtorch's default thread count, a thread per core, as it was before any pass set its
/// own share.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| tch::get_num_threads().max(1) as usize)
}

/// The device `setting` names: `cuda` insists on a GPU, `auto` takes one if present.
fn device(setting: &str) -> Result<Device, String> {
    match setting {
        "cpu" => Ok(Device::Cpu),
        "cuda" if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
        "cuda" => Err("inference.device is cuda, but no CUDA device is available".into()),
        _ => Ok(Device::cuda_if_available()),
    }
}

pub(super) fn device_name(device: Device) -> String {
    match device {
        Device::Cuda(n) => format!("cuda:{n}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
        Device::Cpu => "cpu".into(),
    }
}

/// Loads the model at `path` onto the device `setting` picks; in half precision when `half`
/// and that device is a GPU.
pub(super) fn load(path: &std::path::Path, setting: &str, half: bool) -> Result<Loaded, String> {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let loaded = device(setting).and_then(|device| {
        if !path.is_file() {
            return Err(format!(
                "model file {} does not exist (yardmaster model init writes the default)",
                path.display()
            ));
        }
        let mut module = std::panic::catch_unwind(|| CModule::load_on_device(path, device))
            .map_err(|_| format!("loading {} panicked", path.display()))?
            .map_err(|err| format!("cannot load model {}: {}", path.display(), first_line(&err.to_string())))?;
        let precision = match (half, device) {
            (true, Device::Cuda(_)) => Kind::Half,
            _ => Kind::Float,
        };
        if precision == Kind::Half {
            std::panic::catch_unwind(AssertUnwindSafe(|| module.to(device, Kind::Half, false)))
                .map_err(|_| format!("converting {} to half precision failed", path.display()))?;
        }
        Ok(Loaded { module, device, precision, name: name.clone() })
    });
    match &loaded {
        Ok(model) => info!(
            model = %path.display(),
            device = %device_name(model.device),
            precision = precision_name(model.precision),
            "inference model loaded"
        ),
        Err(reason) => error!(model = %path.display(), %reason, "inference model unavailable"),
    }
    loaded
}

/// `float32` or `float16`, as the log and `inference check` say it.
pub(super) fn precision_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Half => "float16",
        _ => "float32",
    }
}

/// libtorch's errors carry a C++ backtrace after the first line.
fn first_line(text: &str) -> &str {
    text.lines().find(|line| !line.trim().is_empty()).unwrap_or(text).trim()
}

/// The error under a TorchScript traceback (its last `…Error: …` line), else the first line.
fn cause(text: &str) -> &str {
    let raised = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.split_once(": ").is_some_and(|(kind, _)| kind.ends_with("Error") && !kind.contains(' ')));
    raised.unwrap_or_else(|| first_line(text))
}

/// Whether libtorch's message says the input does not fit the model (shape, type, or a
/// token id past the model's vocabulary), as opposed to a failure while running it.
fn refuses_input(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    ["shape", "size", "dimension", "expected", "scalar type", "dtype", "index out of range", "must match"]
        .iter()
        .any(|sign| reason.contains(sign))
}

impl Handler<Embed> for InferenceActor {
    type Result = Result<Embedded, InferenceError>;

    fn handle(&mut self, Embed(tokens): Embed, _: &mut SyncContext<Self>) -> Self::Result {
        let model = self.model.get()?;
        let model = model.as_ref();
        match std::panic::catch_unwind(AssertUnwindSafe(|| tch::no_grad(|| forward(model, &tokens)))) {
            Ok(answer) => {
                answer.map(|vectors| Embedded { vectors, model: model.name.clone(), device: device_name(model.device) })
            }
            Err(_) => Err(InferenceError::Failed("the forward pass panicked".into())),
        }
    }
}

pub(super) fn forward(model: &Loaded, tokens: &Tokens) -> Result<Vec<Vec<f32>>, InferenceError> {
    let failed = |err: tch::TchError| InferenceError::Failed(first_line(&err.to_string()).to_owned());
    let (rows, columns) = (tokens.rows as i64, tokens.columns as i64);
    let input = Tensor::f_from_slice(&tokens.ids)
        .and_then(|ids| ids.f_reshape([rows, columns]))
        .and_then(|ids| ids.f_to_device(model.device))
        .map_err(failed)?;
    let output = model.module.forward_ts(&[input]).map_err(|err| {
        let text = err.to_string();
        tracing::warn!(model = %model.name, error = %text, "forward pass failed");
        let reason = cause(&text);
        if refuses_input(reason) {
            InferenceError::ShapeMismatch(format!("the model refused int64 [{rows}, {columns}] token ids: {reason}"))
        } else {
            InferenceError::Failed(format!("the forward pass failed: {reason}"))
        }
    })?;
    let size = output.size();
    if size.len() != 2 || size[0] != rows || size[1] < 1 {
        return Err(InferenceError::ShapeMismatch(format!(
            "the model answered shape {size:?} for {rows} inputs; the contract is [{rows}, dim]"
        )));
    }
    let flat = output
        .f_to_kind(Kind::Float)
        .and_then(|out| out.f_to_device(Device::Cpu))
        .and_then(|out| out.f_contiguous())
        .and_then(|out| out.f_flatten(0, -1))
        .map_err(failed)?;
    let values = Vec::<f32>::try_from(&flat).map_err(failed)?;
    if let Some(at) = values.iter().position(|value| !value.is_finite()) {
        let input = at / size[1] as usize;
        return Err(InferenceError::NonFinite(format!(
            "the model answered a non-finite value for input {input} of the batch"
        )));
    }
    Ok(values.chunks(size[1] as usize).map(<[f32]>::to_vec).collect())
}

/// A process's way to the inference actor; cheap to clone. The actor starts, and loads its
/// model, when the first batch asks.
#[derive(Clone)]
pub struct Inference {
    inner: Arc<Inner>,
}

struct Inner {
    settings: InferenceSettings,
    actor: OnceLock<Addr<InferenceActor>>,
    /// One per batch the actor may hold: the bounded mailbox.
    mailbox: Arc<Semaphore>,
}

impl Inference {
    pub fn new(settings: InferenceSettings) -> Inference {
        let mailbox = Arc::new(Semaphore::new(settings.mailbox.max(1)));
        Inference { inner: Arc::new(Inner { settings, actor: OnceLock::new(), mailbox }) }
    }

    pub fn settings(&self) -> &InferenceSettings {
        &self.inner.settings
    }

    /// Must be called inside an actix `System` (the consumers' runtime).
    fn actor(&self) -> &Addr<InferenceActor> {
        self.inner.actor.get_or_init(|| {
            keep_tensor_memory();
            let settings = &self.inner.settings;
            let (passes, threads) = plan(settings);
            // A batch for every pass, at least.
            self.inner.mailbox.add_permits(passes.saturating_sub(settings.mailbox.max(1)));
            info!(passes, threads_per_pass = threads, "inference actor starting");
            let model = Arc::new(SharedModel::new(settings));
            SyncArbiter::start(passes, move || {
                if let Some(threads) = threads {
                    // This thread's share of the cores: its passes' kernels run on it alone
                    // (one thread) or on a team of this size. libtorch also keeps the count
                    // for threads that first use it later; only the actor's threads run
                    // libtorch in a process.
                    tch::set_num_threads(threads);
                }
                // Loaded as the actor starts (the first thread; the rest wait for it), so
                // the log says which device at once.
                let _ = model.get();
                InferenceActor { model: model.clone() }
            })
        })
    }

    /// Vectors for `tokens`, or [`InferenceError::Busy`] at once when the mailbox is full.
    pub async fn embed(&self, tokens: Tokens) -> Result<Embedded, InferenceError> {
        // Started first: starting sizes the mailbox to the passes.
        let actor = self.actor();
        let _accepted = self.inner.mailbox.clone().try_acquire_owned().map_err(|_| InferenceError::Busy)?;
        actor
            .send(Embed(tokens))
            .await
            .map_err(|err| InferenceError::Failed(format!("the inference actor is gone: {err}")))?
    }
}

/// Lets freed tensor memory be reused instead of handed back to the kernel after every
/// forward pass. A pass allocates and frees buffers of megabytes; by default glibc serves
/// those of a thread other than the main one with fresh `mmap`s and returns them at once, so
/// every pass faults in and zeroes its memory anew (a third of the CPU time in a profile of
/// the default model). Below 32 MiB a buffer now comes from the allocator's heap, which
/// keeps up to 256 MiB of freed memory. Process-wide; called once, when a process starts its
/// inference actor, so processes without one keep glibc's defaults.
pub fn keep_tensor_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes the allocator's thresholds; any values are valid.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_share_the_cores_and_a_gpu_takes_one() {
        let asked = |passes: usize| InferenceSettings { passes, ..InferenceSettings::default() };
        // The default mailbox holds two batches.
        assert_eq!(passes(&asked(0), false, 2), (2, Some(1)));
        assert_eq!(passes(&asked(0), false, 8), (2, Some(4)));
        assert_eq!(passes(&asked(0), false, 1), (1, None));
        let roomy = InferenceSettings { mailbox: 16, ..InferenceSettings::default() };
        assert_eq!(passes(&roomy, false, 8), (8, Some(1)));
        assert_eq!(passes(&asked(2), false, 8), (2, Some(4)));
        assert_eq!(passes(&asked(4), false, 2), (4, Some(1)));
        assert_eq!(passes(&asked(1), false, 8), (1, None));
        assert_eq!(passes(&asked(0), true, 8), (1, None));
        assert_eq!(passes(&asked(3), true, 8), (3, None));
    }

    #[test]
    fn the_cause_under_a_torchscript_traceback_is_reported() {
        let text = "Internal torch error: The following operation failed in the TorchScript interpreter.\n\
                    Traceback of TorchScript (most recent call last):\n  graph(%x):\n    ~~~ <--- HERE\n\
                    RuntimeError: index out of range in self\n";
        assert_eq!(cause(text), "RuntimeError: index out of range in self");
        assert!(refuses_input(cause(text)));
        assert_eq!(cause("plain failure\nException raised from x"), "plain failure");
        assert!(!refuses_input("RuntimeError: could not create a primitive"));
    }
}
