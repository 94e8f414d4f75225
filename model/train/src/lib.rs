//! LexLIP training in Candle (`lexlip train`).
//!
//! - [`bert`], [`beit`], [`head`]: differentiable towers whose weights live in `VarMap`s under
//!   the Hugging Face names `lexlip-model` loads, so a trained model needs no conversion.
//! - [`losses`]: the phase-1 (SelfMLM, LexMLM, BaCo + FLOPS) and phase-2 (MoCo) objectives.
//! - [`model`]: towers, decoders, momentum encoders and queues; one step's losses.
//! - [`optim`]: AdamW with savable moments, warm-up/decay schedule, gradient clipping.
//! - [`init`]: starting points (any model lexlip loads, or size presets from scratch).
//!
//! Randomness is keyed by (seed, purpose, step, index) ([`rng`]), so a run resumed from a
//! checkpoint computes bit for bit what an uninterrupted one does on the CPU.

pub mod beit;
pub mod bert;
pub mod error;
pub mod head;
pub mod init;
pub mod losses;
pub mod model;
pub mod nn;
pub mod optim;
pub mod options;
pub mod params;
pub mod rng;

pub use error::{Result, TrainError};
pub use options::{HeadInit, Preset, SaveDtype, TrainOptions};
