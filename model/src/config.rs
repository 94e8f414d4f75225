//! Reading `config.json` files: what kind of model a directory holds, and typed configs with the
//! Hugging Face defaults filled in for keys older files omit.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ModelError, Result};

/// `model_type` of a dual-encoder directory's `config.json` (`lexlip train --objective dense`).
pub const DUAL_MODEL_TYPE: &str = "lexlip-dual-encoder";
/// Its `architectures` entry.
pub const DUAL_ARCHITECTURE: &str = "LexLipDualEncoder";
/// `model_type` of a fused model's `config.json` (`lexlip train --objective adapter`).
pub const FUSED_MODEL_TYPE: &str = "lexlip-fused";
/// `model_type` of a D2S head's `config.json` ([`crate::d2s`]).
pub const D2S_MODEL_TYPE: &str = "d2s";

/// Whether a `config.json` is a VDR retriever's ([`crate::vdr`]): it has `encoder_q` and
/// `encoder_p`.
pub fn is_vdr(config: &Value) -> bool {
    config.get("encoder_q").is_some_and(Value::is_object)
        && config.get("encoder_p").is_some_and(Value::is_object)
}

/// The model a published lexicon model takes its word pieces from, as its config names it
/// (VDR's `encoder_q.model_id`, D2S's `mlm_head`): its repository often has no tokenizer.
pub fn base_model(config: &Value) -> Option<String> {
    let named = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    named(config.get("encoder_q").and_then(|q| q.get("model_id")))
        .or_else(|| named(config.get("mlm_head")))
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| ModelError::config(path, e.to_string()))
}

/// Deserializes `value` after adding `defaults` for keys it lacks.
pub fn with_defaults<T: DeserializeOwned>(
    path: &Path,
    value: &Value,
    defaults: Value,
) -> Result<T> {
    let mut merged = defaults;
    if let (Some(m), Some(v)) = (merged.as_object_mut(), value.as_object()) {
        for (k, x) in v {
            if !x.is_null() {
                m.insert(k.clone(), x.clone());
            }
        }
    } else {
        return Err(ModelError::config(path, "expected a JSON object"));
    }
    serde_json::from_value(merged).map_err(|e| ModelError::config(path, e.to_string()))
}

/// The architecture family a `config.json` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// BERT-style masked language model (text encoder).
    Bert,
    /// BEiT backbone (image encoder; with an MLM head for LexLIP).
    Beit,
    /// CLIP (dense fallback encoder).
    Clip,
    /// SigLIP (dense fallback encoder, a frozen backbone).
    Siglip,
    /// MobileCLIP in open_clip's layout (`open_clip_config.json`; dense fallback encoder, a frozen
    /// backbone).
    MobileClip,
    /// The dense dual encoder `lexlip train --objective dense` writes ([`crate::dual`]).
    DualEncoder,
    /// A dense teacher with a pretrained image tower beside its own (`lexlip train --objective
    /// adapter`, [`crate::fused`]).
    Fused,
    /// VDR cross-modal, as its authors published it ([`crate::vdr`]): both lexicon encoders.
    Vdr,
    /// A D2S lexicon head ([`crate::d2s`]): loads as `heads/` beside its dense model, not alone.
    D2s,
    /// BLIP's image-text contrastive encoders (`BlipForImageTextRetrieval`, [`crate::blip`]): a
    /// dense model, and the backbone of D2S's published heads.
    Blip,
}

/// Detects the architecture from `model_type`, falling back to `architectures`.
pub fn architecture(path: &Path, config: &Value) -> Result<Architecture> {
    let model_type = config
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let archs: Vec<&str> = config
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let has = |p: &str| archs.iter().any(|a| a.starts_with(p));
    if is_vdr(config) {
        return Ok(Architecture::Vdr);
    }
    match model_type {
        "bert" | "distilbert" => Ok(Architecture::Bert),
        "beit" => Ok(Architecture::Beit),
        "clip" => Ok(Architecture::Clip),
        "siglip" => Ok(Architecture::Siglip),
        DUAL_MODEL_TYPE => Ok(Architecture::DualEncoder),
        FUSED_MODEL_TYPE => Ok(Architecture::Fused),
        D2S_MODEL_TYPE => Ok(Architecture::D2s),
        "blip" => Ok(Architecture::Blip),
        _ if has(DUAL_ARCHITECTURE) => Ok(Architecture::DualEncoder),
        _ if has("Bert") => Ok(Architecture::Bert),
        _ if has("Beit") => Ok(Architecture::Beit),
        _ if has("CLIP") => Ok(Architecture::Clip),
        _ if has("Siglip") => Ok(Architecture::Siglip),
        other => Err(ModelError::UnknownModel {
            path: path.to_path_buf(),
            message: format!(
                "unsupported model_type {other:?} (architectures {archs:?}); expected bert, beit, clip, siglip, {}, {} or a VDR cross-modal retriever",
                DUAL_MODEL_TYPE, FUSED_MODEL_TYPE
            ),
        }),
    }
}
