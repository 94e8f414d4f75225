//! CLIP as the dense fallback encoder (Hugging Face layout, e.g. `openai/clip-vit-base-patch32`),
//! run by candle-transformers' CLIP. This file maps HF's `config.json` onto Candle's config and
//! adds tokenisation, preprocessing and L2 normalisation.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::clip::{
    ClipConfig, ClipModel, text_model::Activation, text_model::ClipTextConfig,
    vision_model::ClipVisionConfig,
};
use lexlip_proto::DenseVector;
use serde::Deserialize;
use serde_json::json;
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, text_embeddings};
use crate::error::{ModelError, Result};
use crate::image::ImageProcessor;
use crate::tokens::{load_tokenizer, tokenize, truncate_to};
use crate::weights::Weights;

#[derive(Debug, Clone, Deserialize)]
struct HfText {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    max_position_embeddings: usize,
    hidden_act: String,
    layer_norm_eps: f64,
}

#[derive(Debug, Clone, Deserialize)]
struct HfVision {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_channels: usize,
    image_size: usize,
    patch_size: usize,
    hidden_act: String,
    layer_norm_eps: f64,
}

/// Reads a Hugging Face CLIP `config.json` into Candle's `ClipConfig` (HF defaults for missing
/// keys). Candle's CLIP implements QuickGELU and `layer_norm_eps = 1e-5` only, as OpenAI's models
/// use; other values are rejected rather than silently run differently.
pub fn load_config(path: &Path) -> Result<ClipConfig> {
    let raw = read_json(path)?;
    let sub = |k: &str| raw.get(k).cloned().unwrap_or_else(|| json!({}));
    let text: HfText = with_defaults(
        path,
        &sub("text_config"),
        json!({"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048,
               "num_hidden_layers": 12, "num_attention_heads": 8, "max_position_embeddings": 77,
               "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}),
    )?;
    let vision: HfVision = with_defaults(
        path,
        &sub("vision_config"),
        json!({"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
               "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32,
               "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}),
    )?;
    let projection_dim = raw
        .get("projection_dim")
        .and_then(|v| v.as_u64())
        .unwrap_or(512) as usize;
    for (what, act, eps) in [
        ("text_config", &text.hidden_act, text.layer_norm_eps),
        ("vision_config", &vision.hidden_act, vision.layer_norm_eps),
    ] {
        if act != "quick_gelu" || (eps - 1e-5).abs() > 1e-12 {
            return Err(ModelError::config(
                path,
                format!(
                    "{what}: hidden_act {act:?} / layer_norm_eps {eps} unsupported (only quick_gelu / 1e-5)"
                ),
            ));
        }
    }
    Ok(ClipConfig {
        text_config: ClipTextConfig {
            vocab_size: text.vocab_size,
            embed_dim: text.hidden_size,
            activation: Activation::QuickGelu,
            intermediate_size: text.intermediate_size,
            max_position_embeddings: text.max_position_embeddings,
            pad_with: None,
            num_hidden_layers: text.num_hidden_layers,
            num_attention_heads: text.num_attention_heads,
            projection_dim,
        },
        vision_config: ClipVisionConfig {
            embed_dim: vision.hidden_size,
            activation: Activation::QuickGelu,
            intermediate_size: vision.intermediate_size,
            num_hidden_layers: vision.num_hidden_layers,
            num_attention_heads: vision.num_attention_heads,
            projection_dim,
            num_channels: vision.num_channels,
            image_size: vision.image_size,
            patch_size: vision.patch_size,
        },
        logit_scale_init_value: 2.6592,
        image_size: vision.image_size,
    })
}

/// CLIP text + image towers → L2-normalised embeddings in one space.
pub struct ClipEncoder {
    model: ClipModel,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    device: Device,
    dim: usize,
}

impl std::fmt::Debug for ClipEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipEncoder")
            .field("dim", &self.dim)
            .field("image_size", &self.processor.size)
            .finish()
    }
}

impl ClipEncoder {
    /// Loads a Hugging Face CLIP directory (`config.json`, `*.safetensors`, `tokenizer.json`,
    /// optional `preprocessor_config.json`). Runs in f32.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = load_config(&dir.join("config.json"))?;
        let weights = Weights::from_safetensors_dir(dir)?;
        let vb = weights.var_builder(DType::F32, device);
        let model = ClipModel::new(vb, &config).map_err(|e| weights.load_error(e))?;
        let mut tokenizer = load_tokenizer(&dir.join("tokenizer.json"))?;
        truncate_to(&mut tokenizer, config.text_config.max_position_embeddings)?;
        let processor = ImageProcessor::clip(config.image_size).with_preprocessor_config(dir)?;
        Ok(Self {
            model,
            tokenizer,
            processor,
            device: device.clone(),
            dim: config.text_config.projection_dim,
        })
    }

    /// Token ids per text (truncated to the model's context length).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        tokenize(&self.tokenizer, texts)
    }
}

impl DenseEncoder for ClipEncoder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        // Candle's CLIP pools at the position of the largest id (the end-of-text token, as in
        // OpenAI's vocabulary) behind a causal mask, so right-padding with id 0 changes nothing.
        text_embeddings(&self.tokenize(texts)?, 0, &self.device, |ids| {
            self.model.get_text_features(ids)
        })
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        Ok(self.model.get_image_features(pixels)?)
    }
}
