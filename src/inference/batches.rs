//! Cutting a job's inputs into batches: sorted by length, so each batch pads little, and cut
//! by a token budget (`inference.max_batch_tokens`, the batch's rows × its longest input) as
//! well as by `inference.batch_size` rows. Every batch names its inputs' positions in the
//! caller's order, so the vectors go back where the inputs came from.

/// How many inputs of each position's length go together: positions by ascending length
/// (ties by position), cut before an input that would take the batch past `max_rows` rows or
/// past `max_tokens` padded tokens. An input longer than `max_tokens` alone goes in a batch
/// of its own (the settings keep `max_batch_tokens ≥ max_tokens`, so it does not happen).
pub fn plan(lengths: &[usize], max_rows: usize, max_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&at| (lengths[at], at));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for at in order {
        // Sorted ascending: the batch's longest input is the one being added.
        let padded = (current.len() + 1) * lengths[at];
        if !current.is_empty() && (current.len() >= max_rows.max(1) || padded > max_tokens) {
            batches.push(std::mem::take(&mut current));
        }
        current.push(at);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Batches of `max_rows` inputs in the caller's order, as before token budgets: what
/// [`plan`] is measured against.
pub fn by_count(count: usize, max_rows: usize) -> Vec<Vec<usize>> {
    (0..count).collect::<Vec<_>>().chunks(max_rows.max(1)).map(<[usize]>::to_vec).collect()
}

/// The share of a plan's padded tokens that are padding: 0 when every batch's inputs are
/// of one length.
pub fn padding_share(lengths: &[usize], batches: &[Vec<usize>]) -> f64 {
    let (mut real, mut padded) = (0_usize, 0_usize);
    for batch in batches {
        let longest = batch.iter().map(|&at| lengths[at]).max().unwrap_or(0);
        real += batch.iter().map(|&at| lengths[at]).sum::<usize>();
        padded += longest * batch.len();
    }
    match padded {
        0 => 0.0,
        padded => 1.0 - real as f64 / padded as f64,
    }
}

/// Protein lengths as they fall in UniProt, long-tailed: log-normal with a median of 300
/// residues (σ 0.6), at least 30 and at most `max`, the same for the same `seed`. For tests
/// and the benchmark's realistic mix.
pub fn protein_lengths(count: usize, max: usize, seed: u64) -> Vec<usize> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1_u64 << 53) as f64
    };
    (0..count)
        .map(|_| {
            // Box–Muller: a standard normal from two uniforms.
            let normal = (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
            ((300.0_f64.ln() + 0.6 * normal).exp().round() as usize).clamp(30, max)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_every_position_once_within_both_limits() {
        let lengths = protein_lengths(5_000, 1_024, 3);
        let batches = plan(&lengths, 64, 16_384);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        for batch in &batches {
            let longest = batch.iter().map(|&at| lengths[at]).max().unwrap();
            assert!(batch.len() <= 64 && batch.len() * longest <= 16_384, "{} × {longest}", batch.len());
        }
        // One over the budget goes alone; nothing is dropped.
        assert_eq!(plan(&[5, 50, 5], 8, 20), vec![vec![0, 2], vec![1]]);
        assert_eq!(plan(&[], 8, 20), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn sorted_batches_pad_far_less_than_batches_in_order() {
        let lengths = protein_lengths(10_000, 1_024, 7);
        let before = padding_share(&lengths, &by_count(lengths.len(), 64));
        let after = padding_share(&lengths, &plan(&lengths, 64, 32_768));
        assert!(before > 0.3, "in order, a batch pads to its longest: {before}");
        assert!(after < 0.02, "sorted: {after}");
        let median = {
            let mut sorted = lengths.clone();
            sorted.sort_unstable();
            sorted[sorted.len() / 2]
        };
        assert!((250..350).contains(&median), "median {median}");
    }
}
