//! Tokenizer plumbing every text tower shares: loading a `tokenizer.json`, cutting texts to a
//! model's length, tokenizing with special tokens, padding a batch, and the names a model
//! directory gives its term space.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::{ModelError, Result};

/// The id padding uses: the tokenizer's own padding id, else `[PAD]`, else `fallback` (the
/// config's `pad_token_id`).
pub(crate) fn pad_id(tokenizer: &Tokenizer, fallback: usize) -> u32 {
    tokenizer
        .get_padding()
        .map(|p| p.pad_id)
        .or_else(|| tokenizer.token_to_id("[PAD]"))
        .unwrap_or(fallback as u32)
}

/// No padding (batches are padded by [`pad_batch`]), truncation to `max_length` tokens.
pub(crate) fn truncate_to(tokenizer: &mut Tokenizer, max_length: usize) -> Result<()> {
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            ..Default::default()
        }))
        .map_err(|e| ModelError::Invalid(format!("cannot set truncation: {e}")))?;
    Ok(())
}

/// Token ids of each text, with the special tokens the tokenizer adds.
pub(crate) fn tokenize(tokenizer: &Tokenizer, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
    texts
        .iter()
        .map(|t| {
            tokenizer
                .encode(*t, true)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| ModelError::Tokenize {
                    text: truncate_for_error(t),
                    message: e.to_string(),
                })
        })
        .collect()
}

/// Right-pads token rows with `pad_id` into `(batch, tokens)` ids and an attention mask (1 =
/// token, 0 = padding).
pub(crate) fn pad_batch(
    ids: &[Vec<u32>],
    pad_id: u32,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let len = ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut flat_ids = Vec::with_capacity(ids.len() * len);
    let mut flat_mask = Vec::with_capacity(ids.len() * len);
    for row in ids {
        flat_ids.extend(row.iter().copied());
        flat_ids.extend(std::iter::repeat_n(pad_id, len - row.len()));
        flat_mask.extend(std::iter::repeat_n(1u32, row.len()));
        flat_mask.extend(std::iter::repeat_n(0u32, len - row.len()));
    }
    let shape = (ids.len(), len);
    Ok((
        Tensor::from_vec(flat_ids, shape, device)?,
        Tensor::from_vec(flat_mask, shape, device)?,
    ))
}

pub(crate) fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    Tokenizer::from_file(path).map_err(|e| ModelError::Tokenizer {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

pub(crate) fn dir_name(dir: &Path) -> String {
    let canonical: PathBuf = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string())
}

fn truncate_for_error(text: &str) -> String {
    text.chars().take(80).collect()
}
