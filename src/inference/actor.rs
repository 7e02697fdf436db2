//! The inference actor: one TorchScript model per process, on a thread of its own (a
//! `SyncArbiter` of one), so a forward pass never blocks the async runtime.
//!
//! The model is loaded on that thread when the first batch asks for it, onto CUDA when the
//! configuration allows and a GPU is there, else the CPU, and the log says which. A model
//! that cannot be loaded answers every request with `ModelUnavailable` (loading is tried
//! again at most every [`RELOAD_AFTER`]); the process goes on serving everything else.
//!
//! The mailbox is bounded by [`Inference`]: a request that finds `mailbox` batches already
//! accepted is answered `Busy` at once, never queued, so its batch can wait off the queue
//! (RetryLater) instead of holding a worker's slot.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
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

/// Owns the model; runs on its own thread.
pub struct InferenceActor {
    path: PathBuf,
    device: String,
    half: bool,
    loaded: Result<Loaded, (String, Instant)>,
}

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

impl InferenceActor {
    /// Loads the model named by `settings` (on the calling thread: the actor's).
    pub fn load(settings: &InferenceSettings) -> InferenceActor {
        let path = PathBuf::from(&settings.model);
        let loaded = load(&path, &settings.device, settings.half).map_err(|reason| (reason, Instant::now()));
        InferenceActor { path, device: settings.device.clone(), half: settings.half, loaded }
    }

    fn model(&mut self) -> Result<&Loaded, InferenceError> {
        if let Err((_, at)) = &self.loaded {
            if at.elapsed() >= RELOAD_AFTER {
                self.loaded = load(&self.path, &self.device, self.half).map_err(|reason| (reason, Instant::now()));
            }
        }
        self.loaded.as_ref().map_err(|(reason, _)| InferenceError::ModelUnavailable(reason.clone()))
    }
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
        let model = self.model()?;
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
            let settings = self.inner.settings.clone();
            SyncArbiter::start(1, move || InferenceActor::load(&settings))
        })
    }

    /// Vectors for `tokens`, or [`InferenceError::Busy`] at once when the mailbox is full.
    pub async fn embed(&self, tokens: Tokens) -> Result<Embedded, InferenceError> {
        let _accepted = self.inner.mailbox.clone().try_acquire_owned().map_err(|_| InferenceError::Busy)?;
        self.actor()
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
