//! BERT's masked-LM head (`cls.predictions.*`): a transform (dense, activation, layer norm), then
//! a projection onto the vocabulary. LexLIP's towers put it on every token (text) or patch
//! (image) and max-pool the result into a lexicon (SPLADE pooling, [`crate::pooling`]).
//!
//! Written once for inference and training (a [`Params`] and a [`Mode`], as [`crate::nn`]'s
//! layers). For inference, [`MlmHead::pooled`] fuses the projection with the pooling on the CPU:
//! pooling needs only each term's largest logit over an item's tokens, so the projection runs one
//! block of terms at a time and keeps the maxima. The `(batch, tokens, vocab)` logits, 66 MB
//! for 32 images of 17 patches, are never materialised, and padding tokens are not projected.
//! Elsewhere (a GPU, f16) it runs the plain `splade_pool(forward(..))`, which tests hold the
//! fused path to.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Activation, VarBuilder};
use candle_transformers::models::bert::{Config as BertConfig, HiddenAct};
use rayon::prelude::*;

use crate::error::{ModelError, Result};
use crate::fast::kernels::{Strided, matmul};
use crate::nn::{INIT_STD, Inference, Init, LayerNorm, Linear, Mode, Params, linear};
use crate::pooling::splade_pool;

/// Terms projected at once by the fused path: the block's logits (rows × terms) stay in cache.
const TERMS_PER_BLOCK: usize = 512;

#[derive(Debug, Clone)]
pub struct MlmHead {
    dense: Linear,
    act: Activation,
    norm: LayerNorm,
    /// `(vocab, hidden)`.
    decoder: Tensor,
    bias: Tensor,
}

impl MlmHead {
    /// `pb` is rooted at `cls`. `tied`: the word embeddings to project with (no
    /// `predictions.decoder.weight` is read or created then).
    pub fn new<P: Params>(
        pb: &P,
        hidden: usize,
        vocab: usize,
        act: Activation,
        eps: f64,
        tied: Option<&Tensor>,
    ) -> std::result::Result<Self, P::Error> {
        let p = pb.pp("predictions");
        let t = p.pp("transform");
        let decoder = match tied {
            Some(w) => w.clone(),
            None => p.get(&[vocab, hidden], "decoder.weight", Init::Normal(INIT_STD))?,
        };
        Ok(Self {
            dense: Linear::new(&t.pp("dense"), hidden, hidden, true)?,
            act,
            norm: LayerNorm::new(&t.pp("LayerNorm"), hidden, eps)?,
            decoder,
            bias: p.get(&[vocab], "bias", Init::Const(0.0))?,
        })
    }

    /// The head of a checkpoint (`pb` rooted at `cls`, its own `decoder.weight`) with the
    /// sizes, activation and epsilon of candle-transformers' BERT config.
    pub fn from_bert_config(pb: &VarBuilder, config: &BertConfig) -> candle_core::Result<Self> {
        let act = match config.hidden_act {
            HiddenAct::Gelu => Activation::Gelu,
            HiddenAct::GeluApproximate => Activation::NewGelu,
            HiddenAct::Relu => Activation::Relu,
        };
        Self::new(
            pb,
            config.hidden_size,
            config.vocab_size,
            act,
            config.layer_norm_eps,
            None,
        )
    }

    /// Hidden states `(…, hidden)` → the transform's output `(…, hidden)`.
    fn transform(&self, hidden: &Tensor, mode: &dyn Mode) -> candle_core::Result<Tensor> {
        let x = self.act.forward(&self.dense.forward(hidden)?)?;
        self.norm.forward(&x, mode)
    }

    /// Hidden states `(…, hidden)` → logits `(…, vocab)`.
    pub fn forward(&self, hidden: &Tensor, mode: &dyn Mode) -> candle_core::Result<Tensor> {
        linear(
            &self.transform(hidden, mode)?,
            &self.decoder,
            Some(&self.bias),
        )
    }

    /// Lexicon weights `(batch, vocab)` in f32 of hidden states `(batch, tokens, hidden)`:
    /// `splade_pool(forward(hidden), mask)`, for inference. `mask` is `(batch, tokens)`, 1 for
    /// real tokens.
    pub fn pooled(&self, hidden: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let x = self.transform(hidden, &Inference)?;
        let host = x.device().is_cpu()
            && x.dtype() == DType::F32
            && self.decoder.dtype() == DType::F32
            && self.bias.dtype() == DType::F32;
        if !host {
            let logits = linear(&x, &self.decoder, Some(&self.bias))?;
            return splade_pool(&logits, mask);
        }
        let (batch, tokens, width) = x.dims3()?;
        let rows = x.flatten_all()?.to_vec1::<f32>()?;
        // Each item's real tokens, gathered into consecutive rows.
        let (rows, items) = match mask {
            None => (rows, vec![tokens; batch]),
            Some(mask) => {
                let mask = mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
                let mut kept = Vec::with_capacity(rows.len());
                let mut items = Vec::with_capacity(batch);
                for (b, m) in mask.iter().enumerate() {
                    let real: Vec<usize> = (0..tokens).filter(|&t| m[t] > 0.5).collect();
                    for t in &real {
                        let at = (b * tokens + t) * width;
                        kept.extend_from_slice(&rows[at..at + width]);
                    }
                    items.push(real.len());
                }
                (kept, items)
            }
        };
        let bias = self.bias.to_vec1::<f32>()?;
        let weights = with_cpu_slice(&self.decoder, |w| {
            Ok(decode_and_pool(&rows, width, &items, w, &bias))
        })?;
        Ok(Tensor::from_vec(
            weights,
            (batch, bias.len()),
            &Device::Cpu,
        )?)
    }
}

/// Runs `f` on the f32 elements of a contiguous CPU tensor, without copying them.
fn with_cpu_slice<T>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<T>) -> Result<T> {
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*storage else {
        return Err(ModelError::Invalid("expected a tensor on the CPU".into()));
    };
    let all = cpu.as_slice::<f32>()?;
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Err(ModelError::Invalid("expected a contiguous tensor".into()));
    };
    f(&all[start..end])
}

/// `out[i][v] = ln(1 + max(0, max over item i's rows r of (rows[r] · w[v] + bias[v])))`: the
/// decoder and SPLADE pooling in one pass. `rows` holds `items[0]` rows of `width` for the first
/// item, then the second's, …; `w` is `(vocab, width)` row-major. Returns `(items, vocab)`.
fn decode_and_pool(
    rows: &[f32],
    width: usize,
    items: &[usize],
    w: &[f32],
    bias: &[f32],
) -> Vec<f32> {
    let vocab = bias.len();
    let n_rows = rows.len() / width.max(1);
    debug_assert_eq!(items.iter().sum::<usize>(), n_rows);
    debug_assert_eq!(w.len(), vocab * width);
    let starts: Vec<usize> = (0..vocab).step_by(TERMS_PER_BLOCK).collect();
    // Each block's pooled weights (items × block terms), then laid out as (items × vocab).
    let blocks: Vec<Vec<f32>> = starts
        .par_iter()
        .map(|&v0| {
            let terms = TERMS_PER_BLOCK.min(vocab - v0);
            let mut logits = vec![0f32; n_rows * terms];
            if n_rows > 0 && width > 0 {
                // SAFETY: `logits` is (n_rows × terms) row-major (row stride `terms`); `rows` is
                // (n_rows × width) row-major; the right-hand side is the transpose of `w`'s rows
                // v0..v0 + terms: element (k, j) at w[(v0 + j) · width + k], inside `w`. The
                // three buffers are distinct and outlive the call; nothing else writes `logits`.
                unsafe {
                    matmul(
                        (n_rows, terms, width),
                        Strided {
                            ptr: logits.as_mut_ptr(),
                            row: terms,
                            col: 1,
                        },
                        false,
                        Strided {
                            ptr: rows.as_ptr(),
                            row: width,
                            col: 1,
                        },
                        Strided {
                            ptr: w[v0 * width..].as_ptr(),
                            row: 1,
                            col: width,
                        },
                        gemm::Parallelism::None,
                    );
                }
            }
            let b = &bias[v0..v0 + terms];
            let mut pooled = vec![0f32; items.len() * terms];
            let mut row = 0;
            for (i, &n) in items.iter().enumerate() {
                let out = &mut pooled[i * terms..(i + 1) * terms];
                for r in row..row + n {
                    let l = &logits[r * terms..(r + 1) * terms];
                    for ((o, &x), &b) in out.iter_mut().zip(l).zip(b) {
                        *o = o.max(x + b);
                    }
                }
                row += n;
                for o in out.iter_mut() {
                    *o = (*o + 1.0).ln();
                }
            }
            pooled
        })
        .collect();
    let mut out = vec![0f32; items.len() * vocab];
    for (&v0, block) in starts.iter().zip(&blocks) {
        let terms = block.len() / items.len().max(1);
        for i in 0..items.len() {
            out[i * vocab + v0..i * vocab + v0 + terms]
                .copy_from_slice(&block[i * terms..(i + 1) * terms]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use proptest::prelude::*;

    /// `n` values uniform in `[-scale, scale)` from `seed` (a fixed xorshift stream).
    fn uniform(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// A head with random weights, as a checkpoint would give.
    fn head(hidden: usize, vocab: usize, seed: u64) -> MlmHead {
        let device = Device::Cpu;
        let mut stream = seed;
        let mut randn = |shape: &[usize], scale: f32| {
            stream += 1;
            Tensor::from_vec(
                uniform(shape.iter().product(), stream, scale),
                shape,
                &device,
            )
            .unwrap()
        };
        // A spread of decoder biases, as a trained head has (some terms never fire).
        let bias: Vec<f32> = (0..vocab as u64)
            .map(|v| ((v * 2654435761 + seed) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        let tensors = HashMap::from([
            (
                "predictions.transform.dense.weight".to_string(),
                randn(&[hidden, hidden], 0.3),
            ),
            (
                "predictions.transform.dense.bias".to_string(),
                randn(&[hidden], 0.1),
            ),
            (
                "predictions.transform.LayerNorm.weight".to_string(),
                randn(&[hidden], 1.0),
            ),
            (
                "predictions.transform.LayerNorm.bias".to_string(),
                randn(&[hidden], 0.1),
            ),
            (
                "predictions.decoder.weight".to_string(),
                randn(&[vocab, hidden], 0.5),
            ),
            (
                "predictions.bias".to_string(),
                Tensor::from_vec(bias, vocab, &device).unwrap(),
            ),
        ]);
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        MlmHead::new(&vb, hidden, vocab, Activation::Gelu, 1e-12, None).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// The fused CPU path equals the decoder's logits pooled by `splade_pool`, padding
        /// excluded, for any batch, length and vocabulary (blocks cut mid-vocabulary included).
        #[test]
        fn fused_pooling_equals_plain_pooling(
            batch in 1usize..5,
            tokens in 1usize..9,
            vocab in prop_oneof![Just(7usize), 500usize..1600],
            seed in 0u64..1000,
            lengths in proptest::collection::vec(1usize..9, 5),
        ) {
            let hidden = 16;
            let h = head(hidden, vocab, seed);
            let x = uniform(batch * tokens * hidden, seed + 100, 2.0);
            let x = Tensor::from_vec(x, (batch, tokens, hidden), &Device::Cpu).unwrap();
            let mut mask = Vec::with_capacity(batch * tokens);
            for len in &lengths[..batch] {
                mask.extend((0..tokens).map(|t| u32::from(t < *len)));
            }
            let mask = Tensor::from_vec(mask, (batch, tokens), &Device::Cpu).unwrap();
            for m in [None, Some(&mask)] {
                let fused = h.pooled(&x, m).unwrap().to_vec2::<f32>().unwrap();
                let logits = h.forward(&x, &Inference).unwrap();
                let plain = splade_pool(&logits, m).unwrap().to_vec2::<f32>().unwrap();
                for (f, p) in fused.iter().flatten().zip(plain.iter().flatten()) {
                    prop_assert!((f - p).abs() <= 1e-5 * (1.0 + p.abs()), "{f} vs {p}");
                }
            }
        }
    }

    #[test]
    fn an_item_without_real_tokens_pools_to_zero() {
        let h = head(8, 40, 1);
        let x = Tensor::from_vec(uniform(48, 7, 2.0), (2, 3, 8), &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(vec![1u32, 1, 0, 0, 0, 0], (2, 3), &Device::Cpu).unwrap();
        let w = h.pooled(&x, Some(&mask)).unwrap().to_vec2::<f32>().unwrap();
        assert!(w[1].iter().all(|&v| v == 0.0));
        assert!(w[0].iter().any(|&v| v > 0.0));
    }
}
