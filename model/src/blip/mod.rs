//! BLIP's image-text contrastive (ITC) encoders as a dense encoder: the embeddings the lexicon
//! heads of D2S (Nguyen et al., ECIR 2024) read, from a Hugging Face `BlipForImageTextRetrieval`
//! directory such as `Salesforce/blip-itm-base-coco`.
//!
//! What transformers computes with `forward(..., use_itm_head=False)`, and nothing else:
//! - image: the ViT's last hidden state (after `post_layernorm`) at the class token →
//!   `vision_proj` → L2 normalisation ([`VisionTower`]);
//! - text: the BERT-style text encoder run *without* image states (self-attention only; the
//!   checkpoint's cross-attention and `itm_head` are for image-text matching and are not
//!   loaded) at `[CLS]` → `text_proj` → L2 normalisation ([`TextTower`]).
//!
//! Only the class token reaches the projections, so each tower's last layer is computed for
//! that position alone (keys and values still come from every position): the same numbers for
//! less work than transformers does (7-10 % less time at BLIP base's size). In f32 on the CPU
//! the towers' hot loops take the kernels of [`crate::fast`] (bias, residual and GELU folded
//! into the matrix products, attention per head without copies), faster than PyTorch on 2 cores.
//!
//! A directory:
//! ```text
//! config.json                model_type "blip", text_config, vision_config, image_text_hidden_size
//! model.safetensors          vision_model.*, text_encoder.*, vision_proj.*, text_proj.* (HF names)
//!   or pytorch_model.bin
//! tokenizer.json             BERT uncased word pieces plus BLIP's [DEC] and [ENC]
//! preprocessor_config.json   image mean/std (optional; OpenAI CLIP's otherwise)
//! ```

mod config;
mod text;
mod vision;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use lexlip_proto::DenseVector;
use tokenizers::Tokenizer;

pub use config::{Activation, Config, MODEL_TYPE, TextConfig, VisionConfig};
pub use text::TextTower;
pub use vision::VisionTower;

use crate::dense::{DenseEncoder, unit_text_rows};
use crate::error::{ModelError, Result};
use crate::fast::layers::Linear;
use crate::image::ImageProcessor;
use crate::tokens::{load_tokenizer, pad_batch, tokenize, truncate_to};
use crate::weights::Weights;

/// Tokens per text, `[CLS]` and `[SEP]` included, longer texts being cut: the `max_txt_len` of
/// LAVIS's BLIP retrieval models (35), which they were fine-tuned and evaluated with, so that
/// long captions are embedded as the published model's numbers were measured.
pub const MAX_TEXT_TOKENS: usize = 35;

/// Token rows (texts × their padded length) a group of texts aims at: enough for the matrix
/// products to run at full speed, few enough that texts of like lengths share a group.
const TEXT_GROUP_ROWS: usize = 384;
/// Images per forward pass on the CPU: bounds the transient memory (about 30 MB an image at
/// 384 px) without costing speed (the matrix products already have 577 rows an image).
const CPU_IMAGE_CHUNK: usize = 8;

/// BLIP's two contrastive towers → unit vectors in one space.
pub struct BlipEncoder {
    text: TextTower,
    vision: VisionTower,
    text_proj: Linear,
    vision_proj: Linear,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    config: Config,
    max_length: usize,
    pad_id: u32,
    device: Device,
}

impl std::fmt::Debug for BlipEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlipEncoder")
            .field("dim", &self.config.image_text_hidden_size)
            .field("max_length", &self.max_length)
            .field("image_size", &self.processor.size)
            .field("image_dtype", &self.vision.dtype())
            .field("device", &self.device)
            .finish()
    }
}

impl BlipEncoder {
    /// Loads a BLIP retrieval directory; both towers run in f32.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        Self::load_with_dtype(dir, device, DType::F32)
    }

    /// Loads with the image tower in `dtype` (f16 suits a GPU); the text tower runs in f32
    /// (f64 when `dtype` is), as transformers masks padding with `f32::MIN`. The embeddings are
    /// returned in f32. Only f32 on the CPU takes the towers' fast paths.
    pub fn load_with_dtype(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let config = Config::read(&dir.join("config.json"))?;
        let weights = Weights::from_model_dir(dir)?;
        weights.require("BLIP", &config.tensor_names())?;
        let (text, vision, text_proj, vision_proj) =
            build(&config, &weights, device, dtype).map_err(|e| weights.load_error(e))?;
        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer = load_tokenizer(&tok_path)?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > config.text.bert.vocab_size {
            return Err(ModelError::Tokenizer {
                path: tok_path,
                message: format!(
                    "{vocab} word pieces, but the text tower embeds only {} (text_config.vocab_size)",
                    config.text.bert.vocab_size
                ),
            });
        }
        let max_length = MAX_TEXT_TOKENS.min(config.text.bert.max_position_embeddings);
        truncate_to(&mut tokenizer, max_length)?;
        let size = config.vision.image_size;
        let processor = ImageProcessor {
            size,
            squash: true,
            ..ImageProcessor::clip(size)
        }
        .with_pillow_resampling()
        .with_preprocessor_config(dir)?;
        Ok(Self {
            text,
            vision,
            text_proj,
            vision_proj,
            tokenizer,
            processor,
            pad_id: config.text.pad_token_id as u32,
            config,
            max_length,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Tokens per text, special tokens included ([`MAX_TEXT_TOKENS`], or fewer where the text
    /// tower has fewer positions).
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Token ids per text: `[CLS] … [SEP]`, cut to [`Self::max_length`].
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        tokenize(&self.tokenizer, texts)
    }

    /// Projected, not yet normalised text embeddings `(batch, dim)` of token ids (each at most
    /// the text tower's positions long), in f32.
    pub fn text_features_of_ids(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        if ids.is_empty() {
            let dim = self.config.image_text_hidden_size;
            return Ok(Tensor::zeros((0, dim), DType::F32, &self.device)?);
        }
        let mut rows: Vec<Option<Tensor>> = vec![None; ids.len()];
        for group in length_groups(ids) {
            let texts: Vec<Vec<u32>> = group.iter().map(|&i| ids[i].clone()).collect();
            let (padded, _mask) = pad_batch(&texts, self.pad_id, &self.device)?;
            let lengths: Vec<usize> = texts.iter().map(Vec::len).collect();
            let ragged = lengths.iter().any(|&l| l != lengths[0]);
            let cls = self
                .text
                .class_token(&padded, ragged.then_some(&lengths[..]))?;
            let features = self.text_proj.forward(&cls)?.to_dtype(DType::F32)?;
            for (r, &i) in group.iter().enumerate() {
                rows[i] = Some(features.get(r)?);
            }
        }
        let rows: Vec<Tensor> = rows.into_iter().flatten().collect();
        Ok(Tensor::stack(&rows, 0)?)
    }

    /// Projected, not yet normalised text embeddings `(batch, dim)` in f32.
    pub fn text_features(&self, texts: &[&str]) -> Result<Tensor> {
        self.text_features_of_ids(&self.tokenize(texts)?)
    }

    pub fn text_tower(&self) -> &TextTower {
        &self.text
    }

    pub fn vision_tower(&self) -> &VisionTower {
        &self.vision
    }
}

/// The indices of `ids` in groups of like lengths, each padded to its own longest: a batch of
/// captions of 8 to 20 words pads a third less than as one block, and the embeddings are the
/// same (each text attends to its own tokens only). Each group grows to about
/// [`TEXT_GROUP_ROWS`] padded rows (one text alone if it is longer).
fn length_groups(ids: &[Vec<u32>]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| ids[i].len());
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        current.push(i);
        // Sorted by length: the group's longest is the one just added.
        if current.len() * ids[i].len().max(1) >= TEXT_GROUP_ROWS {
            groups.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

type Built = (TextTower, VisionTower, Linear, Linear);

/// The towers and projections, the image's in `dtype`, the text's in f32 (f64 if `dtype` is).
fn build(
    config: &Config,
    weights: &Weights,
    device: &Device,
    dtype: DType,
) -> candle_core::Result<Built> {
    let text_dtype = if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let text_vb = weights.var_builder(text_dtype, device);
    let vision_vb: VarBuilder = weights.var_builder(dtype, device);
    let dim = config.image_text_hidden_size;
    Ok((
        TextTower::load(&text_vb.pp("text_encoder"), &config.text.bert)?,
        VisionTower::load(&vision_vb.pp("vision_model"), &config.vision)?,
        Linear::load(&text_vb.pp("text_proj"), config.text.bert.hidden_size, dim)?,
        Linear::load(&vision_vb.pp("vision_proj"), config.vision.hidden_size, dim)?,
    ))
}

impl DenseEncoder for BlipEncoder {
    fn dim(&self) -> usize {
        self.config.image_text_hidden_size
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        unit_text_rows(texts, |t| self.text_features(t))
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// Projected, not yet normalised image embeddings `(batch, dim)` in f32.
    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let n = pixels.dim(0)?;
        let chunk = if self.device.is_cpu() {
            CPU_IMAGE_CHUNK
        } else {
            n.max(1)
        };
        let mut parts = Vec::with_capacity(n.div_ceil(chunk));
        for start in (0..n).step_by(chunk) {
            let px = pixels.narrow(0, start, chunk.min(n - start))?;
            let cls = self.vision.class_token(&px)?;
            parts.push(self.vision_proj.forward(&cls)?.to_dtype(DType::F32)?);
        }
        if parts.is_empty() {
            let dim = self.config.image_text_hidden_size;
            return Ok(Tensor::zeros((0, dim), DType::F32, &self.device)?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    fn device(&self) -> &Device {
        &self.device
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;

    fn tiny() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blip-tiny")
    }

    use crate::nn::tests::max_abs_diff as max_diff;

    /// Computing the last layer at the class token only gives the class token of the full
    /// forward pass, padded or not.
    #[test]
    fn class_token_only_last_layer_equals_the_full_pass() {
        let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
        let ids = enc
            .tokenize(&[
                "a man and his family",
                "the city at night was a long way off",
            ])
            .unwrap();
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let (ids, _) = pad_batch(&ids, 0, &Device::Cpu).unwrap();
        let full = enc.text.last_hidden_state(&ids, Some(&lengths)).unwrap();
        let cls = enc.text.class_token(&ids, Some(&lengths)).unwrap();
        let d = max_diff(&full.narrow(1, 0, 1).unwrap().squeeze(1).unwrap(), &cls);
        assert!(d < 1e-5, "text: {d}");

        let n = 2 * 3 * 32 * 32;
        let px: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
            .collect();
        let px = Tensor::from_vec(px, (2, 3, 32, 32), &Device::Cpu).unwrap();
        let full = enc.vision.last_hidden_state(&px).unwrap();
        let cls = enc.vision.class_token(&px).unwrap();
        let d = max_diff(&full.narrow(1, 0, 1).unwrap().squeeze(1).unwrap(), &cls);
        assert!(d < 1e-5, "vision: {d}");
    }

    /// The tensors `require` asks for are all the model reads: it builds from them alone.
    #[test]
    fn the_required_tensors_are_enough() {
        let config = Config::read(&tiny().join("config.json")).unwrap();
        let all = Weights::from_model_dir(&tiny()).unwrap();
        let names = config.tensor_names();
        assert!(
            all.len() > names.len(),
            "the fixture has unused tensors too"
        );
        let only: HashMap<String, Tensor> = names
            .iter()
            .map(|n| (n.clone(), all.get(n).unwrap().clone()))
            .collect();
        let only = Weights::from_tensors(only, "required");
        build(&config, &only, &Device::Cpu, DType::F32).unwrap();
    }

    /// Texts embedded in groups of like lengths give what each gives alone, in input order;
    /// every text lands in exactly one group.
    #[test]
    fn texts_grouped_by_length_embed_as_one_by_one() {
        let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
        let words = [
            "a", "man", "and", "his", "family", "in", "the", "city", "at", "night",
        ];
        let texts: Vec<String> = (0..60)
            .map(|i| {
                words
                    .iter()
                    .cycle()
                    .skip(i % 7)
                    .take(1 + (i * 13) % 30)
                    .copied()
            })
            .map(|w| w.collect::<Vec<_>>().join(" "))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let ids = enc.tokenize(&refs).unwrap();
        let groups = length_groups(&ids);
        assert!(groups.len() > 2, "{} groups", groups.len());
        let mut seen: Vec<usize> = groups.concat();
        seen.sort_unstable();
        assert_eq!(seen, (0..ids.len()).collect::<Vec<_>>());
        let batched = enc.text_features(&refs).unwrap();
        for (i, t) in refs.iter().enumerate() {
            let alone = enc.text_features(&[t]).unwrap();
            let d = max_diff(&batched.narrow(0, i, 1).unwrap(), &alone);
            assert!(d < 1e-5, "text {i}: {d}");
        }
    }
}
