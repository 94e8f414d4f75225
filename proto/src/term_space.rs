//! The identity of a term space: which vocabulary the impacts of a collection refer to.
//!
//! Mixing vectors from two vocabularies silently corrupts every score, so a collection records the
//! term space it was built with and refuses vectors or encoders from another one.

use serde::{Deserialize, Serialize};

/// Name + content hash + size of a vocabulary (tokens in id order).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TermSpace {
    /// Human-readable name, e.g. the model directory's name or "bert-base-uncased".
    pub name: String,
    /// FNV-1a 64 of the tokens in id order, each followed by `\n`, as 16 hex digits. Two term
    /// spaces are the same when their hashes are equal, whatever their names.
    pub hash: String,
    /// Number of tokens.
    pub size: usize,
}

/// Why a vocabulary could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VocabError {
    #[error("not a tokenizer.json with a model.vocab object: {0}")]
    BadTokenizerJson(String),
    #[error("the vocabulary is empty")]
    Empty,
    #[error("token ids in the vocabulary are not 0..{size} without gaps (id {id} is missing)")]
    Gap { size: usize, id: usize },
}

impl TermSpace {
    /// From tokens listed in id order.
    pub fn from_tokens<'a>(
        name: impl Into<String>,
        tokens: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut size = 0;
        for token in tokens {
            for b in token.bytes().chain(std::iter::once(b'\n')) {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            size += 1;
        }
        Self {
            name: name.into(),
            hash: format!("{hash:016x}"),
            size,
        }
    }

    /// From a BERT-style `vocab.txt` (one token per line, line number = id).
    pub fn from_vocab_txt(name: impl Into<String>, text: &str) -> Result<Self, VocabError> {
        let tokens: Vec<&str> = text.lines().collect();
        if tokens.is_empty() {
            return Err(VocabError::Empty);
        }
        Ok(Self::from_tokens(name, tokens))
    }

    /// From a Hugging Face `tokenizer.json` (`model.vocab`: token → id).
    pub fn from_tokenizer_json(name: impl Into<String>, json: &str) -> Result<Self, VocabError> {
        let tokens = tokens_from_tokenizer_json(json)?;
        Ok(Self::from_tokens(name, tokens.iter().map(String::as_str)))
    }

    /// A term space without a vocabulary: any term is accepted (collections of vectors whose
    /// encoder is unknown).
    pub fn free(name: impl Into<String>) -> Self {
        Self::from_tokens(name, [])
    }

    /// Whether this is a [`TermSpace::free`] one.
    pub fn is_free(&self) -> bool {
        self.size == 0
    }

    /// True when both name the same vocabulary (names may differ).
    pub fn same_vocabulary(&self, other: &TermSpace) -> bool {
        self.hash == other.hash && self.size == other.size
    }
}

impl std::fmt::Display for TermSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} terms, hash {})", self.name, self.size, self.hash)
    }
}

/// The tokens of a `tokenizer.json` in id order.
pub fn tokens_from_tokenizer_json(json: &str) -> Result<Vec<String>, VocabError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| VocabError::BadTokenizerJson(e.to_string()))?;
    let vocab = value
        .get("model")
        .and_then(|m| m.get("vocab"))
        .and_then(|v| v.as_object())
        .ok_or_else(|| VocabError::BadTokenizerJson("no model.vocab object".into()))?;
    if vocab.is_empty() {
        return Err(VocabError::Empty);
    }
    let mut tokens: Vec<Option<String>> = vec![None; vocab.len()];
    for (token, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            VocabError::BadTokenizerJson(format!("id of {token:?} is not an integer"))
        })? as usize;
        if id >= tokens.len() {
            return Err(VocabError::Gap {
                size: vocab.len(),
                id: tokens.iter().position(Option::is_none).unwrap_or(0),
            });
        }
        tokens[id] = Some(token.clone());
    }
    tokens
        .into_iter()
        .enumerate()
        .map(|(id, t)| {
            t.ok_or(VocabError::Gap {
                size: vocab.len(),
                id,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_json_and_vocab_txt_agree() {
        let json = r#"{"model": {"vocab": {"[PAD]": 0, "dog": 2, "cat": 1}}}"#;
        let a = TermSpace::from_tokenizer_json("a", json).unwrap();
        let b = TermSpace::from_vocab_txt("b", "[PAD]\ncat\ndog\n").unwrap();
        assert!(a.same_vocabulary(&b));
        assert_eq!(a.size, 3);
        let c = TermSpace::from_vocab_txt("c", "[PAD]\ndog\ncat\n").unwrap();
        assert!(!a.same_vocabulary(&c));
        assert!(
            TermSpace::from_tokenizer_json("x", r#"{"model": {"vocab": {"a": 0, "b": 5}}}"#)
                .is_err()
        );
        assert!(TermSpace::from_tokenizer_json("x", "not json").is_err());
    }
}
