//! SPLADE pooling of MLM logits into lexicon weights (LexLIP eq. 3 and 6):
//! `w = log(1 + max_over_tokens(relu(logits)))`, padding positions excluded.

use candle_core::{D, DType, Tensor};
use lexlip_proto::SparseVector;

use crate::error::{ModelError, Result};
use crate::vocab::Vocabulary;

/// Pools `(batch, tokens, vocab)` logits into `(batch, vocab)` f32 weights.
///
/// `mask` is `(batch, tokens)` with 1 for real tokens and 0 for padding. Because relu makes every
/// value ≥ 0, zeroing padded rows before the max is the same as the reference's `-1e6` masking.
/// The max runs in the logits' dtype (exact in any dtype); `log(1 + x)` runs in f32.
pub fn splade_pool(logits: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let relu = logits.relu()?;
    let relu = match mask {
        Some(mask) => relu.broadcast_mul(&mask.to_dtype(relu.dtype())?.unsqueeze(D::Minus1)?)?,
        None => relu,
    };
    let max = relu.max(1)?.to_dtype(DType::F32)?;
    Ok(max.affine(1.0, 1.0)?.log()?)
}

/// Turns pooled `(batch, vocab)` weights into sparse vectors named by the vocabulary's tokens;
/// zero weights are dropped.
pub fn to_sparse(pooled: &Tensor, vocab: &Vocabulary) -> Result<Vec<SparseVector>> {
    let rows = pooled.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    rows.iter()
        .map(|row| {
            if row.len() != vocab.len() {
                return Err(ModelError::Invalid(format!(
                    "the encoder scores {} terms but its vocabulary has {}",
                    row.len(),
                    vocab.len()
                )));
            }
            let pairs = row
                .iter()
                .enumerate()
                .filter(|(_, w)| **w != 0.0)
                .map(|(i, w)| (vocab.tokens()[i].as_str(), *w));
            Ok(SparseVector::new(pairs)?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn padding_never_contributes() {
        let dev = Device::Cpu;
        // batch 1, 3 tokens (last is padding with a huge logit), vocab 2.
        let logits = Tensor::new(&[[[1.0f32, -2.0], [0.5, -1.0], [9.0, 9.0]]], &dev).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 0]], &dev).unwrap();
        let p = splade_pool(&logits, Some(&mask))
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert!((p[0][0] - 2f32.ln()).abs() < 1e-6);
        assert_eq!(p[0][1], 0.0);
        let vocab = Vocabulary::new("t", vec!["a".into(), "b".into()]);
        let v = to_sparse(&Tensor::new(&[[0.5f32, 0.0]], &dev).unwrap(), &vocab).unwrap();
        assert_eq!(v[0].len(), 1);
        assert_eq!(v[0].get("a"), Some(0.5));
    }
}
