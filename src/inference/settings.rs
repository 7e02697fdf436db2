//! The `[inference]` settings: the model, its device and batches, the actor's mailbox, the
//! tokeniser, and the queues its batches travel on.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferenceSettings {
    /// The TorchScript model file: input int64 `[batch, tokens]` (token ids, padded with the
    /// tokeniser's pad id), output float `[batch, dim]`. `yardmaster model init` writes the default model there.
    pub model: String,
    /// `auto` (CUDA when available, else CPU), `cpu` or `cuda`.
    pub device: String,
    /// On CUDA, run the model in half precision (float16): about half the GPU memory and,
    /// on tensor cores, faster. Vectors still come back as float32. The CPU ignores it.
    pub half: bool,
    /// Most inputs per batch (one forward pass).
    pub batch_size: usize,
    /// Most tokens per batch, padding included (its inputs × its longest input): a job's
    /// inputs are sorted by length and cut by this and `batch_size`, so a batch pads little.
    pub max_batch_tokens: usize,
    /// Batches the inference actor accepts at once (running and waiting); a batch that
    /// finds it full is answered RetryLater and waits off the queue, never blocking a slot.
    pub mailbox: usize,
    /// How long a batch refused by a full actor waits before it is tried again.
    pub retry_after_ms: u64,
    /// Forward passes run at once, each on a thread of the actor's own, all on the one
    /// loaded model. On the CPU the passes share libtorch's threads equally (two passes of
    /// one core each on two cores); on a GPU one pass keeps it busy. `0`: on the CPU as many
    /// as `mailbox` holds, up to one a core; one on a GPU. The mailbox holds at least this
    /// many batches.
    #[serde(default)]
    pub passes: usize,
    /// The tokeniser (see `inference::tokenizer`).
    #[serde(default)]
    pub tokenizer: TokenizerSettings,
    /// The `characters` tokeniser's vocabulary: token ids are 1 to `vocab - 1`.
    pub vocab: u32,
    /// Longest input, in tokens (special tokens included); a longer one fails its job
    /// (`InvalidInput`).
    pub max_tokens: usize,
    /// The operations queue batches run on: consumed by the processes that hold the model.
    pub queue: String,
    /// The writes queue batch outcomes (the vectors) are stored from.
    pub write_queue: String,
    /// The neighbour index of large sets.
    #[serde(default)]
    pub index: IndexSettings,
}

/// `[inference.index]`: the HNSW index a set gets once whole, when it holds at least
/// `min_items` items; smaller sets (and a set whose index is not built yet) are ranked
/// exactly. A search says which it used (`"method"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexSettings {
    /// Sets of fewer items are not indexed: they are ranked exactly.
    pub min_items: u64,
    /// Where a process keeps the index files it fetched from the store, to map them.
    pub dir: String,
    /// How the index holds vectors: `f32`, `f16` (half the size; neighbours are scored
    /// again from the stored float32 vectors, so the scores stay exact) or `i8`.
    pub precision: String,
    /// HNSW links per node (M), and the candidate lists while building and searching
    /// (efConstruction, efSearch): higher finds more of the true neighbours, slower.
    pub connectivity: usize,
    pub expansion_add: usize,
    pub expansion_search: usize,
    /// `auto`: on a PostgreSQL server that offers the `vector` extension, a set's index is a
    /// pgvector HNSW index in the database (nothing to fetch; the settings above map onto
    /// pgvector's, within its limits); elsewhere, or with `off`, yardmaster's own file.
    pub pgvector: String,
}

impl Default for IndexSettings {
    fn default() -> Self {
        IndexSettings {
            min_items: 10_000,
            dir: "data/indexes".into(),
            precision: "f16".into(),
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 128,
            pgvector: "auto".into(),
        }
    }
}

/// `[inference.tokenizer]`: which scheme turns text into token ids, and its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenizerSettings {
    /// `characters` (the default), `vocabulary` or `huggingface`.
    pub kind: String,
    /// `vocabulary`: one token a line, its id the line's number from 0. `huggingface`: a
    /// `tokenizer.json`. A relative path is from the working directory.
    pub file: String,
    /// The padding token's name (`vocabulary`: required; `huggingface`: else the file's).
    pub pad: String,
    /// `vocabulary`: the tokens put before and after every input (empty: none), and the one
    /// a run of characters that are no token becomes (empty: such an input is refused).
    pub start: String,
    pub end: String,
    pub unknown: String,
}

impl Default for TokenizerSettings {
    fn default() -> Self {
        let none = String::new;
        TokenizerSettings {
            kind: "characters".into(),
            file: none(),
            pad: none(),
            start: none(),
            end: none(),
            unknown: none(),
        }
    }
}

impl Default for InferenceSettings {
    fn default() -> Self {
        InferenceSettings {
            model: "models/default.pt".into(),
            device: "auto".into(),
            half: false,
            tokenizer: TokenizerSettings::default(),
            batch_size: 64,
            max_batch_tokens: 16_384,
            mailbox: 2,
            passes: 0,
            retry_after_ms: 200,
            vocab: 4096,
            max_tokens: 512,
            queue: "inference".into(),
            write_queue: crate::ops::WRITE_QUEUE.into(),
            index: IndexSettings::default(),
        }
    }
}

impl InferenceSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            matches!(self.device.as_str(), "auto" | "cpu" | "cuda"),
            "inference.device must be auto, cpu or cuda"
        );
        anyhow::ensure!((1..=4096).contains(&self.batch_size), "inference.batch_size must be 1 to 4096");
        anyhow::ensure!((1..=1024).contains(&self.mailbox), "inference.mailbox must be 1 to 1024");
        anyhow::ensure!(self.passes <= 256, "inference.passes must be 0 (one a core) to 256");
        anyhow::ensure!((2..=1 << 24).contains(&self.vocab), "inference.vocab must be 2 to 16777216");
        anyhow::ensure!((1..=65_536).contains(&self.max_tokens), "inference.max_tokens must be 1 to 65536");
        anyhow::ensure!(
            (self.max_tokens..=1 << 24).contains(&self.max_batch_tokens),
            "inference.max_batch_tokens must be at least max_tokens ({}) and at most 16777216",
            self.max_tokens
        );
        anyhow::ensure!(
            matches!(self.tokenizer.kind.as_str(), "characters" | "vocabulary" | "huggingface"),
            "inference.tokenizer.kind must be characters, vocabulary or huggingface"
        );
        anyhow::ensure!(
            self.tokenizer.kind == "characters" || !self.tokenizer.file.is_empty(),
            "inference.tokenizer.file must name the {} file",
            self.tokenizer.kind
        );
        let index = &self.index;
        anyhow::ensure!(index.min_items >= 1, "inference.index.min_items must be at least 1");
        anyhow::ensure!(!index.dir.is_empty(), "inference.index.dir must name a directory");
        anyhow::ensure!(
            matches!(index.precision.as_str(), "f32" | "f16" | "i8"),
            "inference.index.precision must be f32, f16 or i8"
        );
        anyhow::ensure!((4..=256).contains(&index.connectivity), "inference.index.connectivity must be 4 to 256");
        anyhow::ensure!(
            (16..=4096).contains(&index.expansion_add) && (16..=4096).contains(&index.expansion_search),
            "inference.index.expansion_add and expansion_search must be 16 to 4096"
        );
        anyhow::ensure!(
            matches!(index.pgvector.as_str(), "auto" | "off"),
            "inference.index.pgvector must be auto or off"
        );
        Ok(())
    }
}
