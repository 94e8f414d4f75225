//! The vocabulary that names the dimensions of the lexicon space.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lexlip_proto::TermSpace;

use crate::error::{ModelError, Result};

/// Function words that a caption carries but no picture shows; never counted as a caption word.
/// "up" and "down" are not among them: they name what a picture shows ("thumbs down", "down
/// arrow", "upside-down face"), and left out they made those pictures one with their opposites.
pub const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "with", "without", "in", "on", "at", "to", "for", "from",
    "by", "as", "is", "are", "be", "it", "its", "this", "that", "out", "over", "under", "into",
    "onto", "off", "s",
];

/// Whether a word piece reads as a word of its own: not a `##` continuation ("##ump", "##fly")
/// and of two or more characters unless a number ("t" and "k" name nothing; "1" names a keycap).
/// The terms lexicon heads may learn, and the own words a query floor may keep.
pub fn is_whole_word(piece: &str) -> bool {
    !piece.starts_with("##")
        && (piece.chars().count() >= 2 || piece.chars().all(|c| c.is_ascii_digit()))
}

/// Word-piece tokens in id order, and the [`TermSpace`] identity collections record.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    tokens: Arc<Vec<String>>,
    /// Each token's place among the tokens sorted as strings: sparse vectors keep their terms
    /// in that order, and lexicons built in it need no string sort.
    ranks: Arc<Vec<u32>>,
    /// Token ids in string order (the inverse of `ranks`).
    by_text: Arc<Vec<u32>>,
    term_space: TermSpace,
}

impl Vocabulary {
    /// From tokens in id order.
    pub fn new(name: impl Into<String>, tokens: Vec<String>) -> Self {
        let term_space = TermSpace::from_tokens(name, tokens.iter().map(String::as_str));
        let mut by_text: Vec<u32> = (0..tokens.len() as u32).collect();
        by_text.sort_by(|&a, &b| tokens[a as usize].cmp(&tokens[b as usize]));
        let mut ranks = vec![0u32; tokens.len()];
        for (rank, &id) in by_text.iter().enumerate() {
            ranks[id as usize] = rank as u32;
        }
        Self {
            tokens: Arc::new(tokens),
            ranks: Arc::new(ranks),
            by_text: Arc::new(by_text),
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

    /// Token ids in the order of their strings: the order of a sparse vector's terms.
    pub fn ids_by_text(&self) -> &[u32] {
        &self.by_text
    }

    /// `(id, weight)` pairs reordered as their tokens sort (ids out of range last, for the
    /// caller to refuse): an integer sort instead of a string one.
    pub fn sort_by_text<W>(&self, pairs: &mut [(usize, W)]) {
        pairs.sort_unstable_by_key(|(i, _)| self.ranks.get(*i).copied().unwrap_or(u32::MAX));
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

/// Directories above a model part in which its model's `tokenizer.json` is looked for
/// (`dense/teacher/` is two below the model).
const PART_DEPTH: usize = 2;

/// The `tokenizer.json` a model directory reads: its own, or, for a part of a model (a
/// directory below one with a `lexlip.json`: `heads/`, `dense/`, `dense/teacher/`), the
/// model's, which its parts share instead of each carrying a copy. Where neither exists, the
/// directory's own path, for the error that names it.
pub fn tokenizer_json(dir: &Path) -> PathBuf {
    let own = dir.join("tokenizer.json");
    if own.is_file() {
        return own;
    }
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    dir.ancestors()
        .skip(1)
        .take(PART_DEPTH)
        .find(|up| up.join("lexlip.json").is_file())
        .map(|model| model.join("tokenizer.json"))
        .filter(|t| t.is_file())
        .unwrap_or(own)
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
    let local = tokenizer_json(dir);
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

#[cfg(test)]
mod tests {
    use super::tokenizer_json;

    /// A part finds its model's tokenizer.json one or two levels up; its own copy wins; a
    /// directory that is no model's part keeps its own (missing) path, even with a
    /// tokenizer.json above it.
    #[test]
    fn parts_share_their_models_tokenizer() {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("model");
        let teacher = model.join("dense/teacher");
        std::fs::create_dir_all(&teacher).unwrap();
        std::fs::write(model.join("lexlip.json"), "{}").unwrap();
        std::fs::write(model.join("tokenizer.json"), "{}").unwrap();
        let shared = std::fs::canonicalize(&model)
            .unwrap()
            .join("tokenizer.json");
        assert_eq!(tokenizer_json(&model.join("dense")), shared);
        assert_eq!(tokenizer_json(&teacher), shared);
        std::fs::write(teacher.join("tokenizer.json"), "{}").unwrap();
        assert_eq!(tokenizer_json(&teacher), teacher.join("tokenizer.json"));

        let loose = tmp.path().join("loose/part");
        std::fs::create_dir_all(&loose).unwrap();
        std::fs::write(tmp.path().join("loose/tokenizer.json"), "{}").unwrap();
        assert_eq!(tokenizer_json(&loose), loose.join("tokenizer.json"));
    }
}
