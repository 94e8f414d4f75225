//! The trainable re-ranker: a fusion encoder over the frozen towers' states, its ITM, MLM
//! and MIM heads, and the losses of one step.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use lexlip_model::PreprocessedImage;
use lexlip_model::rerank::{Fusion, FusionConfig, Towers};

use crate::error::{Result, TrainError};
use crate::losses::{add_weighted, cross_entropy, info_nce, l1};
use crate::nn::l2_normalize;
use crate::nn::{Act, Differentiable, LayerNorm, Linear, gather_rows};
use crate::optim::Param;
use crate::params::{Init, ParamBuilder, Source, snapshot, sorted_vars};

/// The trainable part: fusion encoder, ITM head and the two reconstruction heads.
pub struct RerankModel {
    pub store: VarMap,
    pub config: FusionConfig,
    /// The fusion encoder and ITM head the re-ranker serves.
    fusion: Fusion,
    mlm_transform: Linear,
    mlm_norm: LayerNorm,
    mlm_bias: Tensor,
    /// The frozen text tower's word embeddings: the MLM decoder (tied, as in BERT).
    word_embeddings: Tensor,
    mim: Linear,
}

/// Fused states of a batch of pairs and where each part sits.
pub struct Fused {
    /// `(pairs, text tokens + image tokens, hidden)`.
    pub states: Tensor,
    pub text_tokens: usize,
}

impl RerankModel {
    /// Builds the fusion encoder and heads with parameters from `source` (random ones keyed by
    /// the seed for a new run). `config.hidden_size` must be the text tower's width: the MLM
    /// decoder is its word embeddings.
    pub fn new(
        config: FusionConfig,
        text_hidden: usize,
        image_hidden: usize,
        word_embeddings: Tensor,
        pixels_per_patch: usize,
        source: Source<'_>,
        device: &Device,
    ) -> Result<Self> {
        config.validate()?;
        let h = config.hidden_size;
        if word_embeddings.dim(1)? != h {
            return Err(TrainError::invalid(format!(
                "the fusion width {h} must equal the text tower's {}",
                word_embeddings.dim(1)?
            )));
        }
        let vocab = word_embeddings.dim(0)?;
        let store = VarMap::new();
        let pb = ParamBuilder::new(&store, source, DType::F32, device);
        Ok(Self {
            fusion: Fusion::new(&pb, &config, text_hidden, image_hidden)?,
            mlm_transform: Linear::new(&pb.pp("mlm").pp("dense"), h, h, true)?,
            mlm_norm: LayerNorm::new(&pb.pp("mlm").pp("LayerNorm"), h, 1e-12)?,
            mlm_bias: pb.pp("mlm").get(&[vocab], "bias", Init::Const(0.0))?,
            word_embeddings: word_embeddings.to_dtype(DType::F32)?.detach(),
            mim: Linear::new(&pb.pp("mim"), h, pixels_per_patch, true)?,
            store,
            config,
        })
    }

    /// The parameters AdamW updates, in name order (a reconstruction head whose loss is off
    /// gets no gradient and is left out).
    pub fn params(&self, weights: Weights) -> Vec<Param> {
        sorted_vars(&self.store)
            .into_iter()
            .filter(|(name, _)| {
                (weights.mlm > 0.0 || !name.starts_with("mlm."))
                    && (weights.mim > 0.0 || !name.starts_with("mim."))
            })
            .map(|(name, var)| Param::new(name, var, 1.0))
            .collect()
    }

    /// Fuses text states `(pairs, nt, ht)` (mask `(pairs, nt)`) with image states
    /// `(pairs, ni, hi)`: the served [`Fusion`], computed with gradients.
    pub fn fuse(&self, text: &Tensor, mask: &Tensor, image: &Tensor) -> Result<Fused> {
        Ok(Fused {
            states: self.fusion.fuse(text, mask, image, &Differentiable)?,
            text_tokens: text.dim(1)?,
        })
    }

    /// ITC features: the text's projected states averaged over its tokens and the image's over
    /// its patches, L2-normalised, as `(image, text)`. They go through the same projections the
    /// fusion encoder reads, so ITC aligns its inputs (MaskVLM's ITC, on top of frozen towers).
    pub fn itc_features(
        &self,
        text: &Tensor,
        mask: &Tensor,
        image: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let t = self
            .fusion
            .text_projection
            .forward(text)?
            .broadcast_mul(&m)?
            .sum(1)?;
        let t = t.broadcast_div(&m.sum(1)?)?;
        let i = self.fusion.image_projection.forward(image)?.mean(1)?;
        Ok((l2_normalize(&i)?, l2_normalize(&t)?))
    }

    /// ITM logits `(pairs, 2)`: the product of the fused text and image `[CLS]` states.
    pub fn itm_logits(&self, fused: &Fused) -> Result<Tensor> {
        Ok(self.fusion.itm_of(&fused.states, fused.text_tokens)?)
    }

    /// Vocabulary logits of fused states at `rows` (flattened `pair · tokens + position`).
    pub fn mlm_logits(&self, fused: &Fused, rows: &Tensor) -> Result<Tensor> {
        let x = gather_rows(&fused.states, rows)?;
        let x = self.mlm_norm.forward(
            &Act::Gelu.forward(&self.mlm_transform.forward(&x)?)?,
            &Differentiable,
        )?;
        Ok(x.matmul(&self.word_embeddings.t()?)?
            .broadcast_add(&self.mlm_bias)?)
    }

    /// Reconstructed pixels `(rows, 3·p·p)` of fused states at `rows`.
    pub fn mim_pixels(&self, fused: &Fused, rows: &Tensor) -> Result<Tensor> {
        Ok(self.mim.forward(&gather_rows(&fused.states, rows)?)?)
    }

    /// The tensors a served re-ranker loads (`fusion.*`, `itm.*`).
    pub fn served_tensors(&self) -> Result<HashMap<String, Tensor>> {
        Ok(snapshot(&self.store)?
            .into_iter()
            .filter(|(name, _)| name.starts_with("fusion.") || name.starts_with("itm."))
            .collect())
    }
}

/// The losses of one step.
pub struct RerankLosses {
    pub total: Tensor,
    pub parts: Vec<(&'static str, Tensor)>,
    /// Fraction of the ITM pairs classified correctly.
    pub itm_accuracy: f64,
}

/// One step's inputs, on the host.
pub struct RerankBatch {
    /// Captions, their negatives and their masked copies (3·B rows).
    pub ids: Vec<Vec<u32>>,
    /// Images, their negatives and their masked copies (3·B).
    pub images: Vec<PreprocessedImage>,
    /// MLM positions per pair and original ids.
    pub text_masks: Vec<(Vec<usize>, Vec<u32>)>,
    /// MIM patches per pair and their pixels.
    pub patch_masks: Vec<(Vec<usize>, Vec<f32>)>,
}

/// The weights of the objectives besides ITM.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub mlm: f64,
    pub mim: f64,
    pub itc: f64,
}

/// ITC temperature (ALBEF's and MaskVLM's starting value).
pub const ITC_TAU: f64 = 0.07;

/// The losses of a batch of `B` pairs (see the module docs): 3·B ITM pairs (positive, negative
/// image, negative caption), B MLM pairs and B MIM pairs in one fusion pass.
pub fn step_losses(
    model: &RerankModel,
    towers: &Towers,
    batch: &RerankBatch,
    weights: Weights,
) -> Result<RerankLosses> {
    let b = batch.text_masks.len();
    let device = towers.image_encoder().device().clone();
    let (text, mask) = towers.text_states(&batch.ids)?;
    let image = towers.image_states(&batch.images)?;
    let nt = text.dim(1)?;
    let ni = image.dim(1)?;
    let range = |a: usize, n: usize| -> Result<Tensor> {
        Ok(Tensor::arange(a as u32, (a + n) as u32, &device)?)
    };
    // Pairs: (t, v), (t, v⁻), (t⁻, v), (t_masked, v), (t, v_masked).
    let t_idx = Tensor::cat(
        &[
            &range(0, b)?,
            &range(0, b)?,
            &range(b, b)?,
            &range(2 * b, b)?,
            &range(0, b)?,
        ],
        0,
    )?;
    let v_idx = Tensor::cat(
        &[
            &range(0, b)?,
            &range(b, b)?,
            &range(0, b)?,
            &range(0, b)?,
            &range(2 * b, b)?,
        ],
        0,
    )?;
    let fused = model.fuse(
        &text.index_select(&t_idx, 0)?,
        &mask.index_select(&t_idx, 0)?,
        &image.index_select(&v_idx, 0)?,
    )?;
    let n = nt + ni;
    let itm_all = model.itm_logits(&fused)?;
    let itm_logits = itm_all.narrow(0, 0, 3 * b)?;
    let labels: Vec<u32> = (0..3 * b).map(|i| u32::from(i < b)).collect();
    let itm = cross_entropy(&itm_logits, &Tensor::new(labels.as_slice(), &device)?)?;
    let predicted: Vec<u32> = itm_logits.argmax(1)?.to_vec1()?;
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| p == l)
        .count();
    let mut parts = vec![("itm", itm.clone())];
    let mut total = itm;
    if weights.itc > 0.0 {
        let (i, t) = model.itc_features(
            &text.narrow(0, 0, b)?,
            &mask.narrow(0, 0, b)?,
            &image.narrow(0, 0, b)?,
        )?;
        let (itc, _, _) = info_nce(&i, &t, ITC_TAU)?;
        total = add_weighted(total, &mut parts, "itc", itc, weights.itc)?;
    }
    if weights.mlm > 0.0 {
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for (k, (positions, ids)) in batch.text_masks.iter().enumerate() {
            for (&p, &t) in positions.iter().zip(ids) {
                rows.push(((3 * b + k) * n + p) as u32);
                targets.push(t);
            }
        }
        let logits = model.mlm_logits(&fused, &Tensor::new(rows.as_slice(), &device)?)?;
        let mlm = cross_entropy(&logits, &Tensor::new(targets.as_slice(), &device)?)?;
        total = add_weighted(total, &mut parts, "mlm", mlm, weights.mlm)?;
    }
    if weights.mim > 0.0 {
        let mut rows = Vec::new();
        let mut pixels = Vec::new();
        for (k, (patches, px)) in batch.patch_masks.iter().enumerate() {
            for &p in patches {
                // Image tokens follow the text; the first is the image's [CLS].
                rows.push(((4 * b + k) * n + nt + 1 + p) as u32);
            }
            pixels.extend_from_slice(px);
        }
        let predicted = model.mim_pixels(&fused, &Tensor::new(rows.as_slice(), &device)?)?;
        let target = Tensor::from_vec(pixels, predicted.dims(), &device)?;
        let mim = l1(&predicted, &target)?;
        total = add_weighted(total, &mut parts, "mim", mim, weights.mim)?;
    }
    Ok(RerankLosses {
        total,
        parts,
        itm_accuracy: correct as f64 / (3 * b) as f64,
    })
}

/// The text tower's encoder layers renamed as fusion layers (`bert.encoder.layer.i.*` →
/// `fusion.encoder.layer.i.*`), cycling when the fusion encoder is deeper.
pub fn fusion_init(text: &lexlip_model::Weights, layers: usize) -> lexlip_model::Weights {
    let text_layers = (0..)
        .take_while(|i| {
            text.names()
                .any(|n| n.starts_with(&format!("bert.encoder.layer.{i}.")))
        })
        .count();
    let mut tensors = HashMap::new();
    if text_layers > 0 {
        for i in 0..layers {
            let from = format!("bert.encoder.layer.{}.", i % text_layers);
            for name in text.names().filter(|n| n.starts_with(&from)) {
                if let Some(t) = text.get(name) {
                    let to = format!("fusion.encoder.layer.{i}.{}", &name[from.len()..]);
                    tensors.insert(to, t.to_dtype(DType::F32).unwrap_or_else(|_| t.clone()));
                }
            }
        }
    }
    lexlip_model::Weights::from_tensors(tensors, text.source())
}
