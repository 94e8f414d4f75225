//! BLIP's `config.json` (Hugging Face `BlipConfig`, `model_type: "blip"`), with transformers'
//! defaults (`configuration_blip.py`) for the keys a file omits, and the tensors the
//! image-text contrastive (ITC) path of `BlipForImageTextRetrieval` reads.
//!
//! Note transformers' text defaults are not the base model's: `BlipTextConfig` defaults to 8
//! attention heads and a vocabulary of 30524 (BERT's 30522 plus `[DEC]` and `[ENC]`), so a
//! config that omits `num_attention_heads` gets 8 here too, as it would there.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{read_json, with_defaults};
use crate::error::{ModelError, Result};
pub use crate::fast::Activation;
use crate::fast::BertShape;

/// The `model_type` of a BLIP `config.json`.
pub const MODEL_TYPE: &str = "blip";

/// The text tower (`text_config`, transformers' `BlipTextConfig`): a post-norm BERT encoder with
/// word and position embeddings (no token types).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TextConfig {
    /// The encoder's shape (BLIP's has no token types).
    #[serde(flatten)]
    pub bert: BertShape,
    pub pad_token_id: usize,
    /// Whether the layers carry cross-attention to the image (the checkpoint's; ITC never runs it).
    pub is_decoder: bool,
}

/// The image tower (`vision_config`, transformers' `BlipVisionConfig`): a pre-norm ViT with a
/// class token and a final layer norm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Side of the square input in pixels (384 for the base models).
    #[serde(deserialize_with = "square")]
    pub image_size: usize,
    #[serde(deserialize_with = "square")]
    pub patch_size: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
}

impl VisionConfig {
    /// Patches per side.
    pub fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Tokens the encoder reads: the class token and one per patch.
    pub fn positions(&self) -> usize {
        self.grid() * self.grid() + 1
    }
}

/// A side given as one number or as a square `[height, width]` pair (transformers accepts both).
fn square<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Side {
        One(usize),
        Two([usize; 2]),
    }
    match Side::deserialize(d)? {
        Side::One(n) => Ok(n),
        Side::Two([h, w]) if h == w => Ok(h),
        Side::Two([h, w]) => Err(serde::de::Error::custom(format!(
            "only square images are supported, got {h} x {w}"
        ))),
    }
}

/// A BLIP `config.json`: both towers and the width of the shared ITC space.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub text: TextConfig,
    pub vision: VisionConfig,
    /// Width of the image-text contrastive space (`vision_proj`, `text_proj`): 256 for the base
    /// models.
    pub image_text_hidden_size: usize,
}

/// transformers' `BlipTextConfig` defaults.
fn text_defaults() -> Value {
    json!({
        "vocab_size": 30524, "hidden_size": 768, "intermediate_size": 3072,
        "num_hidden_layers": 12, "num_attention_heads": 8, "max_position_embeddings": 512,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0, "is_decoder": true,
    })
}

/// transformers' `BlipVisionConfig` defaults.
fn vision_defaults() -> Value {
    json!({
        "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "image_size": 384, "patch_size": 16, "hidden_act": "gelu",
        "layer_norm_eps": 1e-5,
    })
}

impl Config {
    /// Reads and checks a BLIP `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        Self::from_json(path, &read_json(path)?)
    }

    /// Checks the parsed `config.json` at `path` (named in errors).
    pub fn from_json(path: &Path, raw: &Value) -> Result<Self> {
        match raw.get("model_type").and_then(Value::as_str) {
            None | Some(MODEL_TYPE) => {}
            Some(other) => {
                return Err(ModelError::config(
                    path,
                    format!("model_type {other:?} is not {MODEL_TYPE:?}"),
                ));
            }
        }
        let sub = |k: &str| raw.get(k).cloned().unwrap_or_else(|| json!({}));
        let mut text: TextConfig = with_defaults(path, &sub("text_config"), text_defaults())?;
        // BLIP's text embeddings have no token types, whatever key a file carries.
        text.bert.type_vocab_size = 0;
        let vision: VisionConfig = with_defaults(path, &sub("vision_config"), vision_defaults())?;
        let image_text_hidden_size = match raw.get("image_text_hidden_size") {
            None | Some(Value::Null) => 256,
            Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
                ModelError::config(path, "image_text_hidden_size must be a positive integer")
            })?,
        };
        let config = Self {
            text,
            vision,
            image_text_hidden_size,
        };
        config.check().map_err(|m| ModelError::config(path, m))?;
        Ok(config)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let (t, v) = (&self.text, &self.vision);
        for (tower, hidden, heads) in [
            ("text", t.bert.hidden_size, t.bert.num_attention_heads),
            ("vision", v.hidden_size, v.num_attention_heads),
        ] {
            if heads == 0 || hidden == 0 || !hidden.is_multiple_of(heads) {
                return Err(format!(
                    "{tower} hidden_size {hidden} is not a positive multiple of num_attention_heads {heads}"
                ));
            }
        }
        if v.patch_size == 0 || v.image_size == 0 || !v.image_size.is_multiple_of(v.patch_size) {
            return Err(format!(
                "vision image_size {} is not a positive multiple of patch_size {}",
                v.image_size, v.patch_size
            ));
        }
        if t.bert.num_hidden_layers == 0 || v.num_hidden_layers == 0 {
            return Err("both towers need at least one layer".into());
        }
        if t.bert.max_position_embeddings < 2 {
            return Err("text max_position_embeddings must be at least 2 ([CLS] and [SEP])".into());
        }
        if t.pad_token_id >= t.bert.vocab_size {
            return Err(format!(
                "text pad_token_id {} is outside the vocabulary of {}",
                t.pad_token_id, t.bert.vocab_size
            ));
        }
        if self.image_text_hidden_size == 0 {
            return Err("image_text_hidden_size must be positive".into());
        }
        Ok(())
    }

    /// Every tensor the ITC path reads, by its Hugging Face name (`BlipForImageTextRetrieval`);
    /// a checkpoint must hold them all. What ITC does not read (`itm_head.*`, the text layers'
    /// `crossattention.*`) may be there or not.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut add = |prefix: &str, parts: &[&str]| {
            names.extend(parts.iter().map(|p| format!("{prefix}{p}")));
        };
        const LINEAR: [&str; 2] = ["weight", "bias"];
        add(
            "vision_model.embeddings.",
            &[
                "class_embedding",
                "position_embedding",
                "patch_embedding.weight",
                "patch_embedding.bias",
            ],
        );
        for i in 0..self.vision.num_hidden_layers {
            let p = format!("vision_model.encoder.layers.{i}.");
            for m in [
                "self_attn.qkv",
                "self_attn.projection",
                "layer_norm1",
                "mlp.fc1",
                "mlp.fc2",
                "layer_norm2",
            ] {
                add(&format!("{p}{m}."), &LINEAR);
            }
        }
        add("vision_model.post_layernorm.", &LINEAR);
        add("vision_proj.", &LINEAR);
        add("text_proj.", &LINEAR);
        names.extend(self.text.bert.tensor_names("text_encoder."));
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: Value) -> Result<Config> {
        Config::from_json(Path::new("config.json"), &raw)
    }

    #[test]
    fn an_empty_config_is_transformers_defaults() {
        let c = parse(json!({})).unwrap();
        assert_eq!(c.text.bert.num_attention_heads, 8);
        assert_eq!(c.text.bert.vocab_size, 30524);
        assert_eq!(c.text.bert.layer_norm_eps, 1e-12);
        assert_eq!(c.text.bert.type_vocab_size, 0);
        assert_eq!(c.vision.image_size, 384);
        assert_eq!(c.vision.positions(), 577);
        assert_eq!(c.vision.layer_norm_eps, 1e-5);
        assert_eq!(c.vision.hidden_act, Activation::Gelu);
        assert_eq!(c.image_text_hidden_size, 256);
        // 4 embedding + 12 × 12 layer + 2 post-norm; 4 + 12 × 16; two projections.
        assert_eq!(c.tensor_names().len(), 150 + 196 + 4);
    }

    #[test]
    fn sizes_may_be_pairs_and_nulls_are_defaults() {
        let c = parse(json!({"vision_config": {"image_size": [224, 224], "patch_size": null}}))
            .unwrap();
        assert_eq!((c.vision.image_size, c.vision.patch_size), (224, 16));
        let e = parse(json!({"vision_config": {"image_size": [224, 192]}})).unwrap_err();
        assert!(e.to_string().contains("224 x 192"), "{e}");
    }

    #[test]
    fn inconsistent_configs_are_refused() {
        for (raw, needle) in [
            (json!({"model_type": "blip-2"}), "blip-2"),
            (
                json!({"text_config": {"hidden_size": 100}}),
                "text hidden_size 100",
            ),
            (
                json!({"vision_config": {"patch_size": 15}}),
                "patch_size 15",
            ),
            (json!({"text_config": {"hidden_act": "mish"}}), "mish"),
            (
                json!({"text_config": {"vocab_size": 10, "pad_token_id": 10}}),
                "pad_token_id",
            ),
            (
                json!({"image_text_hidden_size": 0}),
                "image_text_hidden_size",
            ),
        ] {
            let e = parse(raw).unwrap_err().to_string();
            assert!(e.contains(needle), "{e} should name {needle}");
        }
    }
}
