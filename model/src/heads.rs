//! Lexicon heads over a frozen dense model (D2S, Nguyen et al., ECIR 2024): a photo user's
//! CLIP, SigLIP, MobileCLIP or lexlip's own dense dual encoder stays as it is, and one linear layer per
//! side maps its unit-length embedding onto the word-piece vocabulary:
//!
//! ```text
//! embedding x (dim) ──▶ m = W·(x − c) + b (vocab) ──▶ p = log(1 + relu(m)) ⊙ allowed ──▶ top-K
//! ```
//!
//! `c` is the mean embedding of the side's training inputs. A dense model's images (texts)
//! share a large common component (the modality gap: the mean of unit-length image embeddings
//! has length ~0.6); a row of `W` that aligned with it would raise its term for every image
//! alike. Centred, a term's weight follows what sets an input apart, and only the bias can make
//! a term common, which the FLOPS regulariser sees.
//!
//! Why a linear head over the pooled embedding: the dense model already put images and texts
//! in one space, so a term's row of `W` can start as the dense model's own embedding of that
//! word (`lexlip train --objective heads` does): an image's first lexicon is then the words
//! whose embedding is nearest to the picture's, for words the training captions never used
//! too. The embedding is what every dense model gives (no per-architecture code), and training
//! touches only cached embeddings.
//!
//! `allowed` (1 or 0 per term) keeps terms that can name nothing out of every lexicon: special
//! tokens, pieces without a letter or digit, function words.
//!
//! A heads directory (`heads/` of a model directory whose `dense/` is the backbone):
//! ```text
//! config.json        {"model_type": "lexlip-lexicon-heads", "dim": 256, "vocab_size": 30522,
//!                     "image_top_k": 64, "text_top_k": 32}
//! model.safetensors  image_head.weight (vocab, dim), image_head.bias (vocab),
//!                    image_head.center (dim), text_head.{weight,bias,center}, allowed (vocab)
//! tokenizer.json     the vocabulary's word pieces (the terms the index stores); or the
//!                    model directory's, shared by its parts (`vocab::tokenizer_json`)
//! ```

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::{read_json, with_defaults};
use crate::error::{ModelError, Result};
use crate::pooling::top_k;
use crate::weights::Weights;

/// `model_type` of a heads directory's `config.json`.
pub const MODEL_TYPE: &str = "lexlip-lexicon-heads";
/// Tensor names.
pub const IMAGE_HEAD: &str = "image_head";
pub const TEXT_HEAD: &str = "text_head";
pub const ALLOWED: &str = "allowed";

/// The error of asking an encoder that is not lexicon heads (`this`: what it is and reads)
/// for the lexicons of dense embeddings.
pub(crate) fn not_heads(this: &str) -> ModelError {
    ModelError::Invalid(format!(
        "only lexicon heads compute lexicons from dense embeddings; this {this}"
    ))
}

/// A heads directory's `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadsConfig {
    pub model_type: String,
    /// The backbone's embedding dimension.
    pub dim: usize,
    pub vocab_size: usize,
    /// Top-K pooling per side (0: every non-zero term).
    #[serde(default)]
    pub image_top_k: usize,
    #[serde(default)]
    pub text_top_k: usize,
}

impl HeadsConfig {
    pub fn read(path: &Path) -> Result<Self> {
        let c: HeadsConfig = with_defaults(path, &read_json(path)?, serde_json::json!({}))?;
        if c.model_type != MODEL_TYPE {
            return Err(ModelError::config(
                path,
                format!("model_type is {:?}, expected {MODEL_TYPE:?}", c.model_type),
            ));
        }
        if c.dim == 0 || c.vocab_size == 0 {
            return Err(ModelError::config(
                path,
                "dim and vocab_size must be positive",
            ));
        }
        Ok(c)
    }
}

/// One side's head: `(batch, dim)` embeddings → `(batch, vocab)` lexicon weights.
///
/// Served as one matrix product: the centre, the bias and the allowed terms are folded into an
/// augmented weight at load, `[W ⊙ a | (b − W·c) ⊙ a − (1 − a)]`, so that a row of `[x | 1]`
/// gives `W·(x − c) + b` for an allowed term and −1 (weight 0 after `relu`) for any other,
/// with no vocabulary-wide elementwise pass but `log(1 + relu(·))`. It equals
/// [`lexicon_weights`], which training uses, up to rounding (tested).
#[derive(Debug, Clone)]
pub struct LexiconHead {
    map: Map,
    vocab: usize,
    dim: usize,
    top_k: Option<usize>,
}

/// What maps an embedding onto the vocabulary's logits.
#[derive(Debug, Clone)]
enum Map {
    /// lexlip's linear head, folded: `(dim + 1, vocab)`.
    Folded(Tensor),
    /// D2S's published head ([`crate::d2s`]): a projection, a layer norm, the projector.
    D2s(Box<crate::d2s::D2sHead>),
}

impl LexiconHead {
    /// D2S's head ([`crate::d2s`]), cut to `top_k` (0: every positive term).
    pub fn d2s(head: crate::d2s::D2sHead, top_k: usize) -> Self {
        Self {
            vocab: head.vocab_size(),
            dim: head.config().dense_size,
            top_k: (top_k > 0).then_some(top_k),
            map: Map::D2s(Box::new(head)),
        }
    }

    /// The head's logits `(batch, vocab)` of embeddings `x` `(batch, dim)`, before
    /// `log(1 + relu)`.
    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.to_dtype(DType::F32)?;
        match &self.map {
            Map::Folded(folded) => {
                let ones = Tensor::ones((x.dim(0)?, 1), DType::F32, x.device())?;
                Ok(Tensor::cat(&[&x, &ones], 1)?.matmul(folded)?)
            }
            Map::D2s(head) => head.logits(&x),
        }
    }

    pub fn new(
        weight: Tensor,
        bias: Tensor,
        center: Tensor,
        allowed: Tensor,
        top_k: usize,
    ) -> Result<Self> {
        let (vocab, dim) = weight.dims2()?;
        if bias.dims1()? != vocab || allowed.dims1()? != vocab || center.dims1()? != dim {
            return Err(ModelError::Invalid(format!(
                "a lexicon head's bias ({:?}), allowed terms ({:?}) and centre ({:?}) must fit \
                 its {vocab} × {dim} weight",
                bias.dims(),
                allowed.dims(),
                center.dims()
            )));
        }
        let (weight, bias, center, allowed) = (
            weight.to_dtype(DType::F32)?,
            bias.to_dtype(DType::F32)?,
            center.to_dtype(DType::F32)?,
            allowed.to_dtype(DType::F32)?,
        );
        let shifted = (&bias - weight.matmul(&center.unsqueeze(1)?)?.squeeze(1)?)?;
        let folded_bias = ((shifted * &allowed)? - (1.0 - &allowed)?)?;
        let folded = Tensor::cat(
            &[
                weight.broadcast_mul(&allowed.unsqueeze(1)?)?,
                folded_bias.unsqueeze(1)?,
            ],
            1,
        )?
        .t()?
        .contiguous()?;
        Ok(Self {
            map: Map::Folded(folded),
            vocab,
            dim,
            top_k: (top_k > 0).then_some(top_k),
        })
    }

    /// Lexicon weights `(batch, vocab)` in f32 of unit-length embeddings `x` `(batch, dim)`,
    /// before any top-K cut ([`lexicon_weights`], folded).
    pub fn weights(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.logits(x)?.relu()?.affine(1.0, 1.0)?.log()?)
    }

    /// The lexicons of unit-length embeddings `x` `(batch, dim)` as `(term, weight)` rows, cut
    /// to `top_k`: what [`Self::weights`], [`crate::pooling::top_k`] and
    /// [`crate::pooling::to_sparse`] give (the same f32 arithmetic: `ln(max(m, 0) + 1)` and the
    /// same threshold), on the host after one matrix product. `log` runs for positive logits
    /// only and no vocabulary-wide tensor is made again: those passes, not the product, were
    /// most of the time of a million stored embeddings' lexicons. Falls back to the tensor
    /// ops off the CPU.
    pub fn sparse_rows(&self, x: &Tensor, top_k: Option<usize>) -> Result<Vec<Vec<(usize, f32)>>> {
        if !x.device().is_cpu() {
            let p = self.weights(x)?;
            let p = match top_k {
                Some(k) => crate::pooling::top_k(&p, k)?,
                None => p,
            };
            let rows = p.to_vec2::<f32>()?;
            return Ok(rows
                .into_iter()
                .map(|r| {
                    r.into_iter()
                        .enumerate()
                        .filter(|(_, w)| *w != 0.0)
                        .collect()
                })
                .collect());
        }
        let logits = self.logits(x)?.to_vec2::<f32>()?;
        let mut scratch = Vec::new();
        Ok(logits
            .into_iter()
            .map(|mut row| {
                for m in row.iter_mut() {
                    // relu, then affine(1, 1) and log as candle computes them in f32.
                    let r = m.max(0f32);
                    *m = if r > 0.0 { (r * 1.0 + 1.0).ln() } else { 0.0 };
                }
                let hi = match top_k {
                    Some(k) if k < row.len() => {
                        Some(crate::pooling::top_k_threshold(&row, k, &mut scratch))
                    }
                    _ => None,
                };
                row.into_iter()
                    .enumerate()
                    .filter(|(_, w)| *w != 0.0 && hi.is_none_or(|hi| *w > hi))
                    .collect()
            })
            .collect())
    }

    /// [`Self::weights`] cut to the head's own K.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let p = self.weights(x)?;
        Ok(match self.top_k {
            Some(k) => top_k(&p, k)?,
            None => p,
        })
    }

    pub fn top_k(&self) -> Option<usize> {
        self.top_k
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// Both heads of a heads directory.
#[derive(Debug, Clone)]
pub struct Heads {
    pub config: HeadsConfig,
    pub image: LexiconHead,
    pub text: LexiconHead,
    /// Whose heads these are: lexlip's (`lexlip train --objective heads`) or a published
    /// architecture's.
    pub kind: HeadsKind,
}

/// The architectures a heads directory can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadsKind {
    /// lexlip's linear heads, one per side.
    Lexlip,
    /// D2S's one head for both sides ([`crate::d2s`]); its queries keep their own words only.
    D2s,
}

impl Heads {
    /// Loads `dir/config.json` and `dir/model.safetensors` (f32 on the CPU, the file's dtype
    /// converted to f32 anywhere: the heads are small); a D2S directory as published.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        if crate::d2s::is_d2s(&read_json(&cfg_path)?) {
            let head = crate::d2s::D2sHead::load(dir, device)?;
            let config = HeadsConfig {
                model_type: crate::d2s::MODEL_TYPE.into(),
                dim: head.config().dense_size,
                vocab_size: head.vocab_size(),
                image_top_k: 0,
                text_top_k: 0,
            };
            let head = LexiconHead::d2s(head, 0);
            return Ok(Self {
                config,
                image: head.clone(),
                text: head,
                kind: HeadsKind::D2s,
            });
        }
        let config = HeadsConfig::read(&cfg_path)?;
        let weights = Weights::from_safetensors_dir(dir)?;
        let get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let t = weights.get(name).ok_or_else(|| ModelError::MissingTensor {
                file: weights.source().to_path_buf(),
                name: name.to_string(),
            })?;
            if t.dims() != shape {
                return Err(ModelError::ShapeMismatch {
                    file: weights.source().to_path_buf(),
                    name: name.to_string(),
                    expected: shape.to_vec(),
                    got: t.dims().to_vec(),
                });
            }
            Ok(t.to_dtype(DType::F32)?.to_device(device)?)
        };
        let (v, d) = (config.vocab_size, config.dim);
        let allowed = get(ALLOWED, &[v])?;
        let head = |name: &str, k: usize| -> Result<LexiconHead> {
            LexiconHead::new(
                get(&format!("{name}.weight"), &[v, d])?,
                get(&format!("{name}.bias"), &[v])?,
                get(&format!("{name}.center"), &[d])?,
                allowed.clone(),
                k,
            )
        };
        Ok(Self {
            image: head(IMAGE_HEAD, config.image_top_k)?,
            text: head(TEXT_HEAD, config.text_top_k)?,
            config,
            kind: HeadsKind::Lexlip,
        })
    }
}

/// `log(1 + relu(W·(x − c) + b)) ⊙ allowed`: one head's lexicon weights `(batch, vocab)` of
/// embeddings `x` `(batch, dim)`, with `weight` `(vocab, dim)`, `bias` and `allowed` `(vocab)`,
/// `center` `(dim)`. Training (`lexlip train --objective heads`) and the encoders compute it
/// here, so the trained lexicon is the served one by construction.
pub fn lexicon_weights(
    x: &Tensor,
    center: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    allowed: &Tensor,
) -> Result<Tensor> {
    weights_of_logits(&head_logits(x, center, weight, bias)?, allowed)
}

/// `W·(x − c) + b` `(batch, vocab)`: a head's logits, before [`weights_of_logits`].
pub fn head_logits(x: &Tensor, center: &Tensor, weight: &Tensor, bias: &Tensor) -> Result<Tensor> {
    Ok(x.broadcast_sub(center)?
        .matmul(&weight.t()?)?
        .broadcast_add(bias)?)
}

/// `log(1 + relu(z)) ⊙ allowed`: lexicon weights of a head's logits `z`.
pub fn weights_of_logits(logits: &Tensor, allowed: &Tensor) -> Result<Tensor> {
    Ok(logits
        .relu()?
        .affine(1.0, 1.0)?
        .log()?
        .broadcast_mul(allowed)?)
}

/// `(batch, dim)` rows of unit vectors on `device`.
pub fn rows_tensor(rows: &[lexlip_proto::DenseVector], device: &Device) -> Result<Tensor> {
    let dim = rows.first().map(|r| r.dim()).unwrap_or(0);
    let mut flat = Vec::with_capacity(rows.len() * dim);
    for r in rows {
        if r.dim() != dim {
            return Err(ModelError::Invalid(
                "embeddings of one batch differ in length".into(),
            ));
        }
        flat.extend_from_slice(r.as_slice());
    }
    Ok(Tensor::from_vec(flat, (rows.len(), dim), device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folded head serves what training computes ([`lexicon_weights`]): allowed terms up
    /// to rounding, every other term exactly 0.
    #[test]
    fn the_folded_head_equals_the_training_formula() {
        let dev = Device::Cpu;
        let (vocab, dim, batch) = (97, 16, 5);
        let weight = Tensor::randn(0f32, 1.0, (vocab, dim), &dev).unwrap();
        let bias = Tensor::randn(0f32, 0.5, vocab, &dev).unwrap();
        let center = Tensor::randn(0f32, 0.3, dim, &dev).unwrap();
        let allowed: Vec<f32> = (0..vocab).map(|t| f32::from(t % 3 != 0)).collect();
        let allowed = Tensor::from_vec(allowed, vocab, &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (batch, dim), &dev).unwrap();
        let want = lexicon_weights(&x, &center, &weight, &bias, &allowed)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let head = LexiconHead::new(weight, bias, center, allowed, 0).unwrap();
        let got = head.weights(&x).unwrap().to_vec2::<f32>().unwrap();
        let mut positive = 0;
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
            positive += usize::from(*w > 0.0);
        }
        for t in (0..vocab).filter(|t| t % 3 == 0) {
            assert!(got.iter().all(|row| row[t] == 0.0));
        }
        assert!(positive > batch * vocab / 4, "{positive} positive weights");
    }

    proptest::proptest! {
        /// The fused host path equals the tensor path it replaces, bit for bit: `weights`,
        /// then `top_k`, then the non-zero entries. Ties are made on purpose (weights rounded
        /// to a coarse grid), where the threshold keeps fewer than K.
        #[test]
        fn sparse_rows_equal_the_tensor_path(
            seed in 0u64..1000,
            k in 0usize..40,
            coarse in proptest::bool::ANY,
        ) {
            let dev = Device::Cpu;
            let (vocab, dim, batch) = (61, 8, 4);
            let r = |n: usize, s: u64| -> Vec<f32> {
                (0..n)
                    .map(|i| {
                        let h = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (seed + s);
                        let v = ((h >> 11) % 2001) as f32 / 1000.0 - 1.0;
                        if coarse { (v * 4.0).round() / 4.0 } else { v }
                    })
                    .collect()
            };
            let t = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(v, shape, &dev).unwrap();
            let allowed: Vec<f32> = (0..vocab).map(|t| f32::from(t % 5 != 0)).collect();
            let head = LexiconHead::new(
                t(r(vocab * dim, 1), &[vocab, dim]),
                t(r(vocab, 2), &[vocab]),
                t(r(dim, 3), &[dim]),
                t(allowed, &[vocab]),
                0,
            )
            .unwrap();
            let x = t(r(batch * dim, 4), &[batch, dim]);
            let top = (k > 0).then_some(k);
            let p = head.weights(&x).unwrap();
            let p = match top {
                Some(k) => crate::pooling::top_k(&p, k).unwrap(),
                None => p,
            };
            let want: Vec<Vec<(usize, f32)>> = p
                .to_vec2::<f32>()
                .unwrap()
                .into_iter()
                .map(|row| row.into_iter().enumerate().filter(|(_, w)| *w != 0.0).collect())
                .collect();
            let got = head.sparse_rows(&x, top).unwrap();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
