//! Downloading a model directory from the Hugging Face Hub by repository id (feature `hub`).
//! Files land in the standard HF cache (`HF_HOME`), so a machine that went offline keeps working
//! from what it fetched before.

use std::path::PathBuf;

use crate::error::{ModelError, Result};

/// Files of one encoder directory in the Hugging Face layout; the optional ones are skipped when
/// the repository lacks them.
const REQUIRED: &[&str] = &["config.json", "tokenizer.json", "model.safetensors"];
const OPTIONAL: &[&str] = &["preprocessor_config.json"];
/// The same in open_clip's layout (MobileCLIP: `apple/MobileCLIP-S1-OpenCLIP`), tried when the
/// repository has no `config.json`.
const OPEN_CLIP: &[&str] = &[
    "open_clip_config.json",
    "tokenizer.json",
    "open_clip_model.safetensors",
];

/// Fetches (or finds in the cache) `repo_id`'s encoder files and returns their directory.
pub fn download(repo_id: &str) -> Result<PathBuf> {
    let err = |message: String| ModelError::UnknownModel {
        path: PathBuf::from(repo_id),
        message,
    };
    let api = hf_hub::api::sync::Api::new().map_err(|e| err(e.to_string()))?;
    let repo = api.model(repo_id.to_string());
    let cache = hf_hub::Cache::from_env().model(repo_id.to_string());
    let fetch = |file: &str| -> Result<PathBuf> {
        match cache.get(file) {
            Some(p) => Ok(p),
            None => repo
                .get(file)
                .map_err(|e| err(format!("cannot fetch {file}: {e}"))),
        }
    };
    let (required, optional) = match fetch(REQUIRED[0]) {
        Ok(_) => (REQUIRED, OPTIONAL),
        Err(hf) => match fetch(OPEN_CLIP[0]) {
            Ok(_) => (OPEN_CLIP, &[][..]),
            Err(_) => return Err(hf),
        },
    };
    let mut dir = None;
    for file in required {
        dir = fetch(file)?.parent().map(PathBuf::from);
    }
    for file in optional {
        if cache.get(file).is_none() {
            let _ = repo.get(file);
        }
    }
    dir.ok_or_else(|| err("no files".into()))
}

/// A file of `repo_id` already in the Hugging Face cache, without any download: how a model
/// directory finds a file its repository leaves to another one (VDR's tokenizer is
/// bert-base-uncased's), online or not.
pub fn cached(repo_id: &str, file: &str) -> Option<PathBuf> {
    hf_hub::Cache::from_env()
        .model(repo_id.to_string())
        .get(file)
}
