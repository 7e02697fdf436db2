//! The default model, made here rather than downloaded: a small convolutional text encoder
//! with deterministic weights, traced to TorchScript in Rust (`yardmaster model init`).
//!
//! Contract (what any replacement must keep): `forward(ids)` takes int64 `[batch, tokens]`
//! token ids from [`super::tokenizer`] (0 = padding) and returns float32 `[batch, dim]`.
//! This one: a token embedding (`vocab × 64`, padding embedded as zeros), a width-5 convolution to 256 channels with
//! ReLU, a mean over the real (non-padding) tokens, a projection to 128 with tanh, and unit
//! length, so cosine similarity is a dot product. Its weights come from a fixed xorshift
//! sequence, so every machine makes the same file and the same vectors.

use std::path::Path;

use tch::{CModule, Kind, TchError, Tensor};

/// Width of the token embedding.
const EMBED: i64 = 64;
/// Channels of the convolution.
const HIDDEN: i64 = 256;
/// Tokens the convolution sees at once.
const KERNEL: i64 = 5;
/// Length of the default model's vectors.
pub const DIM: i64 = 128;

/// A fixed sequence of weights in `[-scale, scale)`: xorshift64*, seeded per tensor.
fn weights(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let unit = (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            (unit * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor(seed: u64, shape: &[i64], fan_in: i64) -> Result<Tensor, TchError> {
    let len = shape.iter().product::<i64>() as usize;
    Tensor::f_from_slice(&weights(seed, len, 1.0 / (fan_in as f32).sqrt()))?.f_reshape(shape)
}

/// Traces the default model for a vocabulary of `vocab` tokens and writes it to `path`
/// (its directory made if missing), through a temporary file renamed into place, so a
/// crash never leaves half a model where the service loads one.
pub fn write_default(path: &Path, vocab: u32) -> Result<(), TchError> {
    let vocab = i64::from(vocab.max(2));
    let embedding = tensor(1, &[vocab, EMBED], 1)?;
    let conv = tensor(2, &[HIDDEN, EMBED, KERNEL], EMBED * KERNEL)?;
    let conv_bias = tensor(3, &[HIDDEN], EMBED * KERNEL)?;
    let projection = tensor(4, &[HIDDEN, DIM], HIDDEN)?;
    let mut forward = |inputs: &[Tensor]| {
        let ids = &inputs[0];
        let mask = ids.ne(0).to_kind(Kind::Float).unsqueeze(-1);
        // Padding embeds to zero, as the convolution's own padding does, so an input's
        // vector does not depend on how long the other inputs of its batch are.
        let tokens = Tensor::embedding(&embedding, ids, 0, false, false) * &mask;
        let hidden = tokens.transpose(1, 2).conv1d(&conv, Some(&conv_bias), [1], [KERNEL / 2], [1], 1).relu();
        let summed = (hidden.transpose(1, 2) * &mask).sum_dim_intlist([1_i64].as_slice(), false, Kind::Float);
        let counts = mask.sum_dim_intlist([1_i64].as_slice(), false, Kind::Float).clamp_min(1.0);
        let vectors = (summed / counts).matmul(&projection).tanh();
        let length = vectors.norm_scalaropt_dim(2, [1_i64].as_slice(), true).clamp_min(1e-12);
        vec![vectors / length]
    };
    let example = Tensor::f_from_slice(&[1_i64, 2, 3, 0, 4, 5, 0, 0])?.f_reshape([2, 4])?;
    let module = CModule::create_by_tracing("yardmaster_default", "forward", &[example], &mut forward)?;
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| TchError::FileFormat(format!("{}: {err}", dir.display())))?;
    }
    let partial = path.with_extension("pt.partial");
    module.save(&partial)?;
    std::fs::rename(&partial, path).map_err(|err| TchError::FileFormat(format!("{}: {err}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_weights_are_a_fixed_sequence() {
        let first = weights(7, 4, 1.0);
        assert_eq!(first, weights(7, 4, 1.0));
        assert_ne!(first, weights(8, 4, 1.0));
        assert!(first.iter().all(|w| (-1.0..1.0).contains(w)));
    }
}
