//! The vocabulary that names the dimensions of the lexicon space.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lexlip_proto::TermSpace;

use crate::error::{ModelError, Result};

/// Function words that a caption carries but no picture shows; never counted as a caption word.
pub const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "with", "without", "in", "on", "at", "to", "for", "from",
    "by", "as", "is", "are", "be", "it", "its", "this", "that", "up", "down", "out", "over",
    "under", "into", "onto", "off", "s",
];

/// Word-piece tokens in id order, and the [`TermSpace`] identity collections record.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    tokens: Arc<Vec<String>>,
    term_space: TermSpace,
}

impl Vocabulary {
    /// From tokens in id order.
    pub fn new(name: impl Into<String>, tokens: Vec<String>) -> Self {
        let term_space = TermSpace::from_tokens(name, tokens.iter().map(String::as_str));
        Self {
            tokens: Arc::new(tokens),
            term_space,
        }
    }

    /// From a Hugging Face `tokenizer.json` (`model.vocab`).
    pub fn from_tokenizer_json(name: impl Into<String>, path: &Path) -> Result<Self> {
        let json = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        let tokens = lexlip_proto::term_space::tokens_from_tokenizer_json(&json).map_err(|e| {
            ModelError::Tokenizer {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        Ok(Self::new(name, tokens))
    }

    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Refuses a vocabulary (read from `tokenizer`) of another size than the `expected` terms
    /// a model scores.
    pub fn check_len(&self, expected: usize, tokenizer: &Path) -> Result<()> {
        if self.len() != expected {
            return Err(ModelError::ShapeMismatch {
                file: tokenizer.to_path_buf(),
                name: "model.vocab".into(),
                expected: vec![expected],
                got: vec![self.len()],
            });
        }
        Ok(())
    }

    pub fn term_space(&self) -> &TermSpace {
        &self.term_space
    }
}

/// The `tokenizer.json` of a published model's directory `dir`: `explicit`, else `dir`'s, else
/// (with the `hub` feature) the one of its `base` model in the Hugging Face cache. The error
/// ends with `hint`: how the user gets one.
pub fn find_tokenizer(
    dir: &Path,
    explicit: Option<&Path>,
    base: &str,
    hint: &str,
) -> Result<PathBuf> {
    if let Some(t) = explicit {
        return Ok(t.to_path_buf());
    }
    let local = dir.join("tokenizer.json");
    if local.is_file() {
        return Ok(local);
    }
    #[cfg(feature = "hub")]
    if let Some(cached) = crate::hub::cached(base, "tokenizer.json") {
        return Ok(cached);
    }
    Err(ModelError::Tokenizer {
        path: local,
        message: format!(
            "the model's terms are the word pieces of {base}, and its directory has no \
             tokenizer.json: {hint}"
        ),
    })
}
