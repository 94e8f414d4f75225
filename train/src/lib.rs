//! LexLIP training in Candle (`lexlip train`).
//!
//! - [`bert`], [`beit`], [`head`]: the towers over trainable parameters ([`params`]): lexlip-model's
//!   own architectures (BEiT, BERT layers, weight-sharing and fusion layers) run in a
//!   differentiable [`nn::Mode`], under the Hugging Face names `lexlip-model` loads, so a trained
//!   model needs no conversion.
//! - [`lexicon`]: what keeps image lexicons sparse and grounded: top-K pooling, caption-word
//!   grounding, FLOPS per side with warm-up.
//! - [`losses`]: the phase-1 (SelfMLM, LexMLM, BaCo + FLOPS) and phase-2 (MoCo) objectives, and
//!   the dense baseline's InfoNCE.
//! - [`model`]: towers, decoders, momentum encoders and queues; one step's losses.
//! - [`dense`]: the CLIP-style dense baseline on the same towers (`--objective dense`).
//! - [`encoder_pair`]: the text and image encoders a run trains (LexLIP's or the dense
//!   baseline's) behind the one interface the loop, checkpoints and export use.
//! - [`optim`]: AdamW with savable moments, warm-up/decay schedule, gradient clipping.
//! - [`init`]: starting points (any model lexlip loads, or size presets from scratch).
//! - [`data`], [`augment`], [`text`]: pairs from the corpora `lexlip index` reads, image
//!   augmentation, tokenisation and masking.
//! - [`weight_sharing`]: COOKIE's layers shared by both towers (`--shared-layers`).
//! - [`sampler`]: GRIT-VLP's grouped mini-batches (`--sampler grouped`); `grouping` orders the
//!   cached-embedding objectives' entries (heads, adapter) by it.
//! - [`text_cache`]: the frozen text tower's lexicon of every caption (`--freeze-text`).
//! - [`objectives`]: what a run trains (LexLIP and dense, lexicon heads, the adapter, the
//!   MaskVLM re-ranker), each on the one loop (`steps`) with [`checkpoint`]s (atomic, bitwise
//!   resume), [`fingerprint`]s and [`export`] of the model directory.
//!
//! Randomness is keyed by (seed, purpose, step, index) ([`rng`]), so a run resumed from a
//! checkpoint computes bit for bit what an uninterrupted one does on the CPU.

pub mod augment;
pub mod beit;
pub mod bert;
pub mod cache;
pub mod checkpoint;
pub mod data;
pub mod dense;
pub mod encoder_pair;
pub mod error;
pub mod expansion;
pub mod export;
pub mod fingerprint;
mod grouping;
pub mod head;
pub mod init;
pub mod lexicon;
pub mod losses;
pub mod model;
pub mod momentum;
pub mod nn;
pub mod objectives;
pub mod observe;
pub mod optim;
pub mod options;
pub mod params;
pub mod rng;
pub mod sampler;
mod steps;
pub mod text;
pub mod text_cache;
pub mod token_heads;
pub mod weight_sharing;

pub use error::{Result, TrainError};
pub use observe::{Observer, RunControl, Silent, StepLog, Summary};
pub use options::{
    DenseLoss, DenseToken, HeadInit, Objective, Preset, SaveDtype, TrainOptions, VocabBias,
};

/// Trains what `opts.objective` names into `opts.out`: checkpoints as it goes, resumes the
/// same run from its last checkpoint, stops after the current step when `control.stop` is set, and
/// writes the model directory and `train.json` at the end.
pub fn train(
    opts: &TrainOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    opts.validate()?;
    match opts.method.objective {
        Objective::Heads => objectives::heads::train(opts, control, observer),
        Objective::Adapter => objectives::adapter::train(opts, control, observer),
        Objective::Rerank => {
            steps::prepare_out(&opts.run.out)?;
            objectives::rerank::train(opts, control, observer)
        }
        Objective::Lexlip | Objective::Dense => objectives::lexlip::train(opts, control, observer),
    }
}
pub use sampler::Sampler;
