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
use lexlip_model::Weights;
use lexlip_model::dual::{TEXT_PROJECTION, VISUAL_PROJECTION};

use crate::beit::{self, Beit};
use crate::bert::BertEncoder;
use crate::error::Result;
use crate::init::Init;
use crate::losses;
use crate::model::{
    Batch, IMAGE, MOMENTUM_IMAGE, MOMENTUM_TEXT, Objectives, Queue, StepLosses, TEXT, Views, ema,
};
use crate::nn::{self, Dropout, Linear};
use crate::optim::Param;
use crate::options::{DenseLoss, DenseToken};
use crate::params::{ParamBuilder, Source, snapshot, sorted_vars};
use crate::rng::key;
use crate::token_heads::{TokenHeads, TokenInputs};

/// The store of the two projections.
pub const PROJECTION: &str = "projection";
/// The store of ConLIP's token-level heads (`--dense-token`; trained, not exported).
pub const TOKEN_HEADS: &str = "token_heads";
/// The stores of the momentum copy of the projections (`--dense-momentum`).
pub const MOMENTUM_PROJECTION: &str = "momentum_projection";

/// ConLIP's momentum encoders and queues (`--dense-momentum`, EMNLP 2022 Findings, sec. 3.3).
pub struct DenseMomentum {
    /// The EMA copy of the towers and projections (detached; no momentum of its own).
    pub model: Box<DenseModel>,
    pub queue_image: Queue,
    pub queue_text: Queue,
}

pub struct DenseModel {
    pub text_store: VarMap,
    pub image_store: VarMap,
    pub projection_store: VarMap,
    pub text: BertEncoder,
    pub image: Beit,
    text_projection: Linear,
    visual_projection: Linear,
    /// Embedding dimension.
    pub dim: usize,
    pub init: Init,
    pub device: Device,
    pub momentum: Option<DenseMomentum>,
    /// ConLIP's token-level heads and their store (`--dense-token`).
    pub token: Option<(VarMap, TokenHeads)>,
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
        fn source<'a>(weights: Option<&'a Weights>, seed: u64, group: &str) -> Source<'a> {
            match weights {
                Some(w) => Source::Weights(w),
                None => Source::Random(seed ^ key(group)),
            }
        }
        let sources = [
            source(init.text.weights.as_ref(), seed, TEXT),
            source(init.image.weights.as_ref(), seed, IMAGE),
            Source::Random(seed ^ key(PROJECTION)),
        ];
        Self::assemble(init, dim, sources, false, dtype, device)
    }

    /// The towers and projections from `sources` (text, image, projection), read through
    /// detached handles when `detached` (a momentum copy, which no gradient reaches).
    fn assemble(
        init: &Init,
        dim: usize,
        sources: [Source<'_>; 3],
        detached: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let [text_store, image_store, projection_store] =
            [VarMap::new(), VarMap::new(), VarMap::new()];
        let builder = |store, source| {
            let b = ParamBuilder::new(store, source, dtype, device);
            if detached { b.detached() } else { b }
        };
        let [text_src, image_src, projection_src] = sources;
        let text = BertEncoder::new(&builder(&text_store, text_src), &init.text.config)?;
        let image = beit::tower(&builder(&image_store, image_src), &init.image.config)?;
        let pb = builder(&projection_store, projection_src);
        // A tower's projection from its `hidden` width onto the shared `dim`, without bias.
        let projection = |name: &str, hidden: usize| Linear::new(&pb.pp(name), hidden, dim, false);
        let text_projection = projection(TEXT_PROJECTION, init.text.config.hidden_size)?;
        let visual_projection = projection(VISUAL_PROJECTION, init.image.config.hidden_size)?;
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
            momentum: None,
            token: None,
        })
    }

    /// Adds ConLIP's token-level heads (random, from `seed`).
    pub fn with_token_heads(mut self, seed: u64, dtype: DType) -> Result<Self> {
        let store = VarMap::new();
        let pb = ParamBuilder::new(
            &store,
            Source::Random(seed ^ key(TOKEN_HEADS)),
            dtype,
            &self.device,
        );
        let heads = TokenHeads::new(
            &pb,
            &self.init.text.config,
            &self.init.image.config,
            &self.text.embeddings.word,
        )?;
        self.token = Some((store, heads));
        Ok(self)
    }

    /// Adds ConLIP's momentum encoders (copies of the towers and projections as they are now,
    /// moved by EMA at each step) and queues of `queue` keys per modality.
    pub fn with_momentum(mut self, queue: usize, dtype: DType) -> Result<Self> {
        let weights = |store: &VarMap, name: &str| -> Result<Weights> {
            Ok(Weights::from_tensors(snapshot(store)?, name))
        };
        let text = weights(&self.text_store, "<momentum text>")?;
        let image = weights(&self.image_store, "<momentum image>")?;
        let projection = weights(&self.projection_store, "<momentum projection>")?;
        let sources = [
            Source::Weights(&text),
            Source::Weights(&image),
            Source::Weights(&projection),
        ];
        let model = Self::assemble(&self.init, self.dim, sources, true, dtype, &self.device)?;
        self.momentum = Some(DenseMomentum {
            model: Box::new(model),
            queue_image: Queue::new(queue, self.dim, dtype, &self.device)?,
            queue_text: Queue::new(queue, self.dim, dtype, &self.device)?,
        });
        Ok(self)
    }

    /// The online stores by group name (what is trained and exported).
    fn online_stores(&self) -> [(&'static str, &VarMap); 3] {
        [
            (TEXT, &self.text_store),
            (IMAGE, &self.image_store),
            (PROJECTION, &self.projection_store),
        ]
    }

    /// The stores by group name (what checkpoints hold): the online ones and the momentum
    /// copies.
    pub fn stores(&self) -> Vec<(&'static str, &VarMap)> {
        let mut out = self.online_stores().to_vec();
        if let Some((store, _)) = &self.token {
            out.push((TOKEN_HEADS, store));
        }
        if let Some(m) = &self.momentum {
            out.extend([
                (MOMENTUM_TEXT, &m.model.text_store),
                (MOMENTUM_IMAGE, &m.model.image_store),
                (MOMENTUM_PROJECTION, &m.model.projection_store),
            ]);
        }
        out
    }

    /// Every online parameter (and the token heads') is trained; the text tower's learning
    /// rate is scaled by `text_lr_scale`.
    pub fn params(&self, text_lr_scale: f64) -> Vec<Param> {
        let heads = self.token.as_ref().map(|(store, _)| (TOKEN_HEADS, store));
        self.online_stores()
            .into_iter()
            .chain(heads)
            .flat_map(|(g, store)| {
                let scale = if g == TEXT { text_lr_scale } else { 1.0 };
                sorted_vars(store)
                    .into_iter()
                    .map(move |(n, v)| Param::new(format!("{g}/{n}"), v, scale))
            })
            .collect()
    }

    /// Queues the momentum keys of the step just done.
    pub fn enqueue(&mut self, key_image: &Tensor, key_text: &Tensor) -> Result<()> {
        if let Some(m) = &mut self.momentum {
            m.queue_image.push(key_image)?;
            m.queue_text.push(key_text)?;
        }
        Ok(())
    }

    /// Unit-length text embeddings `(batch, dim)` of `ids` with attention `mask`.
    pub fn embed_texts(&self, ids: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.project_texts(&self.text.hidden(ids, mask, drop)?)
    }

    /// Unit-length image embeddings `(batch, dim)` of `(batch, 3, size, size)` pixels.
    pub fn embed_images(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.project_images(&self.image.hidden(pixels, drop)?)
    }

    /// The text embeddings of text tower states.
    fn project_texts(&self, hidden: &Tensor) -> Result<Tensor> {
        nn::l2_normalize(&self.text_projection.forward(&cls(hidden)?)?)
    }

    /// The image embeddings of image tower states.
    fn project_images(&self, hidden: &Tensor) -> Result<Tensor> {
        nn::l2_normalize(&self.visual_projection.forward(&cls(hidden)?)?)
    }

    /// One step's loss: symmetric InfoNCE (or ConLIP's DCL, `objectives.dense_loss`) of the batch's
    /// image and caption embeddings at `objectives.tau`, plus ConLIP's token-level losses
    /// (`objectives.dense_token`, [`crate::token_heads`]), the ITC consistency and COOKIE's
    /// single-modal losses when they are on.
    ///
    /// With momentum encoders (`--dense-momentum`), they are first moved towards the towers
    /// (EMA), encode the batch as keys, and the contrast is against those keys and the queues
    /// ([`losses::momentum_contrast`]); the keys to queue once the update is done are returned.
    pub fn step(
        &self,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<(StepLosses, Option<(Tensor, Tensor)>)> {
        let image_states = self.image.hidden(&batch.pixels, drop)?;
        let text_states = self.text.hidden(&batch.ids, &batch.mask, drop)?;
        let image = self.project_images(&image_states)?;
        let text = self.project_texts(&text_states)?;
        let decoupled = objectives.dense_loss == DenseLoss::Dcl;
        let name = if decoupled { "dcl" } else { "info_nce" };
        let mut keys = None;
        let (loss, i2t, t2i) = match &self.momentum {
            None if decoupled => losses::dcl(&image, &text, objectives.tau)?,
            None => losses::info_nce(&image, &text, objectives.tau)?,
            Some(m) => {
                let pairs: Vec<(&VarMap, &VarMap)> = self
                    .online_stores()
                    .into_iter()
                    .zip(m.model.online_stores())
                    .map(|((_, online), (_, copy))| (online, copy))
                    .collect();
                ema(&pairs, objectives.momentum)?;
                let off = Dropout::off();
                let key_image = m.model.embed_images(&batch.pixels, &off)?.detach();
                let key_text = m.model.embed_texts(&batch.ids, &batch.mask, &off)?.detach();
                let out = losses::momentum_contrast(
                    &image,
                    &text,
                    &key_image,
                    &key_text,
                    m.queue_image.rows()?.as_ref(),
                    m.queue_text.rows()?.as_ref(),
                    objectives.tau,
                    decoupled,
                )?;
                keys = Some((key_image, key_text));
                out
            }
        };
        let mut parts = vec![(name, loss.clone()), ("i2t", i2t), ("t2i", t2i)];
        let mut total = loss;
        let heads = self
            .token
            .as_ref()
            .map(|(_, h)| h)
            .filter(|_| objectives.dense_token != DenseToken::None);
        // The masked captions (the SelfMLM input): read by the token heads and COOKIE's
        // textual loss, encoded once for both.
        let text_masked = (heads.is_some() || objectives.text_contrastive > 0.0)
            .then(|| self.text.hidden(&batch.enc_ids, &batch.mask, drop))
            .transpose()?;
        if let Some(heads) = heads {
            let (Some(patches), Some(text_masked)) = (&batch.patches, &text_masked) else {
                return Err(crate::error::TrainError::invalid(
                    "--dense-token needs batches with masked patches",
                ));
            };
            let image_masked =
                self.image
                    .hidden_masked(&batch.pixels, &patches.keep, &heads.mask_token, drop)?;
            let inputs = TokenInputs {
                text: &text_states,
                text_masked,
                mask: &batch.mask,
                image: &image_states,
                image_masked: &image_masked,
                text_rows: &batch.enc_rows,
                text_targets: &batch.enc_targets,
                patch_rows: &patches.state_rows,
                patch_targets: &patches.targets(&batch.pixels)?,
            };
            let (mlm, mim) = heads.losses(&inputs, objectives.dense_token, drop)?;
            total = ((total + &mlm)? + &mim)?;
            parts.extend([("mlm", mlm), ("mim", mim)]);
        }
        let image2 = match &batch.pixels_view {
            Some(view) if objectives.image_contrastive > 0.0 => {
                Some(self.embed_images(view, drop)?)
            }
            _ => None,
        };
        let text2 = match &text_masked {
            Some(states) if objectives.text_contrastive > 0.0 => Some(self.project_texts(states)?),
            _ => None,
        };
        let views = Views {
            image: &image,
            text: &text,
            image_view: image2.as_ref(),
            text_view: text2.as_ref(),
        };
        let total = objectives.with_extras(total, &mut parts, &views)?;
        let losses = StepLosses {
            total,
            parts,
            nnz_image: None,
            nnz_text: None,
            features: Some((image.detach(), text.detach())),
        };
        Ok((losses, keys))
    }
}
