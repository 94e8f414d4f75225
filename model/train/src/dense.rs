//! The CLIP-style dense baseline (`--objective dense`): LexLIP's towers without their MLM heads,
//! each pooled at `[CLS]` (position 0), projected linearly (no bias) to `--dense-dim` and
//! L2-normalised; trained with CLIP's symmetric in-batch InfoNCE at the fixed temperature `--tau`.
//!
//! Why `[CLS]`: CLIP's image tower pools at its class token too, both towers attend
//! bidirectionally so position 0 can gather the whole input, and it needs no padding arithmetic
//! (the attention mask already keeps padding out), so the training forward and the inference
//! encoder (`lexlip_model::DualEncoder`) compute the same thing by construction.
//!
//! Why a fixed τ rather than CLIP's learnable logit scale: BaCo trains the lexicon model with
//! the same fixed τ, so the comparison differs in the representation only; and a learnable scale
//! (with its clamp at 100) adds a parameter whose value mostly follows the batch size, which is
//! small here.
//!
//! Parameters live in three stores: `text` (`bert.*`), `image` (`beit.*`, `layernorm.*`) and
//! `projection` (`text_projection.weight`, `visual_projection.weight`); the export prefixes the
//! towers with `text_model.` / `vision_model.` ([`lexlip_model::dual`]).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use lexlip_model::dual::{TEXT_PROJECTION, VISUAL_PROJECTION};

use crate::beit::BeitEncoder;
use crate::bert::BertEncoder;
use crate::error::Result;
use crate::init::Init;
use crate::losses;
use crate::model::{Batch, IMAGE, Objectives, StepLosses, TEXT, Views, tower_params};
use crate::nn::{Dropout, Linear};
use crate::optim::Param;
use crate::options::DenseLoss;
use crate::params::{ParamBuilder, Source, sorted_vars};
use crate::rng::key;

/// The store of the two projections.
pub const PROJECTION: &str = "projection";

pub struct DenseModel {
    pub text_store: VarMap,
    pub image_store: VarMap,
    pub projection_store: VarMap,
    pub text: BertEncoder,
    pub image: BeitEncoder,
    text_projection: Linear,
    visual_projection: Linear,
    /// Embedding dimension.
    pub dim: usize,
    pub init: Init,
    pub device: Device,
}

/// The representation of each sequence in `(batch, tokens, hidden)` states: `[CLS]`.
fn cls(hidden: &Tensor) -> Result<Tensor> {
    Ok(hidden.narrow(1, 0, 1)?.squeeze(1)?)
}

impl DenseModel {
    /// Builds the towers from `init` (random parts from `seed`, keyed by name as in the LexLIP
    /// model, so a tower from scratch starts from the same weights under both objectives) and
    /// random projections to `dim`.
    pub fn build(
        init: &Init,
        dim: usize,
        seed: u64,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let text_store = VarMap::new();
        let text_weights = init.text.weights.as_ref();
        let text = BertEncoder::new(
            &tower_params(&text_store, text_weights, seed, TEXT, dtype, device),
            &init.text.config,
        )?;
        let image_store = VarMap::new();
        let image_weights = init.image.weights.as_ref();
        let image = BeitEncoder::new(
            &tower_params(&image_store, image_weights, seed, IMAGE, dtype, device),
            &init.image.config,
        )?;
        let projection_store = VarMap::new();
        let pb = ParamBuilder::new(
            &projection_store,
            Source::Random(seed ^ key(PROJECTION)),
            dtype,
            device,
        );
        let text_projection = Linear::new(
            &pb.pp(TEXT_PROJECTION),
            init.text.config.hidden_size,
            dim,
            false,
        )?;
        let visual_projection = Linear::new(
            &pb.pp(VISUAL_PROJECTION),
            init.image.config.hidden_size,
            dim,
            false,
        )?;
        Ok(Self {
            text_store,
            image_store,
            projection_store,
            text,
            image,
            text_projection,
            visual_projection,
            dim,
            init: init.clone(),
            device: device.clone(),
        })
    }

    /// The stores by group name (what checkpoints hold).
    pub fn stores(&self) -> Vec<(&'static str, &VarMap)> {
        vec![
            (TEXT, &self.text_store),
            (IMAGE, &self.image_store),
            (PROJECTION, &self.projection_store),
        ]
    }

    /// Every parameter is trained; the text tower's learning rate is scaled by `text_lr_scale`.
    pub fn params(&self, text_lr_scale: f64) -> Vec<Param> {
        self.stores()
            .into_iter()
            .flat_map(|(g, store)| {
                let scale = if g == TEXT { text_lr_scale } else { 1.0 };
                sorted_vars(store)
                    .into_iter()
                    .map(move |(n, v)| Param::new(format!("{g}/{n}"), v, scale))
            })
            .collect()
    }

    /// Unit-length text embeddings `(batch, dim)` of `ids` with attention `mask`.
    pub fn embed_texts(&self, ids: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let pooled = cls(&self.text.hidden(ids, mask, drop)?)?;
        losses::l2_normalize(&self.text_projection.forward(&pooled)?)
    }

    /// Unit-length image embeddings `(batch, dim)` of `(batch, 3, size, size)` pixels.
    pub fn embed_images(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let pooled = cls(&self.image.hidden(pixels, drop)?)?;
        losses::l2_normalize(&self.visual_projection.forward(&pooled)?)
    }

    /// One step's loss: symmetric InfoNCE (or ConLIP's DCL, `obj.dense_loss`) of the batch's
    /// image and caption embeddings at `obj.tau`, plus the ITC consistency and COOKIE's
    /// single-modal losses when they are on.
    pub fn step(&self, batch: &Batch, drop: &Dropout, obj: &Objectives) -> Result<StepLosses> {
        let image = self.embed_images(&batch.pixels, drop)?;
        let text = self.embed_texts(&batch.ids, &batch.mask, drop)?;
        let (name, (loss, i2t, t2i)) = match obj.dense_loss {
            DenseLoss::Infonce => ("info_nce", losses::info_nce(&image, &text, obj.tau)?),
            DenseLoss::Dcl => ("dcl", losses::dcl(&image, &text, obj.tau)?),
        };
        let mut parts = vec![(name, loss.clone()), ("i2t", i2t), ("t2i", t2i)];
        let image2 = match &batch.pixels_view {
            Some(view) if obj.image_contrastive > 0.0 => Some(self.embed_images(view, drop)?),
            _ => None,
        };
        let text2 = (obj.text_contrastive > 0.0)
            .then(|| self.embed_texts(&batch.enc_ids, &batch.mask, drop))
            .transpose()?;
        let views = Views {
            image: &image,
            text: &text,
            image_view: image2.as_ref(),
            text_view: text2.as_ref(),
        };
        let total = obj.with_extras(loss, &mut parts, &views)?;
        Ok(StepLosses {
            total,
            parts,
            nnz_image: None,
            nnz_text: None,
            features: Some((image.detach(), text.detach())),
        })
    }
}
