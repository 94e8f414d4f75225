//! MobileCLIP (Apple's `apple/MobileCLIP-S1-OpenCLIP`, `-S2-`, `timm/MobileCLIP2-S0/S2-OpenCLIP`)
//! as a frozen dense dual encoder: the dense fallback, and a backbone whose embeddings lexicon
//! heads can be trained on. candle-transformers runs both towers: FastViT MCi for images, the
//! OpenCLIP text transformer for texts.
//!
//! These models come in open_clip's layout, not Hugging Face's: `open_clip_config.json`
//! (`model_cfg`, `preprocess_cfg`), `open_clip_model.safetensors` and `tokenizer.json`. The FastViT
//! block counts and widths are read off the weights, so any MCi variant candle implements loads.
//!
//! Input conventions, as open_clip's: texts are cut to the context (the last kept position
//! becomes `<|endoftext|>`) and padded with id 0, unmasked (MobileCLIP's text tower has no causal
//! mask and pools at the largest id, `<|endoftext|>`); images are resized on the shorter side and
//! centre-cropped, not normalised (mean 0, std 1).

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_transformers::models::fastvit;
use candle_transformers::models::openclip::text_model::{self, OpenClipTextTransformer};
use lexlip_proto::DenseVector;
use serde::Deserialize;
use serde_json::{Value, json};
use tokenizers::Tokenizer;

use crate::config::{read_json, with_defaults};
use crate::dense::{DenseEncoder, text_embeddings};
use crate::error::{ModelError, Result};
use crate::image::ImageProcessor;
use crate::text::{load_tokenizer, tokenize};
use crate::weights::Weights;

/// The file that marks an open_clip model directory.
pub const CONFIG_FILE: &str = "open_clip_config.json";

/// The timm image towers of MobileCLIP that candle-transformers' FastViT implements.
const FASTVIT_TOWERS: [&str; 3] = ["fastvit_mci0", "fastvit_mci1", "fastvit_mci2"];

/// The token open_clip ends every text with, and pools the text tower at.
const END_OF_TEXT: &str = "<|endoftext|>";

/// candle's FastViT attention uses heads of this width.
const FASTVIT_HEAD_DIM: usize = 32;

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

/// Whether the open_clip config at `path` describes a MobileCLIP lexlip runs; the error says
/// what else it is and what to use instead.
pub fn check_open_clip(path: &Path) -> Result<()> {
    load_config(path).map(|_| ())
}

/// Reads an open_clip `open_clip_config.json` (Hub layout: `model_cfg` and `preprocess_cfg`; a
/// bare model config is read too), refusing models this file cannot run.
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
    if let Some(std) = preprocess.std
        && std.iter().any(|x| *x <= 0.0 || !x.is_finite())
    {
        return Err(ModelError::config(
            path,
            "preprocess_cfg.std must be positive",
        ));
    }
    Ok(MobileClipConfig {
        embed_dim,
        vision,
        text,
        preprocess,
    })
}

/// The FastViT shape the weights under `visual.trunk.` have: stem width, blocks per stage, MLP
/// expansion, attention in the last stage. MCi towers use the activation after the large-kernel
/// convolutions (`lkc_use_act`).
fn fastvit_config(weights: &Weights) -> Result<fastvit::Config> {
    let trunk = "visual.trunk.";
    let stem = weights.shape(&format!("{trunk}stem.0.conv_kxk.0.conv.weight"))?;
    let in_channels = stem[0];
    let mut blocks = [0usize; 4];
    for (stage, count) in blocks.iter_mut().enumerate() {
        let prefix = format!("{trunk}stages.{stage}.blocks.");
        *count = weights
            .names()
            .filter_map(|n| n.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('.').next()?.parse::<usize>().ok())
            .max()
            .map_or(0, |last| last + 1);
    }
    let fc1 = weights.shape(&format!("{trunk}stages.0.blocks.0.mlp.fc1.weight"))?;
    let attn = weights.contains(&format!("{trunk}stages.3.blocks.0.token_mixer.qkv.weight"));
    let last = in_channels * 8;
    if attn && !last.is_multiple_of(FASTVIT_HEAD_DIM) {
        return Err(ModelError::Weights {
            file: weights.source().to_path_buf(),
            message: format!(
                "the FastViT attention stage is {last} wide, not a multiple of its \
                 {FASTVIT_HEAD_DIM}-wide heads"
            ),
        });
    }
    Ok(fastvit::Config {
        exp_ratio: fc1[0] / in_channels.max(1),
        in_channels,
        blocks,
        attn,
        lkc_use_act: true,
    })
}

/// MobileCLIP's text and image towers → L2-normalised embeddings in one space.
pub struct MobileClipEncoder {
    text: OpenClipTextTransformer,
    /// `(width, embed_dim)`.
    text_projection: Tensor,
    image: candle_nn::Func<'static>,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    context: usize,
    end_of_text: u32,
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
        let mut weights = Weights::from_safetensors_dir(dir).map_err(|e| match e {
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
        // Layer scales are `gamma` in timm; the loader's legacy renaming made them `weight`.
        let scales: Vec<String> = weights
            .names()
            .filter(|n| n.starts_with("visual.") && n.contains(".layer_scale"))
            .filter_map(|n| n.strip_suffix(".weight").map(|b| format!("{b}.gamma")))
            .collect();
        for gamma in scales {
            let target = format!("{}.weight", gamma.trim_end_matches(".gamma"));
            weights.alias(&gamma, &target);
        }
        let vision = fastvit_config(&weights)?;
        let t = &config.text;
        let text_config = text_model::Config {
            vocab_size: t.vocab_size,
            embed_dim: t.width,
            intermediate_size: (t.width as f64 * t.mlp_ratio).round() as usize,
            max_position_embeddings: t.context_length,
            pad_with: None,
            num_hidden_layers: t.layers,
            num_attention_heads: t.heads,
            projection_dim: config.embed_dim,
        };
        let vb = weights.var_builder(DType::F32, device);
        let load = |e| weights.load_error(e);
        let text = OpenClipTextTransformer::new(vb.pp("text"), &text_config).map_err(load)?;
        let text_projection = vb
            .get((t.width, config.embed_dim), "text.text_projection")
            .map_err(load)?;
        let image =
            fastvit::fastvit(&vision, config.embed_dim, vb.pp("visual.trunk")).map_err(load)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = load_tokenizer(&tokenizer_path)?;
        let end_of_text =
            tokenizer
                .token_to_id(END_OF_TEXT)
                .ok_or_else(|| ModelError::Tokenizer {
                    path: tokenizer_path.clone(),
                    message: format!(
                        "no {END_OF_TEXT} token: MobileCLIP's text tower pools at it (use the \
                     tokenizer.json of the model's Hub repository)"
                    ),
                })?;
        let p = &config.preprocess;
        let processor = ImageProcessor {
            size: config.vision.image_size,
            mean: p.mean.unwrap_or([0.0; 3]),
            std: p.std.unwrap_or([1.0; 3]),
            squash: false,
        };
        Ok(Self {
            text,
            text_projection,
            image,
            tokenizer,
            processor,
            context: t.context_length,
            end_of_text,
            device: device.clone(),
            dim: config.embed_dim,
        })
    }

    /// Token ids per text as the text tower reads them: cut to the context (the last position
    /// kept becomes `<|endoftext|>`, as open_clip's tokenizer does), then padded with 0.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        Ok(tokenize(&self.tokenizer, texts)?
            .into_iter()
            .map(|mut ids| {
                if ids.len() > self.context {
                    ids.truncate(self.context);
                    if let Some(last) = ids.last_mut() {
                        *last = self.end_of_text;
                    }
                }
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
        text_embeddings(&self.tokenize(texts)?, 0, &self.device, |ids| {
            // The `Module` forward: the final states pooled at `<|endoftext|>`.
            Module::forward(&self.text, ids)?.matmul(&self.text_projection)
        })
    }

    /// One image at a time: candle 0.11's CPU matmul folds a batch wrongly when the left side
    /// is a transposed view and the right side is shared (huggingface/candle#3744), which is
    /// what FastViT's attention feeds its `qkv` layer; with one image there is nothing to fold.
    fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let rows = (0..pixels.dim(0)?)
            .map(|i| pixels.narrow(0, i, 1)?.apply(&self.image))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Tensor::cat(&rows, 0)?)
    }

    fn image_processor(&self) -> &ImageProcessor {
        &self.processor
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
