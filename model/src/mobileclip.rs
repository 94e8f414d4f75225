//! MobileCLIP (Apple's `apple/MobileCLIP-S1-OpenCLIP`, `-S2-`, `timm/MobileCLIP2-S0/S2-OpenCLIP`)
//! as a frozen dense dual encoder: the dense fallback, and a backbone whose embeddings lexicon
//! heads can be trained on. Images go through FastViT MCi ([`crate::fastvit`], folded for
//! inference at load), texts through open_clip's text transformer on the pre-norm blocks of
//! [`crate::fast`] ([`TextTower`]).
//!
//! These models come in open_clip's layout, not Hugging Face's: `open_clip_config.json`
//! (`model_cfg`, `preprocess_cfg`), `open_clip_model.safetensors` and `tokenizer.json`. The FastViT
//! block counts and widths are read off the weights, so any MCi variant loads.
//!
//! Input conventions, as open_clip's: texts are cut to the context (the last kept position
//! becomes `<|endoftext|>`) and padded with id 0, unmasked (MobileCLIP's text tower has no causal
//! mask and pools at the largest id, `<|endoftext|>`); images are resized on the shorter side and
//! centre-cropped, not normalised (mean 0, std 1).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use lexlip_proto::DenseVector;
use serde::Deserialize;
use serde_json::{Value, json};
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, unit_text_rows};
use crate::error::{ModelError, Result};
use crate::fast::Activation;
use crate::fast::layers::{LayerNorm, Linear};
use crate::fast::vit::{PreNormBlock, embed_tokens, first_largest, open_clip_block, pooled};
use crate::fastvit::FastVit;
use crate::image::ImageProcessor;
use crate::tokens::{load_tokenizer, tokenize, truncate_to};
use crate::weights::Weights;

/// The file that marks an open_clip model directory.
pub const CONFIG_FILE: &str = "open_clip_config.json";

/// The timm image towers of MobileCLIP that [`crate::fastvit`] runs (MCi3/4, MobileCLIP2's
/// larger ones, have other blocks).
const FASTVIT_TOWERS: [&str; 3] = ["fastvit_mci0", "fastvit_mci1", "fastvit_mci2"];

/// The token open_clip ends every text with, and pools the text tower at.
const END_OF_TEXT: &str = "<|endoftext|>";

#[derive(Debug, Clone, Deserialize)]
struct VisionCfg {
    timm_model_name: String,
    image_size: usize,
}

#[derive(Debug, Clone, Deserialize)]
struct TextCfg {
    context_length: usize,
    vocab_size: usize,
    width: usize,
    heads: usize,
    layers: usize,
    mlp_ratio: f64,
    no_causal_mask: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct PreprocessCfg {
    mean: Option<[f32; 3]>,
    std: Option<[f32; 3]>,
}

/// What lexlip reads of an `open_clip_config.json`.
#[derive(Debug, Clone)]
pub struct MobileClipConfig {
    embed_dim: usize,
    vision: VisionCfg,
    text: TextCfg,
    preprocess: PreprocessCfg,
}

/// Reads an open_clip `open_clip_config.json` (Hub layout: `model_cfg` and `preprocess_cfg`; a
/// bare model config is read too), refusing models this file cannot run; the error says what
/// else the model is and what to use instead.
pub fn load_config(path: &Path) -> Result<MobileClipConfig> {
    let raw = read_json(path)?;
    let model = raw.get("model_cfg").unwrap_or(&raw);
    let sub = |k: &str| model.get(k).cloned().unwrap_or_else(|| json!({}));
    let vision: VisionCfg = with_defaults(
        path,
        &sub("vision_cfg"),
        json!({"timm_model_name": "", "image_size": 224}),
    )?;
    if !FASTVIT_TOWERS.contains(&vision.timm_model_name.as_str()) {
        let tower = if vision.timm_model_name.is_empty() {
            "a non-timm image tower".to_string()
        } else {
            format!("the image tower {:?}", vision.timm_model_name)
        };
        return Err(ModelError::UnknownModel {
            path: path.to_path_buf(),
            message: format!(
                "an open_clip model with {tower}; lexlip loads open_clip's MobileCLIP with a \
                 FastViT image tower ({}: MobileCLIP-S1, -S2, MobileCLIP2-S0, -S2). For other \
                 CLIPs use the Hugging Face transformers layout (a directory with config.json)",
                FASTVIT_TOWERS.join(", ")
            ),
        });
    }
    let text: TextCfg = with_defaults(
        path,
        &sub("text_cfg"),
        json!({"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8,
               "layers": 12, "mlp_ratio": 4.0, "no_causal_mask": false}),
    )?;
    if !text.no_causal_mask {
        return Err(ModelError::config(
            path,
            "text_cfg.no_causal_mask is false: lexlip runs MobileCLIP's text tower without a \
             causal mask, as MobileCLIP was trained; this model needs one",
        ));
    }
    if text.heads == 0 || !text.width.is_multiple_of(text.heads) {
        return Err(ModelError::config(
            path,
            format!(
                "text_cfg.width {} is not a multiple of text_cfg.heads {}",
                text.width, text.heads
            ),
        ));
    }
    let embed_dim = model
        .get("embed_dim")
        .and_then(Value::as_u64)
        .ok_or_else(|| ModelError::config(path, "model_cfg.embed_dim is missing"))?
        as usize;
    let preprocess = match raw.get("preprocess_cfg") {
        Some(p) => serde_json::from_value(p.clone())
            .map_err(|e| ModelError::config(path, format!("preprocess_cfg: {e}")))?,
        None => PreprocessCfg::default(),
    };
    Ok(MobileClipConfig {
        embed_dim,
        vision,
        text,
        preprocess,
    })
}

/// MobileCLIP's text tower, open_clip's `TextTransformer` under its names (`text.*`): token and
/// positional embeddings, pre-norm blocks with an exact-GELU MLP and no causal mask, `ln_final`,
/// pooled at the largest id (`<|endoftext|>`) and projected by `text_projection`. The last block
/// is computed at the pooled token only.
#[derive(Debug, Clone)]
pub struct TextTower {
    token_embedding: Tensor,
    positional_embedding: Tensor,
    blocks: Vec<PreNormBlock>,
    ln_final: LayerNorm,
    /// `text_projection` (`(width, dim)`, applied as `x · P`) as a layer without bias.
    projection: Linear,
}

impl TextTower {
    /// `vb` at `text.`.
    fn load(vb: &VarBuilder, t: &TextCfg, dim: usize) -> candle_core::Result<Self> {
        let mlp = (t.width as f64 * t.mlp_ratio).round() as usize;
        let resblocks = vb.pp("transformer").pp("resblocks");
        let projection = vb.get((t.width, dim), "text_projection")?;
        Ok(Self {
            token_embedding: vb.get((t.vocab_size, t.width), "token_embedding.weight")?,
            positional_embedding: vb.get((t.context_length, t.width), "positional_embedding")?,
            blocks: (0..t.layers)
                .map(|i| open_clip_block(&resblocks.pp(i), t.width, mlp, t.heads, Activation::Gelu))
                .collect::<candle_core::Result<_>>()?,
            ln_final: LayerNorm::load(&vb.pp("ln_final"), t.width, 1e-5)?,
            projection: Linear::without_bias(projection.t()?.contiguous()?)?,
        })
    }

    /// `ids`, every row the whole context long → `(batch, dim)`.
    fn features(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let n = ids.first().map_or(0, Vec::len);
        if n == 0 || ids.iter().any(|r| r.len() != n) {
            candle_core::bail!("texts must all be the model's context long, got {n} tokens");
        }
        let at: Vec<usize> = ids.iter().map(|row| first_largest(row)).collect();
        let x = embed_tokens(&self.token_embedding, &self.positional_embedding, ids)?;
        let pooled = self
            .ln_final
            .forward(&pooled(&self.blocks, x, &at, false)?)?;
        self.projection.forward(&pooled.squeeze(1)?)
    }
}

/// MobileCLIP's text and image towers → L2-normalised embeddings in one space.
pub struct MobileClipEncoder {
    text: TextTower,
    image: FastVit,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    context: usize,
    device: Device,
    dim: usize,
}

impl std::fmt::Debug for MobileClipEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MobileClipEncoder(dim {}, {} tokens, {} px)",
            self.dim, self.context, self.processor.size
        )
    }
}

impl MobileClipEncoder {
    /// Loads an open_clip MobileCLIP directory (`open_clip_config.json`, `*.safetensors`,
    /// `tokenizer.json`). Runs in f32.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = load_config(&dir.join(CONFIG_FILE))?;
        let weights = Weights::from_safetensors_dir(dir).map_err(|e| match e {
            ModelError::Weights { file, message }
                if dir.join("open_clip_pytorch_model.bin").is_file() =>
            {
                ModelError::Weights {
                    file,
                    message: format!(
                        "{message}; lexlip reads safetensors only: download \
                         open_clip_model.safetensors from the same Hub repository"
                    ),
                }
            }
            other => other,
        })?;
        let image = FastVit::load(&weights, "visual.trunk.", device)?;
        if image.dim() != config.embed_dim {
            return Err(ModelError::config(
                dir.join(CONFIG_FILE),
                format!(
                    "model_cfg.embed_dim is {} but the image tower's head gives {}",
                    config.embed_dim,
                    image.dim()
                ),
            ));
        }
        let t = &config.text;
        let vb = weights.var_builder(DType::F32, device);
        let text = TextTower::load(&vb.pp("text"), t, config.embed_dim)
            .map_err(|e| weights.load_error(e))?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = load_tokenizer(&tokenizer_path)?;
        if tokenizer.token_to_id(END_OF_TEXT).is_none() {
            return Err(ModelError::Tokenizer {
                path: tokenizer_path,
                message: format!(
                    "no {END_OF_TEXT} token: MobileCLIP's text tower pools at it (use the \
                     tokenizer.json of the model's Hub repository)"
                ),
            });
        }
        // The tokenizer cuts before adding its special tokens, so a long text keeps
        // `<|endoftext|>` last, as open_clip's tokenizer does.
        truncate_to(&mut tokenizer, t.context_length)?;
        let p = &config.preprocess;
        let processor = ImageProcessor {
            size: config.vision.image_size,
            mean: [0.0; 3],
            std: [1.0; 3],
            squash: false,
            resampler: Default::default(),
        }
        .with_mean_std(p.mean, p.std, &dir.join(CONFIG_FILE), "preprocess_cfg.std")?;
        Ok(Self {
            text,
            image,
            tokenizer,
            processor,
            context: t.context_length,
            device: device.clone(),
            dim: config.embed_dim,
        })
    }

    /// Token ids per text as the text tower reads them: cut to the context by the tokenizer
    /// (`<|endoftext|>` stays last), then padded with 0, as open_clip's tokenizer does.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        Ok(tokenize(&self.tokenizer, texts)?
            .into_iter()
            .map(|mut ids| {
                ids.resize(self.context, 0);
                ids
            })
            .collect())
    }
}

impl DenseEncoder for MobileClipEncoder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>> {
        // Every row is already the whole context long (see `tokenize`).
        unit_text_rows(texts, |texts| {
            Ok(self.text.features(&self.tokenize(texts)?)?)
        })
    }

    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        self.image.forward(pixels)
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
