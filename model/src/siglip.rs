//! SigLIP (Hugging Face `SiglipModel` layout, e.g. `google/siglip-base-patch16-224`) as a frozen
//! dense dual encoder, run by candle-transformers' SigLIP: the dense fallback, and a backbone
//! whose embeddings lexicon heads can be trained on.
//!
//! What this file adds is SigLIP's input conventions: texts end with the tokenizer's `</s>` and
//! are padded to the full context with the pad id, unmasked (the text tower pools the last
//! position, as SigLIP was trained); images are resized on both sides, without a crop.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::siglip;
use lexlip_proto::DenseVector;
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, text_embeddings};
use crate::error::{ModelError, Result};
use crate::image::ImageProcessor;
use crate::tokens::{load_tokenizer, tokenize};
use crate::weights::Weights;

/// Reads a Hugging Face SigLIP `config.json` (Hugging Face's defaults for missing keys).
pub fn load_config(path: &Path) -> Result<siglip::Config> {
    let raw = read_json(path)?;
    let sub = |k: &str| raw.get(k).cloned().unwrap_or_else(|| serde_json::json!({}));
    let config = siglip::Config {
        text_config: with_defaults(path, &sub("text_config"), serde_json::json!({}))?,
        vision_config: with_defaults(path, &sub("vision_config"), serde_json::json!({}))?,
    };
    let (t, v) = (&config.text_config, &config.vision_config);
    if t.hidden_size != v.hidden_size {
        return Err(ModelError::config(
            path,
            format!(
                "text hidden_size {} and vision hidden_size {} differ: SigLIP compares the two \
                 towers' pooled states directly",
                t.hidden_size, v.hidden_size
            ),
        ));
    }
    if v.patch_size == 0 || !v.image_size.is_multiple_of(v.patch_size) {
        return Err(ModelError::config(
            path,
            format!(
                "vision image_size {} is not a multiple of patch_size {}",
                v.image_size, v.patch_size
            ),
        ));
    }
    Ok(config)
}

/// SigLIP's text and image towers → L2-normalised embeddings in one space.
pub struct SiglipEncoder {
    model: siglip::Model,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    /// Token positions every text is padded to, and the padding id.
    context: usize,
    pad_id: u32,
    device: Device,
    dim: usize,
}

impl std::fmt::Debug for SiglipEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SiglipEncoder(dim {}, {} tokens, {} px)",
            self.dim, self.context, self.processor.size
        )
    }
}

impl SiglipEncoder {
    /// Loads a Hugging Face SigLIP directory (`config.json`, `*.safetensors`, `tokenizer.json`,
    /// optional `preprocessor_config.json`). Runs in f32.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = load_config(&dir.join("config.json"))?;
        let weights = Weights::from_safetensors_dir(dir)?;
        let vb = weights.var_builder(DType::F32, device);
        let model = siglip::Model::new(&config, vb).map_err(|e| weights.load_error(e))?;
        let tokenizer = load_tokenizer(&dir.join("tokenizer.json"))?;
        let processor = ImageProcessor::siglip(config.vision_config.image_size)
            .with_preprocessor_config(dir)?;
        Ok(Self {
            model,
            tokenizer,
            processor,
            context: config.text_config.max_position_embeddings,
            pad_id: config.text_config.pad_token_id,
            device: device.clone(),
            dim: config.text_config.hidden_size,
        })
    }

    /// Token ids per text as the text tower reads them: cut to the context length, then padded
    /// to it with the pad id.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        Ok(tokenize(&self.tokenizer, texts)?
            .into_iter()
            .map(|mut ids| {
                ids.truncate(self.context);
                ids.resize(self.context, self.pad_id);
                ids
            })
            .collect())
    }
}

impl DenseEncoder for SiglipEncoder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        // Every row is already the whole context long (see `tokenize`).
        text_embeddings(&self.tokenize(texts)?, self.pad_id, &self.device, |ids| {
            self.model.get_text_features(ids)
        })
    }

    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        Ok(self.model.get_image_features(pixels)?)
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
