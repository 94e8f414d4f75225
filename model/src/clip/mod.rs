//! CLIP as the dense fallback encoder (Hugging Face layout, e.g. `openai/clip-vit-base-patch32`):
//! `config.json` read into the towers' shapes, tokenisation, preprocessing and L2
//! normalisation; the towers themselves are in [`towers`].

mod towers;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use lexlip_proto::DenseVector;
use serde::Deserialize;
use serde_json::json;
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, unit_text_rows};
use crate::error::Result;
use crate::fast::Activation;
use crate::image::ImageProcessor;
use crate::tokens::{load_tokenizer, tokenize, truncate_to};
use crate::weights::Weights;

pub use towers::{TextSize, TextTower, TowerShape, VisionSize, VisionTower};

#[derive(Debug, Clone, Deserialize)]
struct HfText {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    max_position_embeddings: usize,
    hidden_act: Activation,
    layer_norm_eps: f64,
    eos_token_id: u32,
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
    hidden_act: Activation,
    layer_norm_eps: f64,
}

/// A CLIP `config.json`: both towers' shapes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipConfig {
    pub text: TowerShape,
    pub text_size: TextSize,
    pub vision: TowerShape,
    pub vision_size: VisionSize,
}

/// Reads a Hugging Face CLIP `config.json` (HF's defaults for missing keys, including the
/// legacy end-of-text id 2, which pools at the largest id).
pub fn load_config(path: &Path) -> Result<ClipConfig> {
    let raw = read_json(path)?;
    let sub = |k: &str| raw.get(k).cloned().unwrap_or_else(|| json!({}));
    let text: HfText = with_defaults(
        path,
        &sub("text_config"),
        json!({"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048,
               "num_hidden_layers": 12, "num_attention_heads": 8, "max_position_embeddings": 77,
               "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "eos_token_id": 2}),
    )?;
    let vision: HfVision = with_defaults(
        path,
        &sub("vision_config"),
        json!({"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
               "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32,
               "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}),
    )?;
    let dim = raw
        .get("projection_dim")
        .and_then(|v| v.as_u64())
        .unwrap_or(512) as usize;
    Ok(ClipConfig {
        text: TowerShape {
            hidden: text.hidden_size,
            intermediate: text.intermediate_size,
            layers: text.num_hidden_layers,
            heads: text.num_attention_heads,
            eps: text.layer_norm_eps,
            act: text.hidden_act,
        },
        text_size: TextSize {
            vocab: text.vocab_size,
            positions: text.max_position_embeddings,
            dim,
            eos: text.eos_token_id,
        },
        vision: TowerShape {
            hidden: vision.hidden_size,
            intermediate: vision.intermediate_size,
            layers: vision.num_hidden_layers,
            heads: vision.num_attention_heads,
            eps: vision.layer_norm_eps,
            act: vision.hidden_act,
        },
        vision_size: VisionSize {
            image: vision.image_size,
            patch: vision.patch_size,
            channels: vision.num_channels,
            dim,
        },
    })
}

/// CLIP text + image towers → L2-normalised embeddings in one space.
pub struct ClipEncoder {
    text: TextTower,
    vision: VisionTower,
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
        let text = TextTower::load(&vb, &config.text, config.text_size)
            .map_err(|e| weights.load_error(e))?;
        let vision = VisionTower::load(&vb, &config.vision, config.vision_size)
            .map_err(|e| weights.load_error(e))?;
        let mut tokenizer = load_tokenizer(&dir.join("tokenizer.json"))?;
        truncate_to(&mut tokenizer, config.text_size.positions)?;
        let processor =
            ImageProcessor::clip(config.vision_size.image).with_preprocessor_config(dir)?;
        Ok(Self {
            text,
            vision,
            tokenizer,
            processor,
            device: device.clone(),
            dim: config.text_size.dim,
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
        unit_text_rows(texts, |texts| {
            Ok(self.text.features(&self.tokenize(texts)?)?)
        })
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        Ok(self.vision.features(pixels)?)
    }
}
