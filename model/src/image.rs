//! The image encoder: BEiT + a BERT-style MLM head over every output token (CLS + patches), pooled
//! into lexicon weights (LexLIP eq. 1-3), or lexicon heads over a dense model's embedding.
//! Decoding and preprocessing live in [`crate::pixels`] (re-exported here).

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::Config as BertConfig;
use lexlip_proto::{DenseVector, SparseVector, TermSpace};
use serde::{Deserialize, Serialize};

use crate::beit::{self, Beit};
use crate::config::{read_json, with_defaults};
use crate::dense::DenseEncoder;
use crate::error::{ModelError, Result};
use crate::heads::{LexiconHead, rows_tensor};
use crate::mlm_head::MlmHead;
use crate::pooling::{rows_to_sparse, to_sparse, top_k};
use crate::tokens::dir_name;
use crate::vocab::Vocabulary;
use crate::weight_sharing::SharedLayers;
use crate::weights::Weights;

pub(crate) use crate::pixels::stack;
pub use crate::pixels::{
    DEFAULT_DECODE_BUDGET_PIXELS, DEFAULT_MAX_IMAGE_PIXELS, Decoded, ImageProcessor,
    PreprocessedImage, Resampler, decode_rgb, max_image_pixels, rgb_on_white, set_decode_budget,
    set_max_image_pixels,
};

/// Upper bound on logits elements per MLM-head pass (`images × tokens × vocab`), so that a batch of
/// 32 images at 384 × 384 does not materialise 2 GB of logits at once (on a GPU: on the CPU the
/// head pools block by block and never holds them, [`MlmHead::pooled`]).
const MAX_LOGITS_PER_PASS: usize = 64 << 20;

/// Settings of the MLM head on top of BEiT, stored as `lexlip_mlm_head` in the image
/// `config.json` (LexLIP's head is a copy of BERT's `cls`, so these are BERT's values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadConfig {
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
}

fn gelu() -> String {
    "gelu".into()
}
fn eps() -> f64 {
    1e-12
}

impl Default for HeadConfig {
    fn default() -> Self {
        Self {
            hidden_act: gelu(),
            layer_norm_eps: eps(),
        }
    }
}

/// BEiT + MLM head → sparse lexicon vectors.
pub struct ImageEncoder {
    tower: Tower,
    vocab: Vocabulary,
    processor: ImageProcessor,
    device: Device,
    /// Top-K pooling: every lexicon keeps its K largest weights (a model trained with
    /// `--image-top-k` records its K in `lexlip.json`).
    top_k: Option<usize>,
}

/// What turns pixels into lexicon weights: BEiT's MLM logits of every patch, max-pooled
/// (LexLIP), a lexicon head over a dense model's image embedding, or an [`ImageLexicon`].
type Tower = crate::tower::Tower<Beit, dyn ImageLexicon>;

/// An image tower that pools its own lexicons, as published models do in their own way (VDR
/// projects every patch onto its terms); the encoder then only preprocesses and cuts the terms.
pub trait ImageLexicon: Send + Sync {
    /// Lexicons `(batch, vocab)` in f32 of stacked pixels `(batch, 3, size, size)`.
    fn pooled(&self, pixels: &Tensor) -> Result<Tensor>;
    /// Side of the square patches the tower cuts images into.
    fn patch_size(&self) -> usize;
    /// Width of the hidden states its projection reads.
    fn hidden_size(&self) -> usize;
    fn dtype(&self) -> DType;
}

impl std::fmt::Debug for ImageEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageEncoder")
            .field("term_space", self.vocab.term_space())
            .field("image_size", &self.image_size())
            .field("top_k", &self.top_k)
            .field("dtype", &self.dtype())
            .field("device", &self.device)
            .finish()
    }
}

/// The dtype encoders run in on `device`: f32 on the CPU; f16 on a GPU, where tensor cores make
/// half precision several times faster (pooling and `log` still run in f32).
pub fn default_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::F16
    } else {
        DType::F32
    }
}

impl ImageEncoder {
    /// Loads an image directory: `config.json` (HF `BeitConfig` + optional `lexlip_mlm_head`),
    /// `*.safetensors` (`beit.*`, `layernorm.*`, `cls.predictions.*`), `tokenizer.json` (the text
    /// vocabulary the head scores) and optionally `preprocessor_config.json`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        Self::load_with_dtype(dir, device, default_dtype(device))
    }

    pub fn load_with_dtype(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let raw = read_json(&cfg_path)?;
        let config: beit::Config = with_defaults(&cfg_path, &raw, serde_json::json!({}))?;
        let head: HeadConfig = match raw.get("lexlip_mlm_head") {
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| ModelError::config(&cfg_path, format!("lexlip_mlm_head: {e}")))?,
            None => HeadConfig::default(),
        };
        let weights = Weights::from_safetensors_dir(dir)?;
        let shared =
            SharedLayers::load(&cfg_path, &raw, &weights, config.hidden_size, dtype, device)?;
        let vocab =
            Vocabulary::from_tokenizer_json(dir_name(dir), &crate::vocab::tokenizer_json(dir))?;
        let processor = ImageProcessor::beit(config.image_size).with_preprocessor_config(dir)?;
        let mut enc = Self::from_parts(&config, &head, weights, vocab, processor, device, dtype)?;
        enc.tower.set_shared(shared);
        Ok(enc)
    }

    /// Builds the encoder from weights rooted at `BeitForMaskedImageModeling` plus the head under
    /// `cls.`.
    pub fn from_parts(
        config: &beit::Config,
        head: &HeadConfig,
        mut weights: Weights,
        vocab: Vocabulary,
        processor: ImageProcessor,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
        let vb = weights.var_builder(dtype, device);
        let beit = Beit::load(vb.clone(), config).map_err(|e| weights.load_error(e))?;
        let head_config: BertConfig = with_defaults(
            weights.source(),
            &serde_json::json!({
                "hidden_size": config.hidden_size,
                "vocab_size": vocab.len(),
                "hidden_act": head.hidden_act,
                "layer_norm_eps": head.layer_norm_eps,
            }),
            crate::text::bert_defaults(),
        )?;
        let head = MlmHead::from_bert_config(&vb.pp("cls"), &head_config)
            .map_err(|e| weights.load_error(e))?;
        Ok(Self {
            tower: Tower::mlm(beit, head),
            vocab,
            processor,
            device: device.clone(),
            top_k: None,
        })
    }

    /// Runs at `size × size` pixels (e.g. 384 for LexLIP's fine-tuned models; the relative position
    /// bias is interpolated as LexLIP does).
    pub fn with_image_size(mut self, size: usize) -> Result<Self> {
        match &mut self.tower {
            Tower::Mlm { model: beit, .. } => beit.set_input_size(size)?,
            Tower::Heads { .. } | Tower::Lexicon(_) if size == self.processor.size => {}
            Tower::Lexicon(_) => {
                return Err(ModelError::Invalid(format!(
                    "this image tower reads {0}×{0} images only (its position embeddings are \
                     not interpolated)",
                    self.processor.size
                )));
            }
            Tower::Heads { .. } => {
                return Err(ModelError::Invalid(format!(
                    "lexicon heads read their dense model's {0}×{0} images; another size ({size}) \
                     needs another dense model",
                    self.processor.size
                )));
            }
        }
        self.processor.size = size;
        Ok(self)
    }

    pub fn image_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { model: beit, .. } => beit.input_size(),
            Tower::Heads { .. } | Tower::Lexicon(_) => self.processor.size,
        }
    }

    /// An image encoder whose lexicons are `head` over `backbone`'s image embeddings, in the
    /// term space of `vocab` (the caller checked that the three fit), cut to the head's K
    /// unless [`Self::with_top_k`] says otherwise.
    pub fn from_heads(
        backbone: Arc<dyn DenseEncoder>,
        head: LexiconHead,
        vocab: Vocabulary,
    ) -> Self {
        Self {
            processor: backbone.image_processor().clone(),
            device: backbone.device().clone(),
            top_k: head.top_k(),
            tower: Tower::Heads { backbone, head },
            vocab,
        }
    }

    /// An image encoder over a tower that pools its own lexicons (VDR's, [`crate::vdr`]), the
    /// vocabulary its terms live in, and its preprocessing.
    pub fn from_lexicon(
        tower: Box<dyn ImageLexicon>,
        vocab: Vocabulary,
        processor: ImageProcessor,
        device: &Device,
    ) -> Self {
        Self {
            tower: Tower::Lexicon(tower),
            vocab,
            processor,
            device: device.clone(),
            top_k: None,
        }
    }

    /// Keeps the `k` largest weights of every lexicon (the K the model was trained with).
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = (k > 0).then_some(k);
        self
    }

    /// The K of top-K pooling, if the model has one.
    pub fn top_k(&self) -> Option<usize> {
        self.top_k
    }

    /// Side of the square patches the tower cuts images into (0 for lexicon heads over a
    /// dense model, which read no patches).
    pub fn patch_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { model: beit, .. } => beit.config().patch_size,
            Tower::Heads { .. } => 0,
            Tower::Lexicon(t) => t.patch_size(),
        }
    }

    /// Width of the hidden states the head reads (for lexicon heads, the dense embedding's).
    pub fn hidden_size(&self) -> usize {
        match &self.tower {
            Tower::Mlm { model: beit, .. } => beit.config().hidden_size,
            Tower::Heads { head, .. } => head.dim(),
            Tower::Lexicon(t) => t.hidden_size(),
        }
    }

    pub fn term_space(&self) -> &TermSpace {
        self.vocab.term_space()
    }

    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }

    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        match &self.tower {
            Tower::Mlm { model: beit, .. } => beit.dtype(),
            Tower::Heads { .. } => DType::F32,
            Tower::Lexicon(t) => t.dtype(),
        }
    }

    /// See [`ImageProcessor::preprocess`]; cheap to call from worker threads.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        self.processor.preprocess(bytes)
    }

    pub fn preprocess_named(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage> {
        self.processor.preprocess_named(bytes, input)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` the head reads: after the final layer norm
    /// and the shared layers, if any.
    pub fn hidden_states(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        let Tower::Mlm {
            model: beit,
            shared,
            ..
        } = &self.tower
        else {
            return Err(ModelError::Invalid(
                "only lexlip's BEiT towers give their per-patch states here".into(),
            ));
        };
        let pixels = stack(images, beit.input_size(), &self.device)?;
        let hidden = beit.forward(&pixels)?;
        match shared {
            Some(shared) => Ok(shared.forward(&hidden, None, &crate::nn::Inference)?),
            None => Ok(hidden),
        }
    }

    /// MLM logits `(batch, 1 + patches, vocab)` (f32), for tests and inspection.
    pub fn logits(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        let hidden = self.hidden_states(images)?;
        match &self.tower {
            Tower::Mlm { head, .. } => Ok(head
                .forward(&hidden, &crate::nn::Inference)?
                .to_dtype(DType::F32)?),
            Tower::Heads { .. } | Tower::Lexicon(_) => Err(ModelError::Invalid(
                "only lexlip's BEiT towers give their per-patch logits here".into(),
            )),
        }
    }

    /// Pooled lexicon weights `(batch, vocab)` in f32.
    pub fn pooled(&self, images: &[PreprocessedImage]) -> Result<Tensor> {
        if images.is_empty() {
            return Ok(Tensor::zeros(
                (0, self.vocab.len()),
                DType::F32,
                &self.device,
            )?);
        }
        let head = match &self.tower {
            Tower::Heads { backbone, head } => {
                // `encode_images` is the embedding the training cache holds.
                let embeddings = backbone.encode_images(images)?;
                let p = head.weights(&rows_tensor(&embeddings, &self.device)?)?;
                return Ok(match self.top_k {
                    Some(k) => top_k(&p, k)?,
                    None => p,
                });
            }
            Tower::Lexicon(t) => {
                let p = t.pooled(&stack(images, self.processor.size, &self.device)?)?;
                return Ok(match self.top_k {
                    Some(k) => top_k(&p, k)?,
                    None => p,
                });
            }
            Tower::Mlm { head, .. } => head,
        };
        let hidden = self.hidden_states(images)?;
        let tokens = hidden.dim(1)?;
        let per_pass = (MAX_LOGITS_PER_PASS / (tokens * self.vocab.len()).max(1)).max(1);
        let mut parts = Vec::new();
        let mut start = 0;
        while start < images.len() {
            let n = per_pass.min(images.len() - start);
            let pooled = head.pooled(&hidden.narrow(0, start, n)?, None)?;
            parts.push(match self.top_k {
                Some(k) => top_k(&pooled, k)?,
                None => pooled,
            });
            start += n;
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// Encodes preprocessed images into sparse lexicon vectors, in input order.
    pub fn encode(&self, images: &[PreprocessedImage]) -> Result<Vec<SparseVector>> {
        Ok(self.encode_with_dense(images)?.0)
    }

    /// [`Self::encode`], and the dense embeddings of the same images where this encoder's
    /// lexicons are heads over a dense model (computed in the same pass; `None` otherwise).
    pub fn encode_with_dense(
        &self,
        images: &[PreprocessedImage],
    ) -> Result<(Vec<SparseVector>, Option<Vec<DenseVector>>)> {
        if images.is_empty() {
            return Ok((Vec::new(), None));
        }
        if let Tower::Heads { backbone, .. } = &self.tower {
            let embeddings = backbone.encode_images(images)?;
            return Ok((self.encode_embeddings(&embeddings)?, Some(embeddings)));
        }
        // Lexicons of pixels through an MLM head have no dense embedding beside them.
        Ok((to_sparse(&self.pooled(images)?, &self.vocab)?, None))
    }

    /// The lexicons of backbone embeddings, as [`Self::encode`] computes them from pixels: only
    /// lexicon heads have them, their lexicons being a function of the dense embedding. A
    /// collection indexed with `--dense` keeps those embeddings, so other heads over the same
    /// backbone are measured on it without a picture being decoded again.
    pub fn encode_embeddings(&self, embeddings: &[DenseVector]) -> Result<Vec<SparseVector>> {
        let Tower::Heads { head, .. } = &self.tower else {
            return Err(crate::heads::not_heads("image encoder reads pixels"));
        };
        if embeddings.is_empty() {
            return Ok(Vec::new());
        }
        let rows = head.sparse_rows(&rows_tensor(embeddings, &self.device)?, self.top_k)?;
        rows_to_sparse(rows, &self.vocab)
    }

    /// A BEiT-B/16 (224) + MLM head with random weights from a fixed seed, for measuring speed
    /// without a checkpoint. Its vector values mean nothing.
    pub fn random_beit_base(
        vocab: Vocabulary,
        device: &Device,
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        let config = beit::Config::base_patch16_224();
        let weights = beit::random::random_weights(&config, vocab.len(), seed)?;
        Self::from_parts(
            &config,
            &HeadConfig::default(),
            weights,
            vocab,
            ImageProcessor::beit(config.image_size),
            device,
            dtype,
        )
    }
}
