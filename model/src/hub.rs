//! Downloading a model directory from the Hugging Face Hub by repository id (feature `hub`).
//! Files land in the standard HF cache (`HF_HOME`), so a machine that went offline keeps working
//! from what it fetched before.
//!
//! A repository holds its configuration, its weights as `model.safetensors` or (older uploads)
//! `pytorch_model.bin`, and usually its tokenizer. Published lexicon models often leave the
//! tokenizer to the model they were built on (VDR's is bert-base-uncased's, D2S's
//! distilbert-base-uncased's): that one is fetched from the repository its config names, into
//! the cache, where the loader looks for it ([`cached`]).

use std::path::PathBuf;

use crate::error::{ModelError, Result};

/// The configuration file of a Hugging Face layout repository.
const CONFIG: &str = "config.json";
/// Its weights, in order of preference.
const WEIGHTS: &[&str] = &["model.safetensors", crate::weights::PYTORCH_WEIGHTS];
const TOKENIZER: &str = "tokenizer.json";
const OPTIONAL: &[&str] = &["preprocessor_config.json", "README.md"];
/// The same in open_clip's layout (MobileCLIP: `apple/MobileCLIP-S1-OpenCLIP`), tried when the
/// repository has no `config.json`.
const OPEN_CLIP: &[&str] = &[
    "open_clip_config.json",
    "tokenizer.json",
    "open_clip_model.safetensors",
];

/// Fetches (or finds in the cache) `repo_id`'s model files and returns their directory. What
/// the cache holds is used without asking the network, so a model fetched once loads offline.
pub fn download(repo_id: &str) -> Result<PathBuf> {
    let err = |message: String| ModelError::UnknownModel {
        path: PathBuf::from(repo_id),
        message,
    };
    let api = hf_hub::api::sync::Api::new().map_err(|e| err(e.to_string()))?;
    // The first of `files` that `repo` has: from the cache if it holds one, else downloaded.
    let first = |repo: &str, files: &[&str]| -> Result<PathBuf> {
        if let Some(p) = files.iter().find_map(|f| cached(repo, f)) {
            return Ok(p);
        }
        let mut last = None;
        for file in files {
            match api.model(repo.to_string()).get(file) {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(format!("cannot fetch {file} of {repo}: {e}")),
            }
        }
        Err(err(last.unwrap_or_else(|| "nothing to fetch".into())))
    };
    let config = match first(repo_id, &[CONFIG]) {
        Ok(path) => path,
        Err(hf) => {
            // open_clip's layout has no config.json.
            if first(repo_id, &OPEN_CLIP[..1]).is_err() {
                return Err(hf);
            }
            let mut dir = None;
            for file in OPEN_CLIP {
                dir = first(repo_id, &[file])?.parent().map(PathBuf::from);
            }
            return dir.ok_or_else(|| err("no files".into()));
        }
    };
    let weights = first(repo_id, WEIGHTS)?;
    // The repository's tokenizer, else its base model's, each from the cache first.
    let base = crate::config::base_model(&crate::config::read_json(&config)?);
    let cached_tokenizer =
        cached(repo_id, TOKENIZER).or_else(|| base.as_deref().and_then(|b| cached(b, TOKENIZER)));
    if cached_tokenizer.is_none() && first(repo_id, &[TOKENIZER]).is_err() {
        let base = base.ok_or_else(|| {
            err(format!(
                "the repository has no {TOKENIZER} and its {CONFIG} names no model to take it from"
            ))
        })?;
        first(&base, &[TOKENIZER])?;
    }
    for file in OPTIONAL {
        let _ = first(repo_id, &[file]);
    }
    weights
        .parent()
        .map(PathBuf::from)
        .ok_or_else(|| err("no files".into()))
}

/// A file of `repo_id` already in the Hugging Face cache, without any download: how a model
/// directory finds a file its repository leaves to another one (VDR's tokenizer is
/// bert-base-uncased's), online or not.
pub fn cached(repo_id: &str, file: &str) -> Option<PathBuf> {
    hf_hub::Cache::from_env()
        .model(repo_id.to_string())
        .get(file)
}
