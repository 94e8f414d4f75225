//! The pair of encoders a run trains, LexLIP's or the dense baseline's, behind the one interface
//! the loop, checkpoints and export use.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use crate::dense::DenseModel;
use crate::error::Result;
use crate::init::Init;
use crate::lexicon::Idf;
use crate::model::{Batch, LexLipModel, Objectives, Queue, StepLosses};
use crate::nn::Dropout;
use crate::optim::Param;
use crate::options::{DenseToken, Objective, SaveDtype, TrainOptions, VocabBias};

pub enum EncoderPair {
    // Boxed: both are large, and of different sizes.
    LexLip(Box<LexLipModel>),
    Dense(Box<DenseModel>),
}

/// Momentum keys a phase-2 step queues once its update is done.
pub type Keys = Option<(Tensor, Tensor)>;

impl EncoderPair {
    /// Builds what `opts.objective` trains from `init`.
    pub fn build(opts: &TrainOptions, init: &Init, dtype: DType, device: &Device) -> Result<Self> {
        Ok(match opts.method.objective {
            Objective::Lexlip => {
                let queue = (opts.method.phase == 2).then_some(opts.method.queue_size);
                let mut m = LexLipModel::build(
                    init,
                    opts.method.decoder_layers,
                    queue,
                    opts.optim.seed,
                    dtype,
                    device,
                )?;
                m.frozen_text = opts.method.freeze_text;
                m.image_top_k = opts.lexicon.image_top_k;
                if opts.lexicon.vocab_bias == VocabBias::Fixed {
                    m.fix_vocab_bias()?;
                }
                EncoderPair::LexLip(Box::new(m))
            }
            Objective::Dense => {
                let m =
                    DenseModel::build(init, opts.method.dense_dim, opts.optim.seed, dtype, device)?;
                let m = if opts.method.dense_momentum {
                    m.with_momentum(opts.method.queue_size, dtype)?
                } else {
                    m
                };
                let m = if opts.method.dense_token != DenseToken::None {
                    m.with_token_heads(opts.optim.seed, dtype)?
                } else {
                    m
                };
                EncoderPair::Dense(Box::new(m))
            }
            Objective::Rerank | Objective::Heads | Objective::Adapter => {
                return Err(crate::error::TrainError::invalid(
                    "the re-ranker, the lexicon heads and the adapter are trained by their own \
                     modules, not the tower loop",
                ));
            }
        })
    }

    /// Gives a LexLIP model the corpus's IDF, which caption-word grounding weights words with
    /// (the dense objective has no lexicons to ground).
    pub fn ground(&mut self, idf: &Idf) -> Result<()> {
        if let EncoderPair::LexLip(m) = self {
            m.idf = Some(idf.to_tensor(&m.device)?);
        }
        Ok(())
    }

    /// The LexLIP model when its captions' lexicons can be cached: a frozen text tower
    /// (`--freeze-text`) without shared layers.
    pub fn frozen_text(&self) -> Option<&LexLipModel> {
        match self {
            EncoderPair::LexLip(m) if m.cacheable_text() => Some(m),
            _ => None,
        }
    }

    pub fn init(&self) -> &Init {
        match self {
            EncoderPair::LexLip(m) => &m.init,
            EncoderPair::Dense(m) => &m.init,
        }
    }

    pub fn device(&self) -> &Device {
        match self {
            EncoderPair::LexLip(m) => &m.device,
            EncoderPair::Dense(m) => &m.device,
        }
    }

    /// The side of the square images the image tower reads.
    pub fn image_size(&self) -> usize {
        match self {
            EncoderPair::LexLip(m) => m.image.image_size(),
            EncoderPair::Dense(m) => m.image.input_size(),
        }
    }

    /// The stores by group name (what checkpoints hold).
    pub fn stores(&self) -> Vec<(&'static str, &VarMap)> {
        match self {
            EncoderPair::LexLip(m) => m.stores(),
            EncoderPair::Dense(m) => m.stores(),
        }
    }

    /// The parameters the optimizer updates in `phase`.
    pub fn params(&self, phase: u8, text_lr_scale: f64) -> Vec<Param> {
        match self {
            EncoderPair::LexLip(m) => m.params(phase, text_lr_scale),
            EncoderPair::Dense(m) => m.params(text_lr_scale),
        }
    }

    /// One step's losses, and the momentum keys to queue after the update (LexLIP phase 2, the
    /// dense objective with `--dense-momentum`).
    pub fn step(
        &mut self,
        phase: u8,
        batch: &Batch,
        drop: &Dropout,
        objectives: &Objectives,
    ) -> Result<(StepLosses, Keys)> {
        match self {
            EncoderPair::LexLip(m) if phase == 1 => Ok((m.phase1(batch, drop, objectives)?, None)),
            EncoderPair::LexLip(m) => {
                let (losses, pv, pl) = m.phase2(batch, drop, objectives)?;
                Ok((losses, Some((pv, pl))))
            }
            EncoderPair::Dense(m) => m.step(batch, drop, objectives),
        }
    }

    /// Queues the momentum keys of the step just done.
    pub fn enqueue(&mut self, keys: Keys) -> Result<()> {
        match (self, keys) {
            (EncoderPair::LexLip(m), Some((pv, pl))) => m.enqueue(&pv, &pl),
            (EncoderPair::Dense(m), Some((image, text))) => m.enqueue(&image, &text),
            _ => Ok(()),
        }
    }

    /// The image and text queues of momentum keys (LexLIP phase 2, `--dense-momentum`).
    pub fn queues(&self) -> Option<(&Queue, &Queue)> {
        match self {
            EncoderPair::LexLip(m) => m.momentum.as_ref().map(|m| (&m.queue_image, &m.queue_text)),
            EncoderPair::Dense(m) => m.momentum.as_ref().map(|m| (&m.queue_image, &m.queue_text)),
        }
    }

    pub fn queues_mut(&mut self) -> Option<(&mut Queue, &mut Queue)> {
        match self {
            EncoderPair::LexLip(m) => m
                .momentum
                .as_mut()
                .map(|m| (&mut m.queue_image, &mut m.queue_text)),
            EncoderPair::Dense(m) => m
                .momentum
                .as_mut()
                .map(|m| (&mut m.queue_image, &mut m.queue_text)),
        }
    }

    /// Writes the trained model into `out`.
    pub fn export(&self, out: &Path, dtype: SaveDtype, max_length: usize) -> Result<()> {
        match self {
            EncoderPair::LexLip(m) => crate::export::export(m, out, dtype, max_length),
            EncoderPair::Dense(m) => crate::export::export_dense(m, out, dtype, max_length),
        }
    }
}

/// The file whose presence says `out` holds the exported model of `objective` (written last).
pub fn exported_marker(objective: Objective) -> &'static str {
    match objective {
        Objective::Lexlip => "lexlip.json",
        Objective::Dense => "config.json",
        Objective::Rerank => "rerank.json",
        Objective::Heads => "heads/config.json",
        Objective::Adapter => "config.json",
    }
}
