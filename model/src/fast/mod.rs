//! Inference-only layers of the published architectures lexlip loads as their authors released
//! them (BLIP, VDR): a BERT encoder, a vision transformer's pre-norm block, and the layers
//! under them, each with a fast f32 CPU path ([`kernels`]: bias, residual and activation folded
//! into the matrix products, attention per head without copies) and candle's ops elsewhere.
//! lexlip's own trainable architectures build on [`crate::nn`] instead, which also trains.

pub mod bert;
pub(crate) mod kernels;
pub(crate) mod layers;
pub(crate) mod vit;

pub use bert::{Bert, BertShape};
pub use layers::Activation;
