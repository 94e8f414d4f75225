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

/// Bisection steps of [`top_k`]'s threshold: from `[0, max]` to below an f32 ulp of weights up
/// to ~10.
const BISECTION_STEPS: usize = 40;

/// `(batch, vocab)` non-negative weights with all but the `k` largest of each row set to zero;
/// the gradient reaches the kept weights only.
///
/// The cut is a threshold found by bisection on the device (no sort: CUDA's sort kernel holds a
/// whole row in shared memory, which a 30,522-term row overflows). It keeps the weights strictly
/// above the smallest `t` with `#{p > t} ≤ k`: exactly the top `k` when the `k`-th and
/// `k+1`-th weights differ, fewer when they tie (never more than `k`).
pub fn top_k(p: &Tensor, k: usize) -> Result<Tensor> {
    let vocab = p.dim(D::Minus1)?;
    if k >= vocab {
        return Ok(p.clone());
    }
    let keep = if p.device().is_cpu() && p.dtype() == DType::F32 && p.rank() == 2 {
        top_k_mask_host(&p.detach(), k)?
    } else {
        top_k_mask(&p.detach(), k)?
    };
    Ok((p * keep)?)
}

/// [`top_k`]'s keep mask (1 = kept), bisected with tensor ops on any device.
fn top_k_mask(w: &Tensor, k: usize) -> Result<Tensor> {
    let limit = k as f64;
    // lo: more than k above it (or 0); hi: at most k above it. Counts are summed in f32.
    let mut lo = Tensor::zeros((w.dim(0)?, 1), w.dtype(), w.device())?;
    let mut hi = w.max_keepdim(D::Minus1)?;
    for _ in 0..BISECTION_STEPS {
        let mid = ((&lo + &hi)? * 0.5)?;
        let above = w
            .broadcast_gt(&mid)?
            .to_dtype(DType::F32)?
            .sum_keepdim(D::Minus1)?;
        let too_many = above.gt(limit)?;
        lo = too_many.where_cond(&mid, &lo)?;
        hi = too_many.where_cond(&hi, &mid)?;
    }
    Ok(w.broadcast_gt(&hi)?.to_dtype(w.dtype())?)
}

/// [`top_k_mask`] for f32 rows on the CPU, the same bisection with the same f32 arithmetic, so
/// the same mask, without 40 passes over the row: more than `k` weights lie above `mid` exactly
/// when the row's `k+1`-th largest weight does, so one selection answers every step.
fn top_k_mask_host(w: &Tensor, k: usize) -> Result<Tensor> {
    let rows = w.to_vec2::<f32>()?;
    let mut mask = Vec::with_capacity(rows.len() * rows.first().map_or(0, Vec::len));
    let mut scratch = Vec::new();
    for row in &rows {
        let hi = top_k_threshold(row, k, &mut scratch);
        mask.extend(row.iter().map(|&x| if x > hi { 1f32 } else { 0.0 }));
    }
    Ok(Tensor::from_vec(mask, w.shape(), w.device())?)
}

/// The threshold of [`top_k_mask`] for one row of `k` < `row.len()`: the row keeps the weights
/// strictly above it. `scratch` is reused between rows.
pub(crate) fn top_k_threshold(row: &[f32], k: usize, scratch: &mut Vec<f32>) -> f32 {
    scratch.clear();
    scratch.extend_from_slice(row);
    let (_, next, _) = scratch.select_nth_unstable_by(k, |a, b| b.total_cmp(a));
    let next = *next;
    let (mut lo, mut hi) = (0f32, row.iter().copied().fold(f32::MIN, f32::max));
    for _ in 0..BISECTION_STEPS {
        let mid = (lo + hi) * 0.5;
        if next > mid {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
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
            // In the terms' string order, so that the vector needs no sort.
            let tokens = vocab.tokens();
            let pairs = vocab
                .ids_by_text()
                .iter()
                .map(|&i| (i as usize, row[i as usize]))
                .filter(|(_, w)| *w != 0.0)
                .map(|(i, w)| (tokens[i].as_str(), w));
            Ok(SparseVector::new(pairs)?)
        })
        .collect()
}

/// Sparse vectors of `(index, weight)` rows, named by the vocabulary's tokens.
pub(crate) fn rows_to_sparse(
    rows: Vec<Vec<(usize, f32)>>,
    vocab: &Vocabulary,
) -> Result<Vec<SparseVector>> {
    let tokens = vocab.tokens();
    rows.into_iter()
        .map(|mut row| {
            vocab.sort_by_text(&mut row);
            if let Some((i, _)) = row.iter().find(|(i, _)| *i >= tokens.len()) {
                return Err(ModelError::Invalid(format!(
                    "the encoder scores term {i} but its vocabulary has {}",
                    tokens.len()
                )));
            }
            Ok(SparseVector::new(
                row.into_iter().map(|(i, w)| (tokens[i].as_str(), w)),
            )?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use proptest::prelude::{Just, Strategy};

    /// The plain oracle: sort each row and keep the k largest (ties broken towards keeping
    /// fewer, as the threshold does).
    fn top_k_plain(row: &[f32], k: usize) -> Vec<f32> {
        let mut sorted: Vec<f32> = row.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if k >= row.len() {
            return row.to_vec();
        }
        let next = sorted[k];
        row.iter()
            .map(|&x| if x > next { x } else { 0.0 })
            .collect()
    }

    /// 1-4 rows of 40 non-negative weights, with zeros and ties.
    fn weight_rows() -> impl Strategy<Value = Vec<Vec<f32>>> {
        proptest::collection::vec(
            proptest::collection::vec(
                proptest::prop_oneof![Just(0.0f32), 0.0f32..6.0, (0u8..4).prop_map(f32::from)],
                40,
            ),
            1..5,
        )
    }

    proptest::proptest! {
        /// The CPU selection gives the bisection's mask bit for bit, ties and zeros included.
        #[test]
        fn host_mask_equals_the_device_bisection(
            rows in weight_rows(),
            k in 0usize..40,
        ) {
            let b = rows.len();
            let w = Tensor::from_slice(&rows.concat(), (b, 40), &Device::Cpu).unwrap();
            let device = top_k_mask(&w, k).unwrap().to_vec2::<f32>().unwrap();
            let host = top_k_mask_host(&w, k).unwrap().to_vec2::<f32>().unwrap();
            proptest::prop_assert_eq!(host, device);
        }

        /// Lexicons built in the terms' string order equal the plain construction from id order
        /// (a vocabulary whose ids are not in string order), for dense rows and for
        /// `(id, weight)` rows in any order.
        #[test]
        fn lexicons_equal_the_plain_construction(rows in weight_rows(), seed in 0usize..40) {
            let tokens: Vec<String> = (0..40).map(|i| format!("t{}", (i * 7 + seed) % 40)).collect();
            let vocab = Vocabulary::new("t", tokens.clone());
            let plain = |row: &[f32]| {
                SparseVector::new(
                    row.iter().enumerate().filter(|(_, w)| **w != 0.0).map(|(i, w)| (tokens[i].as_str(), *w)),
                ).unwrap()
            };
            let b = rows.len();
            let p = Tensor::from_slice(&rows.concat(), (b, 40), &Device::Cpu).unwrap();
            let dense = to_sparse(&p, &vocab).unwrap();
            let pairs: Vec<Vec<(usize, f32)>> = rows
                .iter()
                .map(|r| r.iter().copied().enumerate().filter(|(_, w)| *w != 0.0).rev().collect())
                .collect();
            let listed = rows_to_sparse(pairs, &vocab).unwrap();
            for ((row, d), l) in rows.iter().zip(&dense).zip(&listed) {
                proptest::prop_assert_eq!(d, &plain(row));
                proptest::prop_assert_eq!(l, &plain(row));
            }
        }

        #[test]
        fn top_k_equals_sorting(
            rows in weight_rows(),
            k in 0usize..45,
        ) {
            let b = rows.len();
            let flat: Vec<f32> = rows.concat();
            let p = Tensor::from_slice(&flat, (b, 40), &Device::Cpu).unwrap();
            let got = top_k(&p, k).unwrap().to_vec2::<f32>().unwrap();
            for (row, got) in rows.iter().zip(&got) {
                proptest::prop_assert_eq!(got, &top_k_plain(row, k));
            }
        }
    }

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
