//! The tokeniser: text to token ids, by a small deterministic scheme any model of the same
//! contract can be trained against.
//!
//! Character `c` (a Unicode scalar value) becomes token `1 + (c mod (vocab - 1))`; token 0 is
//! padding. A batch is padded with 0 to its longest input. An empty input, or one longer
//! than `max_tokens` characters, is refused: a model sees every character or none of the
//! input, never a silently truncated one. Protein sequences (one letter per residue) and
//! text are read the same way.

/// Text to token ids, by the scheme in the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokenizer {
    vocab: u32,
    max_tokens: usize,
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("input {index} is empty")]
    Empty { index: usize },
    #[error("input {index} has {chars} characters; the most is {max}")]
    TooLong { index: usize, chars: usize, max: usize },
}

/// A batch of inputs as token ids: `rows × columns`, row-major, padded with 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub ids: Vec<i64>,
    pub rows: usize,
    pub columns: usize,
}

impl Tokenizer {
    /// `vocab` is at least 2 (padding and one token).
    pub fn new(vocab: u32, max_tokens: usize) -> Tokenizer {
        Tokenizer { vocab: vocab.max(2), max_tokens: max_tokens.max(1) }
    }

    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// The token of one character.
    pub fn token(&self, c: char) -> i64 {
        1 + i64::from(u32::from(c) % (self.vocab - 1))
    }

    /// Refuses what [`Tokenizer::encode`] would: `index` names the input in the error.
    pub fn check(&self, index: usize, input: &str) -> Result<usize, Refused> {
        let chars = input.chars().count();
        match chars {
            0 => Err(Refused::Empty { index }),
            chars if chars > self.max_tokens => Err(Refused::TooLong { index, chars, max: self.max_tokens }),
            chars => Ok(chars),
        }
    }

    /// Every input's tokens, padded to the longest; the first refused input stops it
    /// (`first` is the index of `inputs[0]` in the whole set, for the error).
    pub fn encode<S: AsRef<str>>(&self, first: usize, inputs: &[S]) -> Result<Tokens, Refused> {
        let mut columns = 1;
        for (at, input) in inputs.iter().enumerate() {
            columns = columns.max(self.check(first + at, input.as_ref())?);
        }
        let mut ids = vec![0_i64; inputs.len() * columns];
        for (row, input) in inputs.iter().enumerate() {
            for (column, c) in input.as_ref().chars().enumerate() {
                ids[row * columns + column] = self.token(c);
            }
        }
        Ok(Tokens { ids, rows: inputs.len(), columns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_map_into_the_vocabulary_and_pad_with_zero() {
        let tokenizer = Tokenizer::new(4096, 8);
        let tokens = tokenizer.encode(0, &["MKV", "A"]).unwrap();
        assert_eq!((tokens.rows, tokens.columns), (2, 3));
        let (m, k, v, a) = ('M' as i64, 'K' as i64, 'V' as i64, 'A' as i64);
        assert_eq!(tokens.ids, vec![1 + m, 1 + k, 1 + v, 1 + a, 0, 0]);
        // Past the vocabulary, code points wrap; no id is 0 or vocab.
        assert_eq!(tokenizer.token('\u{10FFFF}'), 1 + (0x10FFFF % 4095));
        assert_eq!(Tokenizer::new(2, 8).token('z'), 1);
    }

    #[test]
    fn empty_and_overlong_inputs_are_refused_by_their_index() {
        let tokenizer = Tokenizer::new(4096, 3);
        assert_eq!(tokenizer.encode(10, &["ab", ""]), Err(Refused::Empty { index: 11 }));
        assert_eq!(tokenizer.encode(0, &["abcd"]), Err(Refused::TooLong { index: 0, chars: 4, max: 3 }));
        // Characters, not bytes: three two-byte letters fit.
        assert!(tokenizer.encode(0, &["äöü"]).is_ok());
    }
}
