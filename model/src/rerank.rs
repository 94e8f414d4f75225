//! The second search stage: a small cross-modal encoder that reads a text and an image together
//! and says how well they match (MaskVLM sec. 3: unimodal encoders, a cross-modal fusion encoder
//! and an image-text matching head).
//!
//! The lexicon index finds candidates cheaply; the re-ranker re-scores the first few of them with
//! full attention between the query's tokens and each candidate's patches (or the other way
//! round), which no dot product of two independent vectors can do.
//!
//! A re-ranker directory (`lexlip train --objective rerank` writes it):
//!
//! ```text
//! rerank.json            {"format": "lexlip-rerank", "image_size", "max_length", "fusion": {…}}
//! text/                  the BERT text tower (Hugging Face `BertForMaskedLM` layout)
//! image/                 the BEiT image tower (the lexicon image tower's layout)
//! fusion/model.safetensors
//!                        fusion.text_projection / image_projection (Linear),
//!                        fusion.modality_embeddings.weight (2, hidden),
//!                        fusion.LayerNorm, fusion.encoder.layer.N.* (BERT layers), itm (Linear → 2)
//! ```
//!
//! The towers are those of the lexicon model it was trained from (frozen during training), so
//! their hidden states are what the fusion layers learned to read.

use std::path::Path;

use candle_core::{D, DType, Device, Tensor};
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::bert::{self, BertLayer, LayerShape};
use crate::config::read_json;
use crate::error::{ModelError, Result};
use crate::image::{ImageEncoder, PreprocessedImage};
use crate::nn::{INIT_STD, Inference, Init, LayerNorm, Linear, Mode, Params, attention_bias};
use crate::text::load_bert_config;
use crate::tokens::{load_tokenizer, pad_batch, pad_id, tokenize, truncate_to};
use crate::weights::Weights;

/// The `format` of `rerank.json`.
pub const FORMAT: &str = "lexlip-rerank";

/// Candidates scored per forward pass (bounds the fusion encoder's activations).
const PAIR_CHUNK: usize = 64;

/// The fusion encoder's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FusionConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
}

impl FusionConfig {
    pub fn validate(&self) -> Result<()> {
        let FusionConfig {
            hidden_size: h,
            num_hidden_layers: l,
            num_attention_heads: a,
            intermediate_size: i,
        } = *self;
        if h == 0 || l == 0 || a == 0 || i == 0 || !h.is_multiple_of(a) {
            return Err(ModelError::Invalid(format!(
                "fusion encoder: hidden {h}, layers {l}, heads {a}, intermediate {i} — all must be \
                 positive and hidden a multiple of heads"
            )));
        }
        Ok(())
    }

    /// The shape of one fusion layer (GELU, ε 1e-12, as the towers).
    pub fn layer_shape(&self) -> LayerShape {
        LayerShape {
            hidden: self.hidden_size,
            heads: self.num_attention_heads,
            intermediate: self.intermediate_size,
            eps: 1e-12,
            act: candle_nn::Activation::Gelu,
        }
    }
}

/// `rerank.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankConfig {
    pub format: String,
    pub image_size: usize,
    pub max_length: usize,
    pub fusion: FusionConfig,
    /// How the model was made (free text; `lexlip train` writes its command).
    #[serde(default)]
    pub source: Option<String>,
}

impl RerankConfig {
    pub fn read(path: &Path) -> Result<Self> {
        let value = read_json(path)?;
        let config: Self = serde_json::from_value(value).map_err(|e| ModelError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if config.format != FORMAT {
            return Err(ModelError::Config {
                path: path.to_path_buf(),
                message: format!(
                    "format is {:?}, expected {FORMAT:?} (is this a lexicon model? give it as \
                     --model, and a directory from `lexlip train --objective rerank` as the \
                     re-ranker)",
                    config.format
                ),
            });
        }
        config.fusion.validate()?;
        Ok(config)
    }
}

/// The fusion encoder and ITM head (served by [`Reranker`], trained by `lexlip-train`).
#[derive(Debug, Clone)]
pub struct Fusion {
    pub text_projection: Linear,
    pub image_projection: Linear,
    modality: Tensor,
    norm: LayerNorm,
    layers: Vec<BertLayer>,
    itm: Linear,
}

impl Fusion {
    /// `fusion.*` and `itm.*` from `pb`; `text_hidden` / `image_hidden` are the towers' widths.
    pub fn new<P: Params>(
        pb: &P,
        config: &FusionConfig,
        text_hidden: usize,
        image_hidden: usize,
    ) -> std::result::Result<Self, P::Error> {
        let h = config.hidden_size;
        let f = pb.pp("fusion");
        Ok(Self {
            text_projection: Linear::new(&f.pp("text_projection"), text_hidden, h, true)?,
            image_projection: Linear::new(&f.pp("image_projection"), image_hidden, h, true)?,
            modality: f.get(
                &[2, h],
                "modality_embeddings.weight",
                Init::Normal(INIT_STD),
            )?,
            norm: LayerNorm::new(&f.pp("LayerNorm"), h, 1e-12)?,
            layers: bert::layers(
                &f.pp("encoder"),
                config.num_hidden_layers,
                &config.layer_shape(),
            )?,
            itm: Linear::new(&pb.pp("itm"), h, 2, true)?,
        })
    }

    /// Fused states `(pairs, nt + ni, hidden)` of text states `(pairs, nt, ht)` with their
    /// mask `(pairs, nt)` and image states `(pairs, ni, hi)`: the text, then the image.
    pub fn fuse(
        &self,
        text: &Tensor,
        mask: &Tensor,
        image: &Tensor,
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        let (b, _, _) = text.dims3()?;
        let ni = image.dim(1)?;
        let t = self
            .text_projection
            .forward(text)?
            .broadcast_add(&self.modality.narrow(0, 0, 1)?)?;
        let i = self
            .image_projection
            .forward(image)?
            .broadcast_add(&self.modality.narrow(0, 1, 1)?)?;
        let mut xs = self.norm.forward(&Tensor::cat(&[&t, &i], 1)?, mode)?;
        let full = Tensor::cat(
            &[
                &mask.to_dtype(DType::F32)?,
                &Tensor::ones((b, ni), DType::F32, xs.device())?,
            ],
            1,
        )?;
        let bias = attention_bias(&full, DType::F32)?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &bias, mode)?;
        }
        Ok(xs)
    }

    /// ITM logits `(pairs, 2)` (index 1 = match) of fused states whose text part is `text_tokens`
    /// long: the product of the fused text `[CLS]` and image `[CLS]` (MaskVLM sec. 3.2).
    pub fn itm_of(&self, fused: &Tensor, text_tokens: usize) -> candle_core::Result<Tensor> {
        let cls =
            (fused.narrow(1, 0, 1)?.squeeze(1)? * fused.narrow(1, text_tokens, 1)?.squeeze(1)?)?;
        self.itm.forward(&cls)
    }

    /// ITM logits `(pairs, 2)` of text states with their mask against image states (inference).
    pub fn itm_logits(&self, text: &Tensor, mask: &Tensor, image: &Tensor) -> Result<Tensor> {
        let fused = self.fuse(text, mask, image, &Inference)?;
        Ok(self.itm_of(&fused, text.dim(1)?)?)
    }
}

/// Positions `0..scores.len()` best score first (ties: earlier position first): the order
/// re-scored candidates are returned in.
pub fn order_by_score(scores: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order
}

/// Probability of "match" from ITM logits `(pairs, 2)`.
pub fn match_probability(logits: &Tensor) -> Result<Vec<f32>> {
    let p = candle_nn::ops::softmax(&logits.to_dtype(DType::F32)?, D::Minus1)?;
    Ok(p.narrow(1, 1, 1)?.squeeze(1)?.to_vec1()?)
}

/// The unimodal towers a re-ranker reads: the lexicon model's text BERT (without its MLM head)
/// and BEiT image tower, as hidden states.
pub struct Towers {
    text: BertModel,
    text_config: BertConfig,
    tokenizer: Tokenizer,
    pad_id: u32,
    image: ImageEncoder,
    device: Device,
}

impl Towers {
    /// Loads `text_dir` (BERT) and `image_dir` (BEiT) at `image_size` pixels, captions cut at
    /// `max_length` tokens.
    pub fn load(
        text_dir: &Path,
        image_dir: &Path,
        image_size: usize,
        max_length: usize,
        device: &Device,
    ) -> Result<Self> {
        let text_config = load_bert_config(&text_dir.join("config.json"))?;
        let weights = Weights::from_safetensors_dir(text_dir)?;
        let text = BertModel::load(
            weights.var_builder(DType::F32, device).pp("bert"),
            &text_config,
        )
        .map_err(|e| weights.load_error(e))?;
        let mut tokenizer = load_tokenizer(&crate::vocab::tokenizer_json(text_dir))?;
        truncate_to(&mut tokenizer, max_length)?;
        let pad_id = pad_id(&tokenizer, text_config.pad_token_id);
        let image = ImageEncoder::load(image_dir, device)?.with_image_size(image_size)?;
        Ok(Self {
            text,
            text_config,
            tokenizer,
            pad_id,
            image,
            device: device.clone(),
        })
    }

    pub fn text_hidden_size(&self) -> usize {
        self.text_config.hidden_size
    }

    /// The text tower's BERT config.
    pub fn text_config(&self) -> &BertConfig {
        &self.text_config
    }

    pub fn image_hidden_size(&self) -> usize {
        self.image.hidden_size()
    }

    /// The image tower (its preprocessing is what the re-ranker expects).
    pub fn image_encoder(&self) -> &ImageEncoder {
        &self.image
    }

    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        tokenize(&self.tokenizer, texts)
    }

    /// Text tower states `(batch, tokens, hidden)` and mask of token ids (already tokenized,
    /// e.g. with some tokens masked for training).
    pub fn text_states(&self, ids: &[Vec<u32>]) -> Result<(Tensor, Tensor)> {
        let (input_ids, mask) = pad_batch(ids, self.pad_id, &self.device)?;
        let types = input_ids.zeros_like()?;
        let hidden = self.text.forward(&input_ids, &types, Some(&mask))?;
        Ok((hidden, mask))
    }

    /// Image tower states `(batch, 1 + patches, hidden)` in f32.
    pub fn image_states(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        Ok(self.image.hidden_states(images)?.to_dtype(DType::F32)?)
    }
}

/// The re-ranker: frozen towers, fusion encoder, ITM head.
pub struct Reranker {
    config: RerankConfig,
    towers: Towers,
    fusion: Fusion,
}

impl std::fmt::Debug for Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reranker")
            .field("config", &self.config)
            .finish()
    }
}

impl Reranker {
    /// Loads a re-ranker directory (see the module docs).
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config_path = dir.join("rerank.json");
        if !config_path.is_file() {
            return Err(ModelError::UnknownModel {
                path: dir.to_path_buf(),
                message: "no rerank.json: not a re-ranker directory (make one with `lexlip train \
                          --objective rerank --init LEXICON_MODEL`)"
                    .into(),
            });
        }
        let config = RerankConfig::read(&config_path)?;
        let towers = Towers::load(
            &dir.join("text"),
            &dir.join("image"),
            config.image_size,
            config.max_length,
            device,
        )?;
        let fw = Weights::from_safetensors_dir(&dir.join("fusion"))?;
        let fusion = Fusion::new(
            &fw.var_builder(DType::F32, device),
            &config.fusion,
            towers.text_hidden_size(),
            towers.image_hidden_size(),
        )
        .map_err(|e| fw.load_error(e))?;
        Ok(Self {
            config,
            towers,
            fusion,
        })
    }

    pub fn config(&self) -> &RerankConfig {
        &self.config
    }

    pub fn towers(&self) -> &Towers {
        &self.towers
    }

    /// ITM logits of paired states (see [`Fusion::itm_logits`]).
    pub fn itm_logits(&self, text: &Tensor, mask: &Tensor, image: &Tensor) -> Result<Tensor> {
        self.fusion.itm_logits(text, mask, image)
    }

    /// Match probability of one text against each image, in input order.
    pub fn score_text_images(&self, text: &str, images: &[PreprocessedImage]) -> Result<Vec<f32>> {
        let ids = self.towers.tokenize(&[text])?;
        let (t, m) = self.towers.text_states(&ids)?;
        let mut scores = Vec::with_capacity(images.len());
        for chunk in images.chunks(PAIR_CHUNK) {
            let i = self.towers.image_states(chunk)?;
            let n = chunk.len();
            let tn = t.broadcast_as((n, t.dim(1)?, t.dim(2)?))?.contiguous()?;
            let mn = m.broadcast_as((n, m.dim(1)?))?.contiguous()?;
            scores.extend(match_probability(&self.itm_logits(&tn, &mn, &i)?)?);
        }
        Ok(scores)
    }

    /// Match probability of one image against each text, in input order.
    pub fn score_image_texts(&self, image: &PreprocessedImage, texts: &[&str]) -> Result<Vec<f32>> {
        let i = self.towers.image_states(std::slice::from_ref(image))?;
        let mut scores = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(PAIR_CHUNK) {
            let ids = self.towers.tokenize(chunk)?;
            let (t, m) = self.towers.text_states(&ids)?;
            let n = chunk.len();
            let im = i.broadcast_as((n, i.dim(1)?, i.dim(2)?))?.contiguous()?;
            scores.extend(match_probability(&self.itm_logits(&t, &m, &im)?)?);
        }
        Ok(scores)
    }
}
