//! Captions as token ids for training: the text tower's tokenizer (truncated to `--max-length`),
//! and BERT-style masking (a fixed fraction of the non-special tokens, at least one: 80 %
//! `[MASK]`, 10 % a random token, 10 % unchanged).

use std::path::Path;

use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{Result, TrainError};
use crate::rng::Rng;

/// The tokenizer and the special ids masking needs.
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    pub cls: u32,
    pub sep: u32,
    pub pad: u32,
    pub mask: u32,
    pub vocab: usize,
}

impl TextTokenizer {
    pub fn load(path: &Path, max_length: usize) -> Result<Self> {
        let err = |m: String| TrainError::invalid(format!("{}: {m}", path.display()));
        let mut tokenizer = Tokenizer::from_file(path).map_err(|e| err(e.to_string()))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| err(format!("cannot set truncation: {e}")))?;
        let id = |t: &str| {
            tokenizer.token_to_id(t).ok_or_else(|| {
                err(format!(
                    "the tokenizer has no {t} token (a BERT word-piece tokenizer is needed)"
                ))
            })
        };
        Ok(Self {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            pad: id("[PAD]")?,
            mask: id("[MASK]")?,
            vocab: tokenizer.get_vocab_size(true),
            tokenizer,
        })
    }

    /// Token ids with `[CLS]`/`[SEP]`, truncated.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TrainError::invalid(format!("cannot tokenize {text:?}: {e}")))
    }

    fn special(&self, id: u32) -> bool {
        id == self.cls || id == self.sep || id == self.pad
    }

    /// The vocabulary entry of `id`.
    pub fn token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// Whether `id` is a word or a piece of one: a vocabulary entry with a letter or a digit
    /// that is no special token (`[CLS]`, `[MASK]`, `[unused0]`, …).
    pub fn is_word_piece(&self, id: u32) -> bool {
        match self.tokenizer.id_to_token(id) {
            Some(t) => {
                !(t.starts_with('[') && t.ends_with(']')) && t.chars().any(char::is_alphanumeric)
            }
            None => false,
        }
    }

    /// `round(rate · candidates)` (at least one) of the non-special token positions, a uniform
    /// random subset in ascending order.
    pub fn mask_positions(&self, tokens: &[u32], rate: f64, rng: &mut Rng) -> Vec<usize> {
        let mut candidates: Vec<usize> = (0..tokens.len())
            .filter(|&i| !self.special(tokens[i]))
            .collect();
        let n = ((rate * candidates.len() as f64).round() as usize)
            .max(1)
            .min(candidates.len());
        // Partial Fisher-Yates: the first n entries become a uniform random subset.
        for i in 0..n {
            let j = i + rng.below(candidates.len() - i);
            candidates.swap(i, j);
        }
        let mut positions = candidates[..n].to_vec();
        positions.sort_unstable();
        positions
    }

    /// Masks [`Self::mask_positions`] BERT's way: 80 % `[MASK]`, 10 % a random token, 10 %
    /// unchanged.
    pub fn mask_tokens(&self, tokens: &[u32], rate: f64, rng: &mut Rng) -> Masked {
        let positions = self.mask_positions(tokens, rate, rng);
        let n = positions.len();
        let mut ids = tokens.to_vec();
        let mut targets = Vec::with_capacity(n);
        for &p in &positions {
            targets.push(tokens[p]);
            let r = rng.uniform();
            if r < 0.8 {
                ids[p] = self.mask;
            } else if r < 0.9 {
                ids[p] = rng.below(self.vocab) as u32;
            }
        }
        Masked {
            ids,
            positions,
            targets,
        }
    }
}

/// A masked copy of a token sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masked {
    pub ids: Vec<u32>,
    /// Masked positions, ascending.
    pub positions: Vec<usize>,
    /// The original ids there.
    pub targets: Vec<u32>,
}
