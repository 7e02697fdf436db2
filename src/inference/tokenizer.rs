//! The tokeniser: text to token ids, by the scheme `inference.tokenizer` names.
//!
//! - `characters` (the default): character `c` (a Unicode scalar value) becomes token
//!   `1 + (c mod (vocab - 1))`, padding is 0: the default model's contract, which any model
//!   can be trained against.
//! - `vocabulary`: a file of one token a line, its id the line's number from 0 (ESM-2's
//!   alphabet is of this kind). The text is read as ESM's `Alphabet` reads it: a token of the
//!   file found at a position is taken (the longest, so `<mask>` is one token), and
//!   whitespace only separates. A run of characters that are no token refuses the input, as
//!   fair-esm does, unless `unknown` is named: then the run becomes that one token, as
//!   Hugging Face's `EsmTokenizer` reads it. The `start` and `end` tokens, when named, go
//!   around every input; `pad` fills the batch.
//! - `huggingface`: a Hugging Face `tokenizer.json`, with its own special tokens; `pad`
//!   names the padding token, else the file's padding settings give it.
//!
//! A batch is padded to its longest input. An empty input, or one of more than `max_tokens`
//! tokens (special tokens included), is refused: a model sees every token of an input or
//! none of it, never a silently truncated one.

use std::collections::HashMap;
use std::sync::Arc;

use super::settings::{InferenceSettings, TokenizerSettings};

/// Text to token ids, by the scheme in the module's documentation. Cheap to clone.
#[derive(Clone)]
pub struct Tokenizer {
    scheme: Arc<Scheme>,
    max_tokens: usize,
    pad: i64,
}

enum Scheme {
    Characters {
        vocab: u32,
    },
    Vocabulary(Vocabulary),
    #[cfg(feature = "inference")]
    HuggingFace(Box<tokenizers::Tokenizer>),
}

/// A vocabulary file's tokens.
struct Vocabulary {
    /// Tokens by their first character, longest first.
    by_first: HashMap<char, Vec<(String, i64)>>,
    unknown: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("input {index} is empty")]
    Empty { index: usize },
    #[error("input {index} has {tokens} tokens; the most is {max}")]
    TooLong { index: usize, tokens: usize, max: usize },
    #[error("input {index} cannot be tokenised: {reason}")]
    Unreadable { index: usize, reason: String },
}

/// A batch of inputs as token ids: `rows × columns`, row-major, padded with the pad id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub ids: Vec<i64>,
    pub rows: usize,
    pub columns: usize,
}

impl Tokenizer {
    /// The `characters` scheme; `vocab` is at least 2 (padding and one token).
    pub fn new(vocab: u32, max_tokens: usize) -> Tokenizer {
        let scheme = Scheme::Characters { vocab: vocab.max(2) };
        Tokenizer { scheme: Arc::new(scheme), max_tokens: max_tokens.max(1), pad: 0 }
    }

    /// The scheme `settings.tokenizer` names, its file read; the reason when it cannot be.
    pub fn from_settings(settings: &InferenceSettings) -> Result<Tokenizer, String> {
        let given = &settings.tokenizer;
        let max_tokens = settings.max_tokens.max(1);
        let at = |reason: String| format!("inference.tokenizer: {reason}");
        match given.kind.as_str() {
            "characters" => Ok(Tokenizer::new(settings.vocab, max_tokens)),
            "vocabulary" => {
                let (vocabulary, pad) = Vocabulary::read(given).map_err(at)?;
                Ok(Tokenizer { scheme: Arc::new(Scheme::Vocabulary(vocabulary)), max_tokens, pad })
            }
            #[cfg(feature = "inference")]
            "huggingface" => {
                let (tokenizer, pad) = hugging_face(given).map_err(at)?;
                Ok(Tokenizer { scheme: Arc::new(Scheme::HuggingFace(Box::new(tokenizer))), max_tokens, pad })
            }
            other => Err(at(format!("kind is {other:?}; it can be characters, vocabulary or huggingface"))),
        }
    }

    /// The padding id.
    pub fn pad(&self) -> i64 {
        self.pad
    }

    /// One input's token ids, special tokens included; `index` names it in the error.
    pub fn ids(&self, index: usize, input: &str) -> Result<Vec<i64>, Refused> {
        if input.is_empty() {
            return Err(Refused::Empty { index });
        }
        let ids = match self.scheme.as_ref() {
            Scheme::Characters { vocab } => input.chars().map(|c| 1 + i64::from(u32::from(c) % (vocab - 1))).collect(),
            Scheme::Vocabulary(vocabulary) => {
                vocabulary.ids(input).map_err(|reason| Refused::Unreadable { index, reason })?
            }
            #[cfg(feature = "inference")]
            Scheme::HuggingFace(tokenizer) => {
                let encoding = tokenizer
                    .encode(input, true)
                    .map_err(|err| Refused::Unreadable { index, reason: err.to_string() })?;
                // Special tokens only: nothing of the input was read.
                match encoding.get_special_tokens_mask().iter().all(|&special| special == 1) {
                    true => Vec::new(),
                    false => encoding.get_ids().iter().map(|&id| i64::from(id)).collect(),
                }
            }
        };
        match ids.len() {
            // Whitespace alone reads as no token at all.
            0 => Err(Refused::Empty { index }),
            tokens if tokens > self.max_tokens => Err(Refused::TooLong { index, tokens, max: self.max_tokens }),
            _ => Ok(ids),
        }
    }

    /// Refuses what [`Tokenizer::encode`] would; the input's length in tokens.
    pub fn check(&self, index: usize, input: &str) -> Result<usize, Refused> {
        self.ids(index, input).map(|ids| ids.len())
    }

    /// Every input's tokens, padded to the longest; the first refused input stops it
    /// (`first` is the index of `inputs[0]` in the whole set, for the error).
    pub fn encode<S: AsRef<str>>(&self, first: usize, inputs: &[S]) -> Result<Tokens, Refused> {
        let items: Vec<usize> = (first..first + inputs.len()).collect();
        self.encode_items(&items, inputs)
    }

    /// [`Tokenizer::encode`] of inputs at `items` of the whole set (the positions the errors name).
    pub fn encode_items<S: AsRef<str>>(&self, items: &[usize], inputs: &[S]) -> Result<Tokens, Refused> {
        let rows: Vec<Vec<i64>> = inputs
            .iter()
            .zip(items)
            .map(|(input, &index)| self.ids(index, input.as_ref()))
            .collect::<Result<_, _>>()?;
        let columns = rows.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let mut ids = vec![self.pad; rows.len() * columns];
        for (row, tokens) in rows.iter().enumerate() {
            ids[row * columns..row * columns + tokens.len()].copy_from_slice(tokens);
        }
        Ok(Tokens { ids, rows: rows.len(), columns })
    }
}

impl Vocabulary {
    /// The file's tokens and the pad id; `pad` must name a token of the file, `start`, `end`
    /// and `unknown` too when not empty.
    fn read(settings: &TokenizerSettings) -> Result<(Vocabulary, i64), String> {
        let text =
            std::fs::read_to_string(&settings.file).map_err(|err| format!("cannot read {:?}: {err}", settings.file))?;
        let mut ids = HashMap::new();
        for (line, token) in text.lines().enumerate() {
            let token = token.trim_end_matches('\r');
            if token.is_empty() {
                return Err(format!("{:?} line {}: an empty token", settings.file, line + 1));
            }
            if ids.insert(token.to_owned(), line as i64).is_some() {
                return Err(format!("{:?} line {}: {token:?} is there twice", settings.file, line + 1));
            }
        }
        let id = |what: &str, name: &str| match ids.get(name) {
            Some(&id) => Ok(id),
            None if name.is_empty() => Err(format!("name the {what} token (inference.tokenizer.{what})")),
            None => Err(format!("the {what} token {name:?} is not in {:?}", settings.file)),
        };
        let optional = |what: &str, name: &str| (!name.is_empty()).then(|| id(what, name)).transpose();
        let pad = id("pad", &settings.pad)?;
        let (start, end) = (optional("start", &settings.start)?, optional("end", &settings.end)?);
        let unknown = optional("unknown", &settings.unknown)?;
        let mut by_first: HashMap<char, Vec<(String, i64)>> = HashMap::new();
        for (token, id) in ids {
            if let Some(first) = token.chars().next() {
                by_first.entry(first).or_default().push((token, id));
            }
        }
        for tokens in by_first.values_mut() {
            tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        }
        Ok((Vocabulary { by_first, unknown, start, end }, pad))
    }

    /// The ids of `text`, or what in it is no token (when no `unknown` token reads it).
    fn ids(&self, text: &str) -> Result<Vec<i64>, String> {
        let mut ids: Vec<i64> = self.start.into_iter().collect();
        // Where the run of characters that are no token began, if one is open.
        let mut run: Option<usize> = None;
        let mut at = 0;
        while let Some(c) = text[at..].chars().next() {
            let rest = &text[at..];
            let found = self
                .by_first
                .get(&c)
                .and_then(|tokens| tokens.iter().find(|(token, _)| rest.starts_with(token.as_str())));
            if found.is_some() || c.is_whitespace() {
                if let Some(from) = run.take() {
                    ids.push(self.unknown_run(&text[from..at])?);
                }
            }
            match found {
                Some((token, id)) => {
                    ids.push(*id);
                    at += token.len();
                }
                None => {
                    if !c.is_whitespace() && run.is_none() {
                        run = Some(at);
                    }
                    at += c.len_utf8();
                }
            }
        }
        if let Some(from) = run {
            ids.push(self.unknown_run(&text[from..])?);
        }
        // Only the start token: nothing of the text was read (whitespace alone).
        if ids.len() == usize::from(self.start.is_some()) {
            return Ok(Vec::new());
        }
        ids.extend(self.end);
        Ok(ids)
    }

    fn unknown_run(&self, run: &str) -> Result<i64, String> {
        self.unknown.ok_or_else(|| {
            format!("{run:?} is not in the vocabulary (inference.tokenizer.unknown names a token to read it as)")
        })
    }
}

/// A `tokenizer.json` and its pad id: the token `pad` names, else the file's padding. The
/// file's own truncation and padding are switched off: an input is refused past
/// `max_tokens`, never cut, and a batch is padded here.
#[cfg(feature = "inference")]
fn hugging_face(settings: &TokenizerSettings) -> Result<(tokenizers::Tokenizer, i64), String> {
    let mut tokenizer = tokenizers::Tokenizer::from_file(&settings.file)
        .map_err(|err| format!("cannot read {:?} as a tokenizer.json: {err}", settings.file))?;
    let pad = match settings.pad.as_str() {
        "" => tokenizer.get_padding().map(|padding| padding.pad_id).ok_or_else(|| {
            format!("{:?} sets no padding: name the pad token (inference.tokenizer.pad)", settings.file)
        })?,
        name => tokenizer
            .token_to_id(name)
            .ok_or_else(|| format!("the pad token {name:?} is not in {:?}", settings.file))?,
    };
    tokenizer.with_padding(None);
    tokenizer.with_truncation(None).map_err(|err| format!("{:?}: {err}", settings.file))?;
    Ok((tokenizer, i64::from(pad)))
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
        assert_eq!(tokenizer.ids(0, "\u{10FFFF}").unwrap(), vec![1 + (0x10FFFF % 4095)]);
        assert_eq!(Tokenizer::new(2, 8).ids(0, "z").unwrap(), vec![1]);
    }

    #[test]
    fn empty_and_overlong_inputs_are_refused_by_their_index() {
        let tokenizer = Tokenizer::new(4096, 3);
        assert_eq!(tokenizer.encode(10, &["ab", ""]), Err(Refused::Empty { index: 11 }));
        assert_eq!(tokenizer.encode(0, &["abcd"]), Err(Refused::TooLong { index: 0, tokens: 4, max: 3 }));
        // Characters, not bytes: three two-byte letters fit.
        assert!(tokenizer.encode(0, &["äöü"]).is_ok());
    }

    fn vocabulary(tokens: &str, names: [&str; 4], max_tokens: usize) -> Result<Tokenizer, String> {
        let file = std::env::temp_dir().join(format!("yardmaster-vocab-{}.txt", uuid::Uuid::new_v4().simple()));
        std::fs::write(&file, tokens).unwrap();
        let [pad, start, end, unknown] = names.map(str::to_owned);
        let tokenizer =
            TokenizerSettings { kind: "vocabulary".into(), file: file.display().to_string(), pad, start, end, unknown };
        let settings = InferenceSettings { tokenizer, max_tokens, ..Default::default() };
        let made = Tokenizer::from_settings(&settings);
        let _ = std::fs::remove_file(file);
        made
    }

    #[test]
    fn a_vocabulary_reads_tokens_specials_and_unknown_runs() {
        let names = ["<pad>", "<cls>", "<eos>", "<unk>"];
        let tokenizer = vocabulary("<cls>\n<pad>\n<eos>\n<unk>\nA\nK\n<mask>\n", names, 16).unwrap();
        assert_eq!(tokenizer.pad(), 1);
        assert_eq!(tokenizer.ids(0, "AK").unwrap(), vec![0, 4, 5, 2]);
        // A run of unknown characters is one token; whitespace only separates.
        assert_eq!(tokenizer.ids(0, "AjjK j K").unwrap(), vec![0, 4, 3, 5, 3, 5, 2]);
        assert_eq!(tokenizer.ids(0, "A<mask>K").unwrap(), vec![0, 4, 6, 5, 2]);
        // Whitespace alone is no input, with or without tokens around it.
        assert_eq!(tokenizer.ids(4, " \t "), Err(Refused::Empty { index: 4 }));
        let bare = vocabulary("<pad>\nA\n", ["<pad>", "", "", ""], 16).unwrap();
        assert_eq!(bare.ids(4, " \t "), Err(Refused::Empty { index: 4 }));
        let batch = tokenizer.encode(0, &["A", "AKA"]).unwrap();
        assert_eq!(batch.ids, vec![0, 4, 2, 1, 1, 0, 4, 5, 4, 2]);
        // Special tokens count against max_tokens.
        let short = vocabulary("<cls>\n<pad>\n<eos>\n<unk>\nA\n", names, 3).unwrap();
        assert_eq!(short.ids(7, "AA"), Err(Refused::TooLong { index: 7, tokens: 4, max: 3 }));
        // With no unknown token, a character outside the vocabulary refuses the input.
        let strict = vocabulary("<pad>\nA\n", ["<pad>", "", "", ""], 16).unwrap();
        let refused = strict.ids(2, "AAxyA B").unwrap_err().to_string();
        assert_eq!(refused, "input 2 cannot be tokenised: \"xy\" is not in the vocabulary (inference.tokenizer.unknown names a token to read it as)");
    }

    /// The ids the models' own Python tokenisers give (`scripts/golden-tokens.py`): fair-esm's
    /// for ESM-2's alphabet as a vocabulary file, the `tokenizers` library's for a
    /// `tokenizer.json`.
    #[test]
    fn tokenizers_match_the_models_own() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers");
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
        let sequences: Vec<String> = serde_json::from_value(golden["sequences"].clone()).unwrap();
        let esm = &golden["esm2"];
        let name = |key: &str| esm[key].as_str().unwrap().to_owned();
        let file = dir.join(esm["file"].as_str().unwrap()).display().to_string();
        let given = TokenizerSettings {
            kind: "vocabulary".into(),
            file,
            pad: name("pad"),
            start: name("start"),
            end: name("end"),
            unknown: String::new(),
        };
        let tokenizer =
            Tokenizer::from_settings(&InferenceSettings { tokenizer: given, ..Default::default() }).unwrap();
        assert_eq!(tokenizer.pad(), 1);
        let mut compared = 0;
        for (at, (sequence, want)) in sequences.iter().zip(esm["ids"].as_array().unwrap()).enumerate() {
            match want.as_array() {
                Some(want) => {
                    let want: Vec<i64> = want.iter().map(|id| id.as_i64().unwrap()).collect();
                    assert_eq!(tokenizer.ids(at, sequence).unwrap(), want, "ESM-2, {sequence:?}");
                    compared += 1;
                }
                // fair-esm refuses it; so does the vocabulary without an unknown token.
                None => assert!(matches!(tokenizer.ids(at, sequence), Err(Refused::Unreadable { .. })), "{sequence:?}"),
            }
        }
        assert!(compared >= 6, "most sequences have ESM-2 ids");
        #[cfg(feature = "inference")]
        {
            let hf = &golden["huggingface"];
            let file = dir.join(hf["file"].as_str().unwrap()).display().to_string();
            let given = TokenizerSettings { kind: "huggingface".into(), file, ..Default::default() };
            let tokenizer =
                Tokenizer::from_settings(&InferenceSettings { tokenizer: given, ..Default::default() }).unwrap();
            assert_eq!(tokenizer.pad(), 0, "the file's padding");
            assert_eq!(tokenizer.ids(3, "   "), Err(Refused::Empty { index: 3 }), "only </s>: nothing read");
            for (at, (sequence, want)) in sequences.iter().zip(hf["ids"].as_array().unwrap()).enumerate() {
                let want: Vec<i64> = want.as_array().unwrap().iter().map(|id| id.as_i64().unwrap()).collect();
                assert_eq!(tokenizer.ids(at, sequence).unwrap(), want, "tokenizer.json, {sequence:?}");
            }
        }
    }

    #[test]
    fn a_vocabulary_names_what_it_lacks() {
        let lacks = vocabulary("A\n<unk>\n", ["<pad>", "", "", "<unk>"], 8).err().unwrap();
        assert!(lacks.contains("the pad token \"<pad>\" is not in"), "{lacks}");
        let lacks = vocabulary("A\n<pad>\n", ["<pad>", "", "", "<unk>"], 8).err().unwrap();
        assert!(lacks.contains("the unknown token \"<unk>\" is not in"), "{lacks}");
        let unnamed = vocabulary("A\n", ["", "", "", ""], 8).err().unwrap();
        assert!(unnamed.contains("name the pad token (inference.tokenizer.pad)"), "{unnamed}");
        let twice = vocabulary("A\nA\n", ["A", "", "", "A"], 8).err().unwrap();
        assert!(twice.contains("line 2: \"A\" is there twice"), "{twice}");
    }
}
