//! Attention helpers shared by the text tower, the weight-sharing layers and the re-ranker.

use candle_core::{DType, Tensor};

use crate::error::Result;

/// The additive attention bias `(batch, 1, 1, tokens)` of a `(batch, tokens)` mask (1 = token):
/// 0 where attended, `f32::MIN` at padding (which is why text runs in f32).
pub(crate) fn attention_bias(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let m = mask.to_dtype(dtype)?;
    Ok(((m.ones_like()? - &m)? * f64::from(f32::MIN))?
        .unsqueeze(1)?
        .unsqueeze(1)?)
}
