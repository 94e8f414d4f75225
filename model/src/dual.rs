//! The dense dual encoder `lexlip train --objective dense` writes: a BERT text tower and a BEiT
//! image tower (the LexLIP towers without their MLM heads), each pooled at its `[CLS]` token and
//! projected linearly into one space, then L2-normalised (CLIP's recipe on LexLIP's towers, the
//! dense baseline the lexicon model is compared with).
//!
//! A directory:
//! ```text
//! config.json                {"model_type": "lexlip-dual-encoder", "projection_dim": 256,
//!                             "pooling": "cls", "max_length": 40,
//!                             "text_config": {BERT config}, "vision_config": {BEiT config}}
//! model.safetensors          text_model.bert.*            BertForMaskedLM's tree without `cls.*`
//!                            vision_model.beit.*, vision_model.layernorm.*
//!                                                         BeitForMaskedImageModeling's tree
//!                            text_projection.weight       (projection_dim, text hidden), no bias
//!                            visual_projection.weight     (projection_dim, image hidden), no bias
//! tokenizer.json             the text tower's word pieces
//! preprocessor_config.json   image mean/std (optional; BEiT's 0.5 otherwise)
//! ```
//!
//! The top-level names are Hugging Face's dual-encoder names (`VisionTextDualEncoderModel`,
//! CLIP); inside each tower they are the names the crate's BERT ([`BertModel`]) and BEiT
//! ([`Beit`]) encoders already load, so the towers are those encoders unchanged.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, linear_no_bias};
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use lexlip_proto::DenseVector;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::beit::{self, Beit};
use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, image_embeddings, unit_text_rows};
use crate::error::{ModelError, Result};
use crate::image::{ImageProcessor, PreprocessedImage, default_dtype};
use crate::text::{DEFAULT_MAX_LENGTH, bert_defaults};
use crate::tokens::{load_tokenizer, pad_batch, pad_id, tokenize, truncate_to};
use crate::weights::Weights;

pub use crate::config::{DUAL_ARCHITECTURE as ARCHITECTURE, DUAL_MODEL_TYPE as MODEL_TYPE};
/// Tensor-name prefixes of the two towers and names of the projections.
pub const TEXT_PREFIX: &str = "text_model.";
pub const VISION_PREFIX: &str = "vision_model.";
pub const TEXT_PROJECTION: &str = "text_projection";
pub const VISUAL_PROJECTION: &str = "visual_projection";

/// Texts per forward pass.
const TEXT_CHUNK: usize = 64;

/// Which hidden state represents an input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The `[CLS]` token's final hidden state (position 0 of both towers).
    #[default]
    Cls,
}

/// A dual encoder's `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Embedding dimension.
    pub projection_dim: usize,
    pub pooling: Pooling,
    /// Tokens per text, special tokens included ([`DEFAULT_MAX_LENGTH`] when unset).
    pub max_length: usize,
    /// The text tower (Hugging Face `BertConfig`, its defaults for missing keys).
    pub text: BertConfig,
    /// The image tower.
    pub vision: beit::Config,
}

#[derive(Deserialize)]
struct RawConfig {
    projection_dim: usize,
    #[serde(default)]
    pooling: Pooling,
    #[serde(default)]
    max_length: Option<usize>,
    text_config: Value,
    vision_config: Value,
}

impl Config {
    /// Reads and checks a dual encoder's `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        let raw: RawConfig = with_defaults(path, &read_json(path)?, serde_json::json!({}))?;
        let text: BertConfig = with_defaults(path, &raw.text_config, bert_defaults())?;
        let vision: beit::Config = with_defaults(path, &raw.vision_config, serde_json::json!({}))?;
        let max_length = raw.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
        if raw.projection_dim == 0 {
            return Err(ModelError::config(path, "projection_dim must be positive"));
        }
        if max_length < 2 || max_length > text.max_position_embeddings {
            return Err(ModelError::config(
                path,
                format!(
                    "max_length {max_length} must be between 2 and the text tower's {} positions",
                    text.max_position_embeddings
                ),
            ));
        }
        Ok(Self {
            projection_dim: raw.projection_dim,
            pooling: raw.pooling,
            max_length,
            text,
            vision,
        })
    }
}

/// BERT + BEiT towers → `[CLS]` → linear projections → unit vectors in one space.
pub struct DualEncoder {
    text: BertModel,
    vision: Beit,
    text_projection: Linear,
    visual_projection: Linear,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    device: Device,
    config: Config,
    pad_id: u32,
}

impl std::fmt::Debug for DualEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DualEncoder")
            .field("dim", &self.config.projection_dim)
            .field("max_length", &self.config.max_length)
            .field("image_size", &self.vision.input_size())
            .field("image_dtype", &self.vision.dtype())
            .field("device", &self.device)
            .finish()
    }
}

impl DualEncoder {
    /// Loads a dual encoder directory; the image tower runs in f32 on the CPU, f16 on a GPU.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        Self::load_with_dtype(dir, device, default_dtype(device))
    }

    /// Loads with the image tower in `dtype` (the text tower always runs in f32: its attention
    /// mask uses `f32::MIN`).
    pub fn load_with_dtype(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let config = Config::read(&cfg_path)?;
        let weights = Weights::from_safetensors_dir(dir)?;
        let text_vb = weights.var_builder(DType::F32, device);
        let vision_vb = weights.var_builder(dtype, device);
        let (ht, hv, dim) = (
            config.text.hidden_size,
            config.vision.hidden_size,
            config.projection_dim,
        );
        let built = || -> candle_core::Result<_> {
            Ok((
                BertModel::load(text_vb.pp("text_model").pp("bert"), &config.text)?,
                Beit::load(vision_vb.pp("vision_model"), &config.vision)?,
                linear_no_bias(ht, dim, text_vb.pp(TEXT_PROJECTION))?,
                linear_no_bias(hv, dim, vision_vb.pp(VISUAL_PROJECTION))?,
            ))
        };
        let (text, vision, text_projection, visual_projection) =
            built().map_err(|e| weights.load_error(e))?;
        let tok_path = crate::vocab::tokenizer_json(dir);
        let mut tokenizer = load_tokenizer(&tok_path)?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > config.text.vocab_size {
            return Err(ModelError::ShapeMismatch {
                file: tok_path,
                name: "model.vocab".into(),
                expected: vec![config.text.vocab_size],
                got: vec![vocab],
            });
        }
        let pad_id = pad_id(&tokenizer, config.text.pad_token_id);
        truncate_to(&mut tokenizer, config.max_length)?;
        let processor =
            ImageProcessor::beit(config.vision.image_size).with_preprocessor_config(dir)?;
        Ok(Self {
            text,
            vision,
            text_projection,
            visual_projection,
            tokenizer,
            processor,
            device: device.clone(),
            config,
            pad_id,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Sets the maximum number of tokens per text (special tokens included; at most the text
    /// tower's `max_position_embeddings`).
    pub fn with_max_length(mut self, max_length: usize) -> Result<Self> {
        if max_length < 2 || max_length > self.config.text.max_position_embeddings {
            return Err(ModelError::Invalid(format!(
                "max_length must be between 2 and {}, got {max_length}",
                self.config.text.max_position_embeddings
            )));
        }
        truncate_to(&mut self.tokenizer, max_length)?;
        self.config.max_length = max_length;
        Ok(self)
    }

    pub fn image_size(&self) -> usize {
        self.vision.input_size()
    }

    /// Token ids of each text (with `[CLS]`/`[SEP]`, truncated to `max_length`).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        tokenize(&self.tokenizer, texts)
    }

    /// Projected, not yet normalised text embeddings `(batch, dim)` in f32.
    pub fn text_features(&self, texts: &[&str]) -> Result<Tensor> {
        let mut parts = Vec::new();
        for chunk in texts.chunks(TEXT_CHUNK) {
            let (ids, mask) = pad_batch(&self.tokenize(chunk)?, self.pad_id, &self.device)?;
            let hidden = self.text.forward(&ids, &ids.zeros_like()?, Some(&mask))?;
            parts.push(
                self.text_projection
                    .forward(&pool(&hidden, self.config.pooling)?)?,
            );
        }
        if parts.is_empty() {
            let dim = self.config.projection_dim;
            return Ok(Tensor::zeros((0, dim), DType::F32, &self.device)?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }
}

/// The representation of each sequence in `(batch, tokens, hidden)` states.
fn pool(hidden: &Tensor, pooling: Pooling) -> Result<Tensor> {
    match pooling {
        Pooling::Cls => Ok(hidden.narrow(1, 0, 1)?.squeeze(1)?.contiguous()?),
    }
}

impl DenseEncoder for DualEncoder {
    fn dim(&self) -> usize {
        self.config.projection_dim
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        unit_text_rows(texts, |t| self.text_features(t))
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// Projected, not yet normalised image embeddings `(batch, dim)` in f32.
    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let hidden = self.vision.forward(pixels)?;
        let pooled = pool(&hidden, self.config.pooling)?;
        Ok(self
            .visual_projection
            .forward(&pooled)?
            .to_dtype(DType::F32)?)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn encode_images(&self, images: &[PreprocessedImage]) -> Result<Vec<DenseVector>> {
        image_embeddings(images, self.vision.input_size(), &self.device, |px| {
            self.image_features(px)
        })
    }
}
