//! The LexLIP training model: the two towers, the two LexMLM decoders (phase 1) and the momentum
//! encoders with their queues (phase 2), each in its own [`VarMap`]; and the losses of one step.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use lexlip_model::Weights;

use crate::beit::BeitMlm;
use crate::bert::{BertMlm, Decoder};
use crate::error::Result;
use crate::init::Init;
use crate::lexicon::{self, Flops};
use crate::losses;
pub use crate::momentum::{Queue, ema};
use crate::nn::Dropout;
use crate::optim::Param;
use crate::options::HeadInit;
use crate::params::{ParamBuilder, Source, snapshot, sorted_vars};
use crate::rng::key;
use crate::weight_sharing;

/// The stores of a model, by group name (checkpoint tensor names are `GROUP/NAME`).
pub const TEXT: &str = "text";
pub const IMAGE: &str = "image";
pub const DECODER_IMAGE: &str = "decoder_image";
pub const DECODER_TEXT: &str = "decoder_text";
pub const MOMENTUM_TEXT: &str = "momentum_text";
pub const MOMENTUM_IMAGE: &str = "momentum_image";
pub const SHARED: &str = "shared";
pub const MOMENTUM_SHARED: &str = "momentum_shared";
/// The MLM heads' vocabulary bias, in both towers' stores.
pub const BIAS: &str = "cls.predictions.bias";

/// The builder of a tower's parameters in `store`: from its initial model's `weights`, or
/// random ones keyed by the seed and the store's name (the same under both objectives).
pub fn tower_params<'a>(
    store: &'a VarMap,
    weights: Option<&'a Weights>,
    seed: u64,
    group: &str,
    dtype: DType,
    device: &Device,
) -> ParamBuilder<'a> {
    let source = match weights {
        Some(w) => Source::Weights(w),
        None => Source::Random(seed ^ key(group)),
    };
    ParamBuilder::new(store, source, dtype, device)
}

/// Hyper-parameters of the objectives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objectives {
    pub tau: f64,
    /// FLOPS weights of this step (per side, after the warm-up).
    pub flops: Flops,
    /// Weight of caption-word grounding ([`lexicon::grounding`]; 0 = off).
    pub grounding: f64,
    /// Image lexicons keep their K largest weights at this step ([`lexicon::top_k`]; 0 =
    /// all; [`lexicon::TopKSchedule`]).
    pub image_top_k: usize,
    pub momentum: f64,
    /// Weight of the ITC consistency loss ([`losses::itc_consistency`]; 0 = off).
    pub consistency: f64,
    /// Weights of COOKIE's single-modal losses (0 = off): image view against image view,
    /// caption against its masked copy ([`losses::single_modal`]).
    pub image_contrastive: f64,
    pub text_contrastive: f64,
    /// The dense objective's contrastive loss.
    pub dense_loss: crate::options::DenseLoss,
    /// The dense objective's token-level objectives (ConLIP).
    pub dense_token: crate::options::DenseToken,
}

/// The representations the optional in-batch losses read: the batch's image and text ones,
/// and second views of each when COOKIE's single-modal losses are on.
#[derive(Debug, Clone, Copy)]
pub struct Views<'a> {
    pub image: &'a Tensor,
    pub text: &'a Tensor,
    pub image_view: Option<&'a Tensor>,
    pub text_view: Option<&'a Tensor>,
}

impl Objectives {
    /// `total` plus the optional in-batch losses that are on, each also pushed to `parts`:
    /// GRIT-VLP's ITC consistency ([`losses::itc_consistency`]) and COOKIE's single-modal
    /// losses between each side and its second view ([`losses::single_modal`]).
    pub fn with_extras(
        &self,
        mut total: Tensor,
        parts: &mut Vec<(&'static str, Tensor)>,
        v: &Views<'_>,
    ) -> Result<Tensor> {
        if self.consistency > 0.0 {
            let c = losses::itc_consistency(v.image, v.text, self.tau)?;
            total = losses::add_weighted(total, parts, "itc_consistency", c, self.consistency)?;
        }
        for (name, weight, a, b) in [
            (
                "image_contrastive",
                self.image_contrastive,
                v.image,
                v.image_view,
            ),
            (
                "text_contrastive",
                self.text_contrastive,
                v.text,
                v.text_view,
            ),
        ] {
            if let Some(b) = b.filter(|_| weight > 0.0) {
                let l = losses::single_modal(a, b, self.tau)?;
                total = losses::add_weighted(total, parts, name, l, weight)?;
            }
        }
        Ok(total)
    }
}

/// Momentum encoders (EMA copies of the towers, read through detached handles) and queues.
pub struct Momentum {
    pub text_store: VarMap,
    pub image_store: VarMap,
    pub shared_store: VarMap,
    text: BertMlm,
    image: BeitMlm,
    pub queue_image: Queue,
    pub queue_text: Queue,
}

/// One step's inputs on the device.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `(batch, 3, size, size)` normalised pixels.
    pub pixels: Tensor,
    /// A second augmented view of the same images (COOKIE's visual contrastive loss).
    pub pixels_view: Option<Tensor>,
    /// `(batch, tokens)` original token ids and attention mask.
    pub ids: Tensor,
    pub mask: Tensor,
    /// Encoder input with `--mask-rate` masking, the masked positions (flattened `b·T + t`)
    /// and their original ids.
    pub enc_ids: Tensor,
    pub enc_rows: Tensor,
    pub enc_targets: Tensor,
    /// Decoder input with `--decoder-mask-rate` masking, positions and targets.
    pub dec_ids: Tensor,
    pub dec_rows: Tensor,
    pub dec_targets: Tensor,
    /// The frozen text tower's lexicon of the captions `(batch, vocab)` when cached
    /// ([`crate::text_cache`]); computed from `ids` otherwise.
    pub text_lexicon: Option<Tensor>,
    /// The image patches to mask (`--dense-token`).
    pub patches: Option<crate::token_heads::PatchMask>,
}

impl Batch {
    /// What the LexMLM decoders reconstruct: `embedded`, the embedding of [`Batch::dec_ids`],
    /// with the batch's mask, decoder positions and targets.
    fn decoder_input<'a>(&'a self, embedded: &'a Tensor) -> losses::DecoderInput<'a> {
        losses::DecoderInput {
            embedded,
            mask: &self.mask,
            rows: &self.dec_rows,
            targets: &self.dec_targets,
        }
    }
}

/// The losses of one step (scalar tensors; `total` is what is differentiated).
#[derive(Debug, Clone)]
pub struct StepLosses {
    pub total: Tensor,
    pub parts: Vec<(&'static str, Tensor)>,
    /// Mean non-zero terms per image / text representation (lexicon representations only).
    pub nnz_image: Option<f64>,
    pub nnz_text: Option<f64>,
    /// The batch's image and text representations, detached (what the grouped sampler keeps).
    pub features: Option<(Tensor, Tensor)>,
}

pub struct LexLipModel {
    pub text_store: VarMap,
    pub image_store: VarMap,
    /// COOKIE's weight-sharing layers (`--shared-layers`; empty without them): one set of
    /// variables both towers' `shared` read.
    pub shared_store: VarMap,
    pub decoder_image_store: VarMap,
    pub decoder_text_store: VarMap,
    pub text: BertMlm,
    pub image: BeitMlm,
    decoder_image: Decoder,
    decoder_text: Decoder,
    pub momentum: Option<Momentum>,
    pub init: Init,
    pub device: Device,
    /// The text tower is locked (`--freeze-text`): no updates, no dropout, no text-only losses.
    pub frozen_text: bool,
    /// The heads' vocabulary biases are not trained (`--vocab-bias fixed`; the image head's is
    /// zero).
    pub fixed_bias: bool,
    /// The IDF of every term over the training captions `(vocab)`, which grounding weights
    /// caption words with ([`lexicon::Idf`]); set by the loop when grounding is on.
    pub idf: Option<Tensor>,
    /// The K of top-K pooling the exported model records (`lexlip.json`; 0 = none); the steps
    /// cut with [`Objectives::image_top_k`], which narrows to it.
    pub image_top_k: usize,
}

/// The image side of a step: the lexicon `p_v` (top-K cut when asked), its distribution `a_v`
/// (eq. 8) and the grounding loss when it is on.
struct ImageSide {
    p: Tensor,
    distribution: Tensor,
    grounding: Option<Tensor>,
}

/// The lexicons of a phase-1 step: the image side, the caption lexicon `p_l` and COOKIE's text
/// view (the masked caption's lexicon) when its loss is on.
struct Phase1Sides<'a> {
    image: &'a ImageSide,
    text: &'a Tensor,
    text_view: Option<Tensor>,
}

impl LexLipModel {
    /// Builds every part from `init` (random parts from `seed`). Momentum encoders start as
    /// copies of the towers when `queue_size` is given (phase 2).
    pub fn build(
        init: &Init,
        decoder_layers: usize,
        queue_size: Option<usize>,
        seed: u64,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let text_store = VarMap::new();
        let text_weights = init.text.weights.as_ref();
        let text = BertMlm::new(
            &tower_params(&text_store, text_weights, seed, TEXT, dtype, device),
            &init.text.config,
            init.text.untied,
        )?;
        let image_store = VarMap::new();
        let image_weights = init.image.weights.as_ref();
        let pb = tower_params(&image_store, image_weights, seed, IMAGE, dtype, device);
        let head_weights = text_head_weights(&text_store, init.text.untied)?;
        let bias_only = Weights::from_tensors(
            head_weights
                .get("cls.predictions.bias")
                .map(|t| ("cls.predictions.bias".to_string(), t.clone()))
                .into_iter()
                .collect(),
            "<text MLM head bias>",
        );
        let head_random = seed ^ key("image-head");
        let head_pb = match (init.head_init, init.image.has_head) {
            (HeadInit::Auto, true) => pb.pp("cls"),
            (HeadInit::Text, _) => pb.with_source(Source::Weights(&head_weights)).pp("cls"),
            (HeadInit::Random, _) => pb.with_source(Source::Random(head_random)).pp("cls"),
            // From scratch with another hidden size: the text head's vocabulary bias only.
            (HeadInit::Auto, false) => pb
                .with_source(Source::WeightsOr(&bias_only, head_random))
                .pp("cls"),
        };
        let image_head = if init.head_init == HeadInit::Text {
            lexlip_model::image::HeadConfig {
                hidden_act: init.text.config.hidden_act.clone(),
                layer_norm_eps: init.text.config.layer_norm_eps,
            }
        } else {
            init.image.head.clone()
        };
        let image = BeitMlm::new(
            &pb,
            &head_pb,
            &init.image.config,
            &image_head,
            init.vocab.len(),
        )?;
        let word = text.word_embeddings().clone();
        let decoder = |name: &str, store: &VarMap| {
            Decoder::new(
                &ParamBuilder::new(store, Source::Random(seed ^ key(name)), dtype, device),
                &init.text.config,
                decoder_layers,
                &word,
            )
        };
        let decoder_image_store = VarMap::new();
        let decoder_text_store = VarMap::new();
        let decoder_image = decoder(DECODER_IMAGE, &decoder_image_store)?;
        let decoder_text = decoder(DECODER_TEXT, &decoder_text_store)?;
        let shared_store = VarMap::new();
        let (mut text, mut image) = (text, image);
        if let Some(s) = &init.shared {
            let source = match (s.pretrained, text_weights) {
                (true, Some(w)) => Source::Weights(w),
                _ => Source::Random(seed ^ key(SHARED)),
            };
            let pb = ParamBuilder::new(&shared_store, source, dtype, device);
            share_layers(&pb, &s.config, &mut text, &mut image)?;
        }
        let mut init = init.clone();
        init.image.head = image_head;
        let mut model = Self {
            text_store,
            image_store,
            shared_store,
            decoder_image_store,
            decoder_text_store,
            text,
            image,
            decoder_image,
            decoder_text,
            momentum: None,
            init,
            device: device.clone(),
            frozen_text: false,
            fixed_bias: false,
            idf: None,
            image_top_k: 0,
        };
        if let Some(q) = queue_size {
            model.momentum = Some(model.momentum_copy(q, dtype)?);
        }
        Ok(model)
    }

    fn momentum_copy(&self, queue: usize, dtype: DType) -> Result<Momentum> {
        let text_w = Weights::from_tensors(snapshot(&self.text_store)?, "<momentum text>");
        let image_w = Weights::from_tensors(snapshot(&self.image_store)?, "<momentum image>");
        let shared_w = Weights::from_tensors(snapshot(&self.shared_store)?, "<momentum shared>");
        let text_store = VarMap::new();
        let image_store = VarMap::new();
        let shared_store = VarMap::new();
        let dev = &self.device;
        let mut text = BertMlm::new(
            &ParamBuilder::new(&text_store, Source::Weights(&text_w), dtype, dev).detached(),
            &self.text.config,
            self.init.text.untied,
        )?;
        let pb = ParamBuilder::new(&image_store, Source::Weights(&image_w), dtype, dev).detached();
        let mut image = BeitMlm::new(
            &pb,
            &pb.pp("cls"),
            &self.image.config,
            &self.init.image.head,
            self.init.vocab.len(),
        )?;
        if let Some(s) = &self.init.shared {
            let pb =
                ParamBuilder::new(&shared_store, Source::Weights(&shared_w), dtype, dev).detached();
            share_layers(&pb, &s.config, &mut text, &mut image)?;
        }
        let v = self.init.vocab.len();
        Ok(Momentum {
            text_store,
            image_store,
            shared_store,
            text,
            image,
            queue_image: Queue::new(queue, v, dtype, dev)?,
            queue_text: Queue::new(queue, v, dtype, dev)?,
        })
    }

    /// The stores by group name (what checkpoints hold).
    pub fn stores(&self) -> Vec<(&'static str, &VarMap)> {
        let mut out = vec![
            (TEXT, &self.text_store),
            (IMAGE, &self.image_store),
            (DECODER_IMAGE, &self.decoder_image_store),
            (DECODER_TEXT, &self.decoder_text_store),
        ];
        if let Some(m) = &self.momentum {
            out.push((MOMENTUM_TEXT, &m.text_store));
            out.push((MOMENTUM_IMAGE, &m.image_store));
        }
        // Only runs with shared layers have these stores, so older checkpoints still resume.
        if self.init.shared.is_some() {
            out.push((SHARED, &self.shared_store));
            if let Some(m) = &self.momentum {
                out.push((MOMENTUM_SHARED, &m.shared_store));
            }
        }
        out
    }

    /// The parameters the optimizer updates: the towers, the shared layers, and the decoders in
    /// phase 1; with a frozen text tower, neither the text tower nor the decoder only it would
    /// train (the shared layers still do).
    pub fn params(&self, phase: u8, text_lr_scale: f64) -> Vec<Param> {
        let mut groups: Vec<(&str, &VarMap, f64)> = vec![(IMAGE, &self.image_store, 1.0)];
        if !self.frozen_text {
            groups.insert(0, (TEXT, &self.text_store, text_lr_scale));
        }
        if self.init.shared.is_some() {
            groups.push((SHARED, &self.shared_store, 1.0));
        }
        if phase == 1 {
            groups.push((DECODER_IMAGE, &self.decoder_image_store, 1.0));
            if !self.frozen_text {
                groups.push((DECODER_TEXT, &self.decoder_text_store, 1.0));
            }
        }
        let fixed_bias = self.fixed_bias;
        groups
            .into_iter()
            .flat_map(|(g, store, scale)| {
                sorted_vars(store)
                    .into_iter()
                    .filter(move |(n, _)| !(fixed_bias && (g == TEXT || g == IMAGE) && n == BIAS))
                    .map(move |(n, v)| Param::new(format!("{g}/{n}"), v, scale))
            })
            .collect()
    }

    /// `--vocab-bias fixed`: the image head's vocabulary bias becomes zero and neither head's
    /// is updated from here on ([`Self::params`] leaves them out).
    pub fn fix_vocab_bias(&mut self) -> Result<()> {
        self.fixed_bias = true;
        let vars = self.image_store.data().lock().map_err(|_| {
            crate::error::TrainError::invalid("the image parameters' lock is poisoned")
        })?;
        if let Some(bias) = vars.get(BIAS) {
            bias.set(&bias.as_tensor().zeros_like()?)?;
        }
        Ok(())
    }

    /// The text tower's lexicon of `(rows, tokens)` ids as a frozen tower gives it: no
    /// dropout, no gradient. The caption cache ([`crate::text_cache`]) is built with it.
    pub fn frozen_lexicon(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let logits = self.text.logits(ids, mask, &Dropout::off())?;
        Ok(losses::splade(&logits, Some(mask))?.detach())
    }

    /// The frozen text tower's lexicon of the batch's captions: cached, or computed. With
    /// shared layers (never cached) only the tower is frozen: the lexicon is differentiable
    /// through the shared layers, where `drop` acts.
    pub fn frozen_text_lexicon(&self, batch: &Batch, drop: &Dropout) -> Result<Tensor> {
        if self.text.shared.is_some() {
            let off = Dropout::off();
            let hidden = self.text.hidden(&batch.ids, &batch.mask, &off)?.detach();
            let logits = self.text.head_logits(&hidden, &batch.mask, drop)?;
            return losses::splade(&logits, Some(&batch.mask));
        }
        match &batch.text_lexicon {
            Some(cached) => Ok(cached.clone()),
            None => self.frozen_lexicon(&batch.ids, &batch.mask),
        }
    }

    /// The model a caption cache can be built with: a frozen text tower without shared layers
    /// (with them, the text lexicon trains).
    pub fn cacheable_text(&self) -> bool {
        self.frozen_text && self.init.shared.is_none()
    }

    /// The image lexicon `p_v`, cut to its top K, its distribution `a_v` (eq. 6, 8) and the
    /// caption-word grounding loss. One max-pool of the image logits serves all three.
    fn image_side(
        &self,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<ImageSide> {
        let pooled = losses::max_pool(&self.image.logits(&batch.pixels, drop)?, None)?;
        let full = losses::splade_pooled(&pooled)?;
        let p = cut(full.clone(), objectives.image_top_k)?;
        // Grounding trains the lexicon before the cut: after it, a caption word outside the K
        // strongest terms gets no gradient and can never rise into them.
        let grounding = match &self.idf {
            Some(idf) if objectives.grounding > 0.0 => {
                let (bags, has) = lexicon::grounding_targets(&batch.ids, &batch.mask, idf)?;
                Some(lexicon::grounding(&full, &bags, &has, objectives.tau)?)
            }
            _ => None,
        };
        Ok(ImageSide {
            p,
            distribution: crate::nn::softmax(&pooled)?,
            grounding,
        })
    }

    /// The image lexicon of the batch's second views, when it has them and COOKIE's visual
    /// contrastive loss is on.
    fn second_view(
        &self,
        batch: &Batch,
        objectives: &Objectives,
        drop: &Dropout,
    ) -> Result<Option<Tensor>> {
        match &batch.pixels_view {
            Some(view) if objectives.image_contrastive > 0.0 => Ok(Some(cut(
                losses::splade(&self.image.logits(view, drop)?, None)?,
                objectives.image_top_k,
            )?)),
            _ => Ok(None),
        }
    }

    /// Phase 1 with a frozen text tower: LexMLM i2t + BaCo against the text model's lexicon.
    fn phase1_frozen_text(
        &self,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<StepLosses> {
        let image = self.image_side(batch, drop, objectives)?;
        let (pv, av) = (&image.p, &image.distribution);
        let pl = self.frozen_text_lexicon(batch, drop)?;
        let dec_emb = self
            .text
            .embeddings()
            .forward(&batch.dec_ids, &Dropout::off())?
            .detach();
        let dec = batch.decoder_input(&dec_emb);
        let word = self.text.word_embeddings();
        let i2t = losses::lex_mlm(&self.decoder_image, av, word, &dec, drop)?;
        let baco = losses::baco(pv, &pl, objectives.tau, objectives.flops)?;
        let parts = vec![
            ("lex_mlm_i2t", i2t.clone()),
            ("baco", baco.loss.clone()),
            ("flops_image", baco.flops_image),
            ("flops_text", baco.flops_text),
        ];
        let sides = Phase1Sides {
            image: &image,
            text: &pl,
            text_view: None,
        };
        self.phase1_losses((&i2t + &baco.loss)?, parts, sides, batch, drop, objectives)
    }

    /// A phase-1 step's losses from its summed `total` and `parts`: with the grounding loss,
    /// COOKIE's and GRIT-VLP's extras over the lexicons and the second image view
    /// ([`Objectives::with_extras`]), and the lexicons' sizes and features.
    fn phase1_losses(
        &self,
        total: Tensor,
        mut parts: Vec<(&'static str, Tensor)>,
        sides: Phase1Sides,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<StepLosses> {
        let (pv, pl) = (&sides.image.p, sides.text);
        let total = with_grounding(total, sides.image, objectives, &mut parts)?;
        let pv2 = self.second_view(batch, objectives, drop)?;
        let views = Views {
            image: pv,
            text: pl,
            image_view: pv2.as_ref(),
            text_view: sides.text_view.as_ref(),
        };
        let total = objectives.with_extras(total, &mut parts, &views)?;
        Ok(StepLosses {
            total,
            parts,
            nnz_image: Some(losses::mean_nonzero(pv)?),
            nnz_text: Some(losses::mean_nonzero(pl)?),
            features: Some((pv.detach(), pl.detach())),
        })
    }

    /// Phase 1 (eq. 7-18): SelfMLM + LexMLM i2t + LexMLM t2i + BaCo.
    pub fn phase1(
        &self,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<StepLosses> {
        if self.frozen_text {
            return self.phase1_frozen_text(batch, drop, objectives);
        }
        let image = self.image_side(batch, drop, objectives)?;
        let (pv, av) = (&image.p, &image.distribution);

        let masked_logits = self.text.logits(&batch.enc_ids, &batch.mask, drop)?;
        let self_mlm = losses::masked_lm(&masked_logits, &batch.enc_rows, &batch.enc_targets)?;
        let al = losses::lexicon_distribution(&masked_logits, Some(&batch.mask))?;

        let text_logits = self.text.logits(&batch.ids, &batch.mask, drop)?;
        let pl = losses::splade(&text_logits, Some(&batch.mask))?;

        let word = self.text.word_embeddings();
        let dec_emb = self.text.embeddings().forward(&batch.dec_ids, drop)?;
        let dec = batch.decoder_input(&dec_emb);
        let i2t = losses::lex_mlm(&self.decoder_image, av, word, &dec, drop)?;
        let t2i = losses::lex_mlm(&self.decoder_text, &al, word, &dec, drop)?;
        let baco = losses::baco(pv, &pl, objectives.tau, objectives.flops)?;
        let total = (((&self_mlm + &i2t)? + &t2i)? + &baco.loss)?;
        let parts = vec![
            ("self_mlm", self_mlm),
            ("lex_mlm_i2t", i2t),
            ("lex_mlm_t2i", t2i),
            ("baco", baco.loss),
            ("flops_image", baco.flops_image),
            ("flops_text", baco.flops_text),
        ];
        let sides = Phase1Sides {
            image: &image,
            text: &pl,
            // COOKIE's text view: the lexicon of the masked caption SelfMLM already encoded.
            text_view: (objectives.text_contrastive > 0.0)
                .then(|| losses::splade(&masked_logits, Some(&batch.mask)))
                .transpose()?,
        };
        self.phase1_losses(total, parts, sides, batch, drop, objectives)
    }

    /// Phase 2 (eq. 19-23): the momentum encoders are moved towards the towers (EMA), encode
    /// the batch, and the towers are contrasted against them and the queues; the momentum
    /// representations are then queued. Returns the losses and the keys to queue once the
    /// step's update is done.
    pub fn phase2(
        &mut self,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<(StepLosses, Tensor, Tensor)> {
        self.ema(objectives.momentum)?;
        let off = Dropout::off();
        let Some(m) = &self.momentum else {
            return Err(crate::error::TrainError::invalid(
                "phase 2 needs momentum encoders",
            ));
        };
        let k = objectives.image_top_k;
        let pv_m = cut(
            losses::splade(&m.image.logits(&batch.pixels, &off)?, None)?,
            k,
        )?
        .detach();
        let image = self.image_side(batch, drop, objectives)?;
        let pv = image.p.clone();
        // A frozen text tower is its own momentum encoder (unless shared layers train).
        let (pl, pl_m) = if self.cacheable_text() {
            let pl = self.frozen_text_lexicon(batch, drop)?;
            (pl.clone(), pl)
        } else {
            let pl_m = losses::splade(
                &m.text.logits(&batch.ids, &batch.mask, &off)?,
                Some(&batch.mask),
            )?
            .detach();
            let pl = if self.frozen_text {
                self.frozen_text_lexicon(batch, drop)?
            } else {
                losses::splade(
                    &self.text.logits(&batch.ids, &batch.mask, drop)?,
                    Some(&batch.mask),
                )?
            };
            (pl, pl_m)
        };
        let qi = m.queue_image.rows()?;
        let qt = m.queue_text.rows()?;
        let moco = losses::moco(
            &pv,
            &pl,
            &pv_m,
            &pl_m,
            qi.as_ref(),
            qt.as_ref(),
            objectives.tau,
            objectives.flops,
        )?;
        let mut parts = vec![
            ("moco", moco.loss.clone()),
            ("moco_i2t", moco.i2t),
            ("moco_t2i", moco.t2i),
            ("flops_image", moco.flops_image),
            ("flops_text", moco.flops_text),
        ];
        let total = with_grounding(moco.loss, &image, objectives, &mut parts)?;
        Ok((
            StepLosses {
                total,
                parts,
                nnz_image: Some(losses::mean_nonzero(&pv)?),
                nnz_text: Some(losses::mean_nonzero(&pl)?),
                features: Some((pv.detach(), pl.detach())),
            },
            pv_m,
            pl_m,
        ))
    }

    /// `θ_m ← m θ_m + (1 - m) θ` for both momentum encoders (eq. 19-20).
    fn ema(&self, m: f64) -> Result<()> {
        let Some(mom) = &self.momentum else {
            return Ok(());
        };
        let mut pairs = vec![(&self.image_store, &mom.image_store)];
        if !self.frozen_text {
            pairs.push((&self.text_store, &mom.text_store));
        }
        if self.init.shared.is_some() {
            pairs.push((&self.shared_store, &mom.shared_store));
        }
        ema(&pairs, m)
    }

    /// Queues the momentum keys of the step just done.
    pub fn enqueue(&mut self, pv_m: &Tensor, pl_m: &Tensor) -> Result<()> {
        if let Some(m) = &mut self.momentum {
            m.queue_image.push(pv_m)?;
            m.queue_text.push(pl_m)?;
        }
        Ok(())
    }
}

/// `p` cut to its `k` largest weights per row (`k = 0`: uncut).
fn cut(p: Tensor, k: usize) -> Result<Tensor> {
    if k == 0 { Ok(p) } else { lexicon::top_k(&p, k) }
}

/// `total` plus the weighted grounding loss when the image side has one (also pushed to
/// `parts`).
fn with_grounding(
    total: Tensor,
    image: &ImageSide,
    objectives: &Objectives,
    parts: &mut Vec<(&'static str, Tensor)>,
) -> Result<Tensor> {
    match &image.grounding {
        Some(g) => {
            parts.push(("grounding", g.clone()));
            Ok((total + (g * objectives.grounding)?)?)
        }
        None => Ok(total),
    }
}

/// Builds the shared layers in `pb`'s store (under [`weight_sharing::KEY`]) and gives both
/// towers the same ones.
fn share_layers(
    pb: &ParamBuilder,
    cfg: &lexlip_model::weight_sharing::SharedConfig,
    text: &mut BertMlm,
    image: &mut BeitMlm,
) -> Result<()> {
    let layers = weight_sharing::layers(&pb.pp(weight_sharing::KEY), cfg, text.config.hidden_size)?;
    text.shared = Some(layers.clone());
    image.shared = Some(layers);
    Ok(())
}

/// The text tower's MLM head as image-head weights (both are named `cls.predictions.*`); the
/// projection is the text decoder (the word embeddings when tied).
fn text_head_weights(text: &VarMap, untied: bool) -> Result<Weights> {
    let all = snapshot(text)?;
    let mut out: HashMap<String, Tensor> = all
        .iter()
        .filter(|(k, _)| k.starts_with("cls."))
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect();
    if !untied && let Some(w) = all.get("bert.embeddings.word_embeddings.weight") {
        out.insert("cls.predictions.decoder.weight".into(), w.clone());
    }
    Ok(Weights::from_tensors(out, "<text MLM head>"))
}
