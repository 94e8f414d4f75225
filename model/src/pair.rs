//! A model directory made of published parts: lexicon heads (D2S's, `lsr42/d2s_*`) and the dense
//! model whose embeddings they read (BLIP's, `Salesforce/blip-itm-base-coco`), so that one
//! `--model` serves both, sparse and dense (`lexlip model pair`).
//!
//! ```text
//! OUT/lexlip.json      {"format": "lexlip", "source": {"heads": …, "dense": …}, "card": …}
//! OUT/heads/           links to the heads' files, and the tokenizer of their vocabulary
//! OUT/dense            a link to the dense model's directory
//! ```
//! Links keep the directory small (BLIP is 900 MB) and let the Hugging Face cache hold the
//! files; `cp -rL OUT elsewhere` makes a copy that stands alone.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::{Architecture, read_json};
use crate::error::{ModelError, Result};
use crate::lexlip::{Encoders, ModelSource, detect};

/// What to pair.
#[derive(Debug, Clone)]
pub struct Pair<'a> {
    /// A heads directory: D2S as published, or `heads/` of `lexlip train --objective heads`.
    pub heads: &'a Path,
    /// A dense model directory (BLIP, CLIP, SigLIP, MobileCLIP, a lexlip dense model).
    pub dense: &'a Path,
    /// The heads' vocabulary when their directory has no `tokenizer.json`.
    pub tokenizer: Option<&'a Path>,
    /// Where the paired directory goes (new, or empty).
    pub out: &'a Path,
    /// How the user named the parts (`hf:` ids), recorded in `lexlip.json`.
    pub names: (&'a str, &'a str),
}

/// Writes the paired directory and loads it once (so a pair that does not fit, such as heads
/// reading 256-d embeddings over a 512-d model, is refused here, with the directory removed).
pub fn write(p: &Pair<'_>) -> Result<PathBuf> {
    let heads_config = p.heads.join("config.json");
    if !heads_config.is_file() {
        return Err(ModelError::UnknownModel {
            path: p.heads.to_path_buf(),
            message: "no config.json: not a heads directory".into(),
        });
    }
    match detect(p.dense)? {
        ModelSource::Single(
            _,
            Architecture::Clip
            | Architecture::Siglip
            | Architecture::MobileClip
            | Architecture::DualEncoder
            | Architecture::Fused
            | Architecture::Blip,
        ) => {}
        other => {
            return Err(ModelError::UnknownModel {
                path: p.dense.to_path_buf(),
                message: format!("not a dense model ({other:?})"),
            });
        }
    }
    let base = crate::config::base_model(&read_json(&heads_config)?)
        .unwrap_or_else(|| "the model the heads were built on".into());
    let tokenizer = crate::vocab::find_tokenizer(
        p.heads,
        p.tokenizer,
        &base,
        "give it with --tokenizer (an hf: id for --heads fetches it)",
    )?;
    if p.out.exists()
        && std::fs::read_dir(p.out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(ModelError::Invalid(format!(
            "{} exists and is not empty; choose a new output directory",
            p.out.display()
        )));
    }
    let result =
        link_parts(p, &tokenizer).and_then(|()| Encoders::load(p.out, &crate::Device::Cpu));
    match result {
        Ok(_) => Ok(p.out.to_path_buf()),
        Err(e) => {
            let _ = std::fs::remove_dir_all(p.out);
            Err(e)
        }
    }
}

fn link_parts(p: &Pair<'_>, tokenizer: &Path) -> Result<()> {
    let heads_out = p.out.join("heads");
    std::fs::create_dir_all(&heads_out).map_err(|e| ModelError::io(&heads_out, e))?;
    let entries = std::fs::read_dir(p.heads).map_err(|e| ModelError::io(p.heads, e))?;
    for entry in entries {
        let path = entry.map_err(|e| ModelError::io(p.heads, e))?.path();
        let keep = path
            .extension()
            .is_some_and(|x| x == "json" || x == "safetensors" || x == "bin" || x == "md");
        if let (true, Some(name)) = (keep && path.is_file(), path.file_name()) {
            link(&path, &heads_out.join(name))?;
        }
    }
    let tokenizer_out = heads_out.join("tokenizer.json");
    if !tokenizer_out.exists() {
        link(tokenizer, &tokenizer_out)?;
    }
    link(p.dense, &p.out.join("dense"))?;
    let lexlip = json!({
        "format": "lexlip",
        "source": {"heads": p.names.0, "dense": p.names.1},
        "card": format!("lexicon heads {} over the dense model {}", p.names.0, p.names.1),
    });
    let path = p.out.join("lexlip.json");
    let text =
        serde_json::to_string_pretty(&lexlip).map_err(|e| ModelError::Invalid(e.to_string()))?;
    std::fs::write(&path, text + "\n").map_err(|e| ModelError::io(&path, e))
}

/// A link at `to` to `from` (absolute), or a copy where links are not available.
fn link(from: &Path, to: &Path) -> Result<()> {
    let from = from.canonicalize().map_err(|e| ModelError::io(from, e))?;
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&from, to).map_err(|e| ModelError::io(to, e))
    }
    #[cfg(not(unix))]
    {
        std::fs::copy(&from, to)
            .map(drop)
            .map_err(|e| ModelError::io(to, e))
    }
}
